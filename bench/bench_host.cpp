// bench_host.cpp — Google Benchmark suite for the host backend's
// accumulation kernels, ops of the op table (harness/core/op_table.h): each is
// validated against the reference, with the tolerance model's bound, before
// it is timed; timings are reported as a ratio to a ceiling measured in the
// same run (bench/ceiling.h), never as absolute pass/fail:
//   * memory bandwidth: a STREAM triad over arrays far larger than the
//     last-level cache;
//   * arithmetic: Eigen's float32 GEMM of the same shape (the faster of two
//     layouts), keyed to it by the label "rows x in x out"
//     (flops_per_s@256x256x256, ...).
// (The reference's float64 GEMMs have theirs in bench_reference.cpp.)
#define EIGEN_DONT_PARALLELIZE
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

// GCC 12 reports _mm512_undefined_ps() in Eigen's AVX-512 packing as
// maybe-uninitialized (a false positive: GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "bench/ceiling.h"
#include "bench/validated_op.h"
#include "kernels/cpu/cpu_backend.h"

namespace {

using namespace gradeq;

// Elements per stream of the bandwidth benchmarks: 64 MiB of float32 per
// array, twice the last-level cache of the machines this runs on, so that
// every stream comes from memory.
constexpr long kStreamElements = 1L << 24;

// STREAM triad, a = b + s c: the memory bandwidth a streaming float32
// kernel can reach here, counted as 3 streams (read b, read c, write a).
// An ordinary store would also read a's line before writing it (write
// allocate), moving 4 streams for the 3 counted; non-temporal stores (x86)
// write a without reading it, so what is counted is what moves. The
// arrays are heap memory the compiler cannot see through (the loop is
// redone every iteration), and a is checked after the last one.
void BM_CeilingStreamTriad(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const std::size_t bytes = n * sizeof(float);
  float* a = static_cast<float*>(std::aligned_alloc(64, bytes));
  float* b = static_cast<float*>(std::aligned_alloc(64, bytes));
  float* c = static_cast<float*>(std::aligned_alloc(64, bytes));
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = 0.0f;
    b[i] = static_cast<float>(i % 1024);
    c[i] = 2.0f;
  }
  float s = 0.5f;
  benchmark::DoNotOptimize(s);
  for (auto _ : state) {
#if defined(__SSE__)
    const __m128 vs = _mm_set1_ps(s);
    for (std::size_t i = 0; i < n; i += 4)
      _mm_stream_ps(a + i, _mm_add_ps(_mm_load_ps(b + i), _mm_mul_ps(vs, _mm_load_ps(c + i))));
    _mm_sfence();
#else
    for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
#endif
    benchmark::DoNotOptimize(a);
    benchmark::ClobberMemory();
  }
  for (std::size_t i = 0; i < n; i += n / 7 + 1)
    if (a[i] != b[i] + s * c[i]) state.SkipWithError("triad: wrong result");
  std::free(a);
  std::free(b);
  std::free(c);
  state.counters["bytes_per_s"] = benchmark::Counter(3.0 * static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
}

// Eigen's blocked GEMM in Scalar (one thread) of the weight gradient's
// shape, rows = the reduction and [out, in] the result, in two layouts:
// layout 0, column-major C = A B (A [out, rows], B [rows, in]); layout 1,
// the op's own, row-major C = A^T B (A [rows, out], B [rows, in]). Both
// report under the shape's label, so the ceiling is the faster of the two.
template <class Scalar>
void eigen_gemm_ceiling(benchmark::State& state, const char* counter) {
  using ColMajor = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  using RowMajor = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const long rows = state.range(0), in = state.range(1), out = state.range(2);
  const bool op_layout = state.range(3) != 0;
  const std::vector<float> av = bench::random_values(out * rows, 1), bv = bench::random_values(rows * in, 2);
  const auto input = [](const std::vector<float>& v, long r, long c) {
    return RowMajor(Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(v.data(), r, c)
                        .template cast<Scalar>());
  };
  if (op_layout) {
    const RowMajor a = input(av, rows, out), b = input(bv, rows, in);
    RowMajor c(out, in);
    for (auto _ : state) {
      c.noalias() = a.transpose() * b;
      benchmark::DoNotOptimize(c.data());
      benchmark::ClobberMemory();
    }
  } else {
    const ColMajor a = input(av, out, rows), b = input(bv, rows, in);
    ColMajor c(out, in);
    for (auto _ : state) {
      c.noalias() = a * b;
      benchmark::DoNotOptimize(c.data());
      benchmark::ClobberMemory();
    }
  }
  state.SetLabel(bench::shape_label(rows, in, out));
  state.counters[counter] = benchmark::Counter(2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out),
                                               benchmark::Counter::kIsIterationInvariantRate);
}

void BM_CeilingGemmFloat32(benchmark::State& state) { eigen_gemm_ceiling<float>(state, "flops_per_s"); }

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

// dw += dy^T x with beta = 1: flop rate / the same shape's float32 GEMM.
void BM_WeightGradientGemm(benchmark::State& state) {
  const long rows = state.range(0), in = state.range(1), out = state.range(2);
  host_op(state, "linear_backward_weight", {rows, in, out});
  state.SetLabel(bench::shape_label(rows, in, out));
}

// grad += micro-batch grad (optionally Kahan) over a list of 4 tensors,
// kStreamElements in all: bytes moved / the triad's bandwidth.
void BM_Accumulate(benchmark::State& state) {
  host_op(state, state.range(1) != 0 ? "accumulate_kahan" : "accumulate", {state.range(0) / 4, 1, 4});
}

// Attention's forward and backward on the host, the plain form: samples x
// positions, two heads of head_dim columns. Its validation reports
// natural_order_ratio, 1 here by construction (the plain form is the host's).
void BM_Attention(benchmark::State& state) {
  host_op(state, "attention", {state.range(0), state.range(1), state.range(2)});
}

// conv2d's forward, input gradient and weight gradient on the host (im2col
// and the float32 GEMM): 2 samples of 64 channels at 64 x 64 through a 3x3
// with padding 1 to 64 channels (the op table's case 5), validated first.
void BM_Conv2d(benchmark::State& state) { host_op(state, "conv2d", {state.range(0), 5, 0}); }

// rows x in x out: a square layer, a transformer MLP's up-projection (1024
// tokens, 768 -> 3072), a tall narrow one.
const std::vector<std::vector<long>> kGemmShapes = {{256, 256, 256}, {1024, 768, 3072}, {8192, 64, 64}};

void gemm_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "in", "out"});
  for (const auto& s : kGemmShapes) b->Args(s);
}

void gemm_ceiling_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "in", "out", "layout"});
  for (const auto& s : kGemmShapes)
    for (long layout : {0, 1}) b->Args({s[0], s[1], s[2], layout});
}

// Three repetitions: the ceiling is the fastest (bandwidth on a shared
// machine varies from second to second).
BENCHMARK(BM_CeilingStreamTriad)->Arg(kStreamElements)->Repetitions(3);
BENCHMARK(BM_CeilingGemmFloat32)->Apply(gemm_ceiling_shapes);
BENCHMARK(BM_WeightGradientGemm)->Apply(gemm_shapes);
BENCHMARK(BM_Attention)->ArgNames({"samples", "positions", "head_dim"})->Args({2, 128, 64});
BENCHMARK(BM_Conv2d)->ArgNames({"samples"})->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Accumulate)->ArgNames({"elements", "kahan"})->Args({kStreamElements, 0})->Args({kStreamElements, 1});

}  // namespace

int main(int argc, char** argv) { return gradeq::bench::run_benchmarks(argc, argv); }
