// bench_cuda.cpp — Google Benchmark suite for the CUDA backend's
// accumulation kernels (built with the CUDA backend; needs a device). Each
// kernel is validated before it is timed; GPU time comes from CUDA events
// (manual time), and each rate is reported as a fraction of a ceiling
// measured in the same run: device-to-device cudaMemcpy for bandwidth, the
// same cuBLAS GEMM with beta = 0 for the weight gradient.
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "bench/ceiling.h"
#include "harness/tolerance.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "reference/layers.h"

namespace {

using namespace gradeq;
using bench::random_values;
using cuda::cuda_type;

// Times `op` on the GPU with events, for every iteration of `state`.
template <class Op>
void time_on_device(benchmark::State& state, Op&& op) {
  cudaEvent_t start, stop;
  GRADEQ_CUDA_CHECK(cudaEventCreate(&start));
  GRADEQ_CUDA_CHECK(cudaEventCreate(&stop));
  for (auto _ : state) {
    GRADEQ_CUDA_CHECK(cudaEventRecord(start));
    op();
    GRADEQ_CUDA_CHECK(cudaEventRecord(stop));
    GRADEQ_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    GRADEQ_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(static_cast<double>(ms) * 1e-3);
  }
  GRADEQ_CUDA_CHECK(cudaEventDestroy(start));
  GRADEQ_CUDA_CHECK(cudaEventDestroy(stop));
}

Tensor upload(Backend& b, long rows, long cols, DType t, std::uint64_t seed) {
  Tensor x = b.allocate(rows, cols, t);
  b.upload(x, random_values(rows * cols, seed));
  return x;
}

std::vector<float> download(Backend& b, const Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.size()));
  b.download(t, v);
  return v;
}

// Device-to-device copy: read n, write n.
void BM_CeilingDeviceCopy(benchmark::State& state) {
  const long n = state.range(0);
  CudaBackend cuda;
  const Tensor a = cuda.allocate(1, n, DType::f32), b = cuda.allocate(1, n, DType::f32);
  time_on_device(state, [&] {
    GRADEQ_CUDA_CHECK(cudaMemcpy(b.data, a.data, static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice));
  });
  state.counters["bytes_per_s"] =
      benchmark::Counter(2.0 * static_cast<double>(n) * sizeof(float), benchmark::Counter::kIsIterationInvariantRate);
}

// The weight-gradient GEMM's shape and types with beta = 0, straight from
// cuBLAS (float32 compute): what the accumulating one is measured against.
void BM_CeilingGemm(benchmark::State& state) {
  const long rows = state.range(0), in = state.range(1), out = state.range(2);
  const DType t = static_cast<DType>(state.range(3));
  CudaBackend cuda;
  const Tensor x = upload(cuda, rows, in, t, 1), dy = upload(cuda, rows, out, t, 2);
  const Tensor dw = cuda.allocate(out, in, DType::f32);
  cublasHandle_t handle;
  GRADEQ_CUBLAS_CHECK(cublasCreate(&handle));
  const float one = 1.0f, zero = 0.0f;
  time_on_device(state, [&] {
    GRADEQ_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(in), static_cast<int>(out),
                                     static_cast<int>(rows), &one, x.data, cuda_type(t), static_cast<int>(in), dy.data,
                                     cuda_type(t), static_cast<int>(out), &zero, dw.data, CUDA_R_32F,
                                     static_cast<int>(in), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
  GRADEQ_CUBLAS_CHECK(cublasDestroy(handle));
  state.counters["flops_per_s"] = benchmark::Counter(2.0 * static_cast<double>(rows * in * out),
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

// True when dw += dy^T x on a small problem of dtype t is within the
// reference's float32 bound (the inputs are exact in t).
bool weight_gradient_is_correct(CudaBackend& cuda, DType t) {
  const long rows = 96, in = 40, out = 24;
  const Tensor x = upload(cuda, rows, in, t, 3), dy = upload(cuda, rows, out, t, 4);
  const Tensor dw = cuda.allocate(out, in, DType::f32), db = cuda.allocate(1, out, DType::f32);
  const Tensor grads[] = {dw, db};
  cuda.zero(grads);
  cuda.linear_backward_weight(dy, x, dw, db);
  const std::vector<float> xv = download(cuda, x), dyv = download(cuda, dy), got = download(cuda, dw);
  ref::Matrix<ref::Bounded> xr(rows, in), dyr(rows, out);
  for (long i = 0; i < xr.size(); ++i) xr.data()[i] = ref::Bounded(xv[static_cast<std::size_t>(i)]);
  for (long i = 0; i < dyr.size(); ++i) dyr.data()[i] = ref::Bounded(dyv[static_cast<std::size_t>(i)]);
  const auto expected = ref::linear_backward(xr, ref::zeros<ref::Bounded>(out, in), dyr).dw;
  for (long i = 0; i < expected.size(); ++i) {
    const auto& e = expected.data()[i];
    if (!(std::abs(got[static_cast<std::size_t>(i)] - e.value) <= kernel_bound(e.kernel_bound, e.reference))) return false;
  }
  return true;
}

// dw += dy^T x (beta = 1) and db += column sums; correctness checked on a
// small problem of the same dtype first.
void BM_WeightGradient(benchmark::State& state) {
  const long rows = state.range(0), in = state.range(1), out = state.range(2);
  const DType t = static_cast<DType>(state.range(3));
  CudaBackend cuda;
  const Tensor x = upload(cuda, rows, in, t, 3), dy = upload(cuda, rows, out, t, 4);
  const Tensor dw = cuda.allocate(out, in, DType::f32), db = cuda.allocate(1, out, DType::f32);
  if (!weight_gradient_is_correct(cuda, t)) {
    state.SkipWithError("weight-gradient GEMM disagrees with the reference");
    return;
  }
  const Tensor grads[] = {dw, db};
  cuda.zero(grads);
  time_on_device(state, [&] { cuda.linear_backward_weight(dy, x, dw, db); });
  state.counters["flops_per_s"] = benchmark::Counter(2.0 * static_cast<double>(rows * in * out),
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

// grad += micro-batch grad over 64 tensors in one launch (float32 or
// bfloat16 source; optionally Kahan): bytes moved / the copy ceiling.
void BM_MultiTensorAccumulate(benchmark::State& state) {
  const long per = state.range(0) / 64;
  const DType src_type = static_cast<DType>(state.range(1));
  const bool kahan = state.range(2) != 0;
  CudaBackend cuda;
  std::vector<Tensor> dst, src, comp;
  for (int i = 0; i < 64; ++i) {
    dst.push_back(upload(cuda, 1, per + i, DType::f32, 10 + static_cast<std::uint64_t>(i)));  // odd tails
    src.push_back(upload(cuda, 1, per + i, src_type, 100 + static_cast<std::uint64_t>(i)));
    comp.push_back(cuda.allocate(1, per + i, DType::f32));
  }
  cuda.zero(comp);
  const std::vector<float> a = download(cuda, dst[7]), b = download(cuda, src[7]);
  cuda.accumulate(dst, src, kahan ? std::span<const Tensor>(comp) : std::span<const Tensor>());
  const std::vector<float> got = download(cuda, dst[7]);
  for (std::size_t i = 0; i < a.size(); ++i)
    if (got[i] != a[i] + b[i]) {  // one correctly rounded float32 add (Kahan's first add is plain)
      state.SkipWithError("accumulate disagrees with a + b");
      return;
    }
  time_on_device(state, [&] { cuda.accumulate(dst, src, kahan ? std::span<const Tensor>(comp) : std::span<const Tensor>()); });
  double bytes = 0.0;
  for (int i = 0; i < 64; ++i)
    bytes += static_cast<double>(per + i) * (2.0 * 4.0 + (src_type == DType::f32 ? 4.0 : 2.0) + (kahan ? 8.0 : 0.0));
  state.counters["bytes_per_s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

// The global gradient norm over 64 tensors: read once.
void BM_GlobalNorm(benchmark::State& state) {
  const long per = state.range(0) / 64;
  CudaBackend cuda;
  std::vector<Tensor> ts;
  double exact = 0.0;
  for (int i = 0; i < 64; ++i) {
    ts.push_back(upload(cuda, 1, per, DType::f32, 200 + static_cast<std::uint64_t>(i)));
    for (float v : download(cuda, ts.back())) exact += static_cast<double>(v) * v;
  }
  // Deterministic float32 bound on a sum of n squares (NUMERICS.md §2):
  // gamma_n sum |x_i^2|, and the square root halves the relative error.
  const double n = static_cast<double>(per) * 64, u = 0x1p-24;
  const double bound = 0.5 * (n * u / (1 - n * u)) * std::sqrt(exact) + u * std::sqrt(exact);
  if (!(std::abs(cuda.global_norm(ts) - std::sqrt(exact)) <= bound)) {
    state.SkipWithError("global norm outside its bound");
    return;
  }
  float norm = 0.0f;
  time_on_device(state, [&] { norm = cuda.global_norm(ts); });
  benchmark::DoNotOptimize(norm);
  state.counters["bytes_per_s"] =
      benchmark::Counter(4.0 * n, benchmark::Counter::kIsIterationInvariantRate);
}

// The bias gradient of a tall batch, deterministic (one block per column,
// fixed order) or not (row slices combined with atomicAdd).
void BM_BiasGradient(benchmark::State& state) {
  const long rows = state.range(0), cols = state.range(1);
  const bool deterministic = state.range(2) != 0;
  CudaBackend cuda;
  cuda.set_deterministic(deterministic);
  const Tensor x = upload(cuda, rows, 1, DType::f32, 5), dy = upload(cuda, rows, cols, DType::f32, 6);
  const Tensor dw = cuda.allocate(cols, 1, DType::f32), db = cuda.allocate(1, cols, DType::f32);
  time_on_device(state, [&] { cuda.linear_backward_weight(dy, x, dw, db); });
  state.counters["bytes_per_s"] =
      benchmark::Counter(2.0 * 4.0 * static_cast<double>(rows * cols), benchmark::Counter::kIsIterationInvariantRate);
}

constexpr long kF32 = static_cast<long>(DType::f32), kBf16 = static_cast<long>(DType::bf16);

BENCHMARK(BM_CeilingDeviceCopy)->Arg(1 << 26)->UseManualTime();
BENCHMARK(BM_CeilingGemm)->ArgNames({"rows", "in", "out", "dtype"})->Args({8192, 4096, 4096, kF32})->UseManualTime();
BENCHMARK(BM_WeightGradient)->ArgNames({"rows", "in", "out", "dtype"})->Args({8192, 4096, 4096, kF32})
    ->Args({8192, 4096, 4096, kBf16})->UseManualTime();
BENCHMARK(BM_MultiTensorAccumulate)->ArgNames({"elements", "src_dtype", "kahan"})->Args({1 << 26, kF32, 0})
    ->Args({1 << 26, kBf16, 0})->Args({1 << 26, kF32, 1})->UseManualTime();
BENCHMARK(BM_GlobalNorm)->Arg(1 << 26)->UseManualTime();
BENCHMARK(BM_BiasGradient)->ArgNames({"rows", "cols", "deterministic"})->Args({1 << 16, 1024, 1})
    ->Args({1 << 16, 1024, 0})->UseManualTime();

}  // namespace

int main(int argc, char** argv) {
  const CudaDeviceStatus device = cuda_device_status();
  if (!device.available) {
    std::fprintf(stderr, "gradeq_bench_cuda: %s\n", device.detail.c_str());
    return 3;
  }
  return gradeq::bench::run_benchmarks(argc, argv);
}
