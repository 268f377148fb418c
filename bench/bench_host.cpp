// bench_host.cpp — Google Benchmark suite for the host backend's
// accumulation kernels, ops of the op table (harness/op_checks.h): each is
// validated against the reference, with the tolerance model's bound, before
// it is timed; timings are reported as a ratio to a ceiling measured in the
// same run (memory bandwidth by a STREAM triad, arithmetic by an FMA loop),
// never as absolute pass/fail.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "bench/ceiling.h"
#include "bench/validated_op.h"
#include "kernels/cpu/cpu_backend.h"

namespace {

using namespace gradeq;

// STREAM triad, a = b + s c: the memory bandwidth a streaming float32
// kernel can reach here (3 streams, as plain accumulation has).
void BM_CeilingStreamTriad(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  for (auto _ : state) {
    for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + 0.5f * c[i];
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  const double bytes = 3.0 * static_cast<double>(n * sizeof(float));
  state.counters["bytes_per_s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

// 64 independent multiply-add chains (vectorizable by the compiler, as the
// GEMM's inner loop is): the float32 arithmetic rate this core reaches.
void BM_CeilingFma(benchmark::State& state) {
  float acc[64];
  for (int i = 0; i < 64; ++i) acc[i] = static_cast<float>(i);
  const float m = 0.999999f, a = 1e-7f;
  const long inner = 1 << 16;
  for (auto _ : state) {
    for (long i = 0; i < inner; ++i)
      for (float& x : acc) x = x * m + a;
    benchmark::DoNotOptimize(acc);
  }
  state.counters["flops_per_s"] = benchmark::Counter(2.0 * 64 * inner, benchmark::Counter::kIsIterationInvariantRate);
}

// Times an op of the op table on the host backend, after validating it.
void host_op(benchmark::State& state, const std::string& name, const OpSize& size) {
  CpuBackend cpu;
  bench::validated_op(state, cpu, name, size, DType::f32, [&](auto&& run) {
    for (auto _ : state) {
      run();
      benchmark::ClobberMemory();
    }
  });
}

// dw += dy^T x with beta = 1: flop rate / FMA ceiling.
void BM_WeightGradientGemm(benchmark::State& state) {
  host_op(state, "linear_backward_weight", {state.range(0), state.range(1), state.range(2)});
}

// grad += micro-batch grad (optionally Kahan) over a list: bytes moved / the triad's bandwidth.
void BM_Accumulate(benchmark::State& state) {
  host_op(state, state.range(1) != 0 ? "accumulate_kahan" : "accumulate", {state.range(0), 1, 1});
}

BENCHMARK(BM_CeilingStreamTriad)->Arg(1 << 22);
BENCHMARK(BM_CeilingFma);
BENCHMARK(BM_WeightGradientGemm)->ArgNames({"rows", "in", "out"})->Args({256, 256, 256})->Args({1024, 64, 64});
BENCHMARK(BM_Accumulate)->ArgNames({"elements", "kahan"})->Args({1 << 22, 0})->Args({1 << 22, 1});

}  // namespace

int main(int argc, char** argv) { return gradeq::bench::run_benchmarks(argc, argv); }
