// bench_cuda.cpp — Google Benchmark suite for the CUDA backend's
// accumulation kernels (built with the CUDA backend; needs a device), ops of
// the op table (harness/core/op_table.h): each is validated against the
// reference, with the tolerance model's bound, before it is timed; GPU time
// comes from CUDA events (manual time), and each rate is reported as a
// fraction of a ceiling measured in the same run: device-to-device
// cudaMemcpy for bandwidth, the same cuBLAS GEMM with beta = 0 for the
// weight gradient.
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "bench/ceiling.h"
#include "bench/validated_op.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

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

// Times an op of the op table on the GPU, after validating it.
void cuda_op(benchmark::State& state, const std::string& name, const OpSize& size, DType dtype,
             bool deterministic = true) {
  CudaBackend cuda;
  cuda.set_deterministic(deterministic);
  bench::validated_op(state, cuda, name, size, dtype, [&](auto&& run) { time_on_device(state, run); });
}

// dw += dy^T x (beta = 1) and db += column sums: flop rate / the beta = 0 GEMM.
void BM_WeightGradient(benchmark::State& state) {
  cuda_op(state, "linear_backward_weight", {state.range(0), state.range(1), state.range(2)},
          static_cast<DType>(state.range(3)));
}

// grad += micro-batch grad over 64 tensors in one launch (float32 or
// bfloat16 source; optionally Kahan): bytes moved / the copy ceiling.
void BM_MultiTensorAccumulate(benchmark::State& state) {
  cuda_op(state, state.range(2) != 0 ? "accumulate_kahan" : "accumulate", {state.range(0) / 64, 1, 64},
          static_cast<DType>(state.range(1)));
}

// The global gradient norm over 64 tensors: read once.
void BM_GlobalNorm(benchmark::State& state) { cuda_op(state, "global_norm", {state.range(0) / 64, 1, 64}, DType::f32); }

// The bias gradient of a tall batch (a weight gradient of width 1),
// deterministic (one block per column, fixed order) or not (row slices
// combined with atomicAdd).
void BM_BiasGradient(benchmark::State& state) {
  cuda_op(state, "linear_backward_weight", {state.range(0), 1, state.range(1)}, DType::f32, state.range(2) != 0);
}

// Attention's forward and backward: samples x positions, two heads of
// head_dim columns, deterministic (dQ per key block, summed in order) or
// not (atomicAdd across key blocks). Validated first (its counter
// natural_order_ratio: the kernel's error over the host's plain form's,
// FlashAttention's ratio), at a size the float64 reference does in seconds.
void BM_Attention(benchmark::State& state) {
  cuda_op(state, "attention", {state.range(0), state.range(1), state.range(2)}, static_cast<DType>(state.range(3)),
          state.range(4) != 0);
}

constexpr long kF32 = static_cast<long>(DType::f32), kBf16 = static_cast<long>(DType::bf16);

// conv2d's forward, input gradient and weight gradient (im2col and cuBLAS;
// the weight gradient with beta = 1): samples of 64 channels at 64 x 64,
// a 3x3 with padding 1 to 64 channels (the op table's case 5), validated
// first.
void BM_Conv2d(benchmark::State& state) {
  cuda_op(state, "conv2d", {state.range(0), 5, 0}, static_cast<DType>(state.range(1)), true);
}

BENCHMARK(BM_CeilingDeviceCopy)->Arg(1 << 26)->UseManualTime();
BENCHMARK(BM_CeilingGemm)->ArgNames({"rows", "in", "out", "dtype"})->Args({8192, 4096, 4096, kF32})->UseManualTime();
BENCHMARK(BM_WeightGradient)->ArgNames({"rows", "in", "out", "dtype"})->Args({8192, 4096, 4096, kF32})
    ->Args({8192, 4096, 4096, kBf16})->UseManualTime();
BENCHMARK(BM_MultiTensorAccumulate)->ArgNames({"elements", "src_dtype", "kahan"})->Args({1 << 26, kF32, 0})
    ->Args({1 << 26, kBf16, 0})->Args({1 << 26, kF32, 1})->UseManualTime();
BENCHMARK(BM_GlobalNorm)->Arg(1 << 26)->UseManualTime();
BENCHMARK(BM_Attention)->ArgNames({"samples", "positions", "head_dim", "dtype", "deterministic"})
    ->Args({4, 256, 64, kBf16, 1})->Args({4, 256, 64, kBf16, 0})->Args({4, 256, 72, kF32, 1})->UseManualTime();
BENCHMARK(BM_Conv2d)->ArgNames({"samples", "dtype"})->Args({2, kF32})->Args({2, kBf16})->UseManualTime();
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
