// bench_host.cpp — Google Benchmark suite for the host backend's
// accumulation kernels. Each kernel is validated against the reference
// (within its error bound) before it is timed; timings are reported as a
// ratio to a ceiling measured in the same run (memory bandwidth by a STREAM triad,
// arithmetic by an FMA loop), never as absolute pass/fail.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "bench/ceiling.h"
#include "harness/tolerance.h"
#include "kernels/cpu/cpu_backend.h"
#include "reference/layers.h"

namespace {

using namespace gradeq;
using bench::random_values;

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

// dw += dy^T x with beta = 1: validated, then timed; flop rate / FMA ceiling.
void BM_WeightGradientGemm(benchmark::State& state) {
  const long rows = state.range(0), in = state.range(1), out = state.range(2);
  CpuBackend cpu;
  const std::vector<float> xv = random_values(rows * in, 1), dyv = random_values(rows * out, 2);
  Tensor x = cpu.allocate(rows, in, DType::f32), dy = cpu.allocate(rows, out, DType::f32);
  Tensor dw = cpu.allocate(out, in, DType::f32), db = cpu.allocate(1, out, DType::f32);
  cpu.upload(x, xv);
  cpu.upload(dy, dyv);
  const Tensor grads[] = {dw, db};
  cpu.zero(grads);
  cpu.linear_backward_weight(dy, x, dw, db);
  {
    ref::Matrix<ref::Bounded> xr(rows, in), dyr(rows, out), wr(out, in);
    for (long i = 0; i < xr.size(); ++i) xr.data()[i] = ref::Bounded(xv[i]);
    for (long i = 0; i < dyr.size(); ++i) dyr.data()[i] = ref::Bounded(dyv[i]);
    for (long i = 0; i < wr.size(); ++i) wr.data()[i] = ref::Bounded(0.0);
    const auto expected = ref::linear_backward(xr, wr, dyr).dw;
    std::vector<float> got(static_cast<std::size_t>(dw.size()));
    cpu.download(dw, got);
    for (long i = 0; i < expected.size(); ++i) {
      const auto& e = expected.data()[i];
      if (!(std::abs(got[i] - e.value) <= kernel_bound(e.kernel_bound, e.reference))) {
        state.SkipWithError("weight-gradient GEMM disagrees with the reference");
        return;
      }
    }
  }
  for (auto _ : state) {
    cpu.linear_backward_weight(dy, x, dw, db);
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * static_cast<double>(rows * in * out);
  state.counters["flops_per_s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

// grad += micro-batch grad: bytes moved / the triad's bandwidth.
void BM_Accumulate(benchmark::State& state) {
  const long n = state.range(0);
  const bool compensated = state.range(1) != 0;
  CpuBackend cpu;
  const std::vector<float> a = random_values(n, 3), b = random_values(n, 4);
  Tensor dst = cpu.allocate(1, n, DType::f32), src = cpu.allocate(1, n, DType::f32), comp = cpu.allocate(1, n, DType::f32);
  cpu.upload(dst, a);
  cpu.upload(src, b);
  const Tensor d[] = {dst}, s[] = {src}, c[] = {comp};
  const Tensor cz[] = {comp};
  cpu.zero(cz);
  cpu.accumulate(d, s, compensated ? std::span<const Tensor>(c) : std::span<const Tensor>());
  std::vector<float> got(static_cast<std::size_t>(n));
  cpu.download(dst, got);
  for (long i = 0; i < n; ++i)
    if (got[i] != a[i] + b[i]) {  // one correctly rounded float32 add
      state.SkipWithError("accumulate disagrees with a + b");
      return;
    }
  for (auto _ : state) {
    cpu.accumulate(d, s, compensated ? std::span<const Tensor>(c) : std::span<const Tensor>());
    benchmark::ClobberMemory();
  }
  const double bytes = (compensated ? 5.0 : 3.0) * static_cast<double>(n) * sizeof(float);
  state.counters["bytes_per_s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_CeilingStreamTriad)->Arg(1 << 22);
BENCHMARK(BM_CeilingFma);
BENCHMARK(BM_WeightGradientGemm)->ArgNames({"rows", "in", "out"})->Args({256, 256, 256})->Args({1024, 64, 64});
BENCHMARK(BM_Accumulate)->ArgNames({"elements", "kahan"})->Args({1 << 22, 0})->Args({1 << 22, 1});

}  // namespace

int main(int argc, char** argv) { return gradeq::bench::run_benchmarks(argc, argv); }
