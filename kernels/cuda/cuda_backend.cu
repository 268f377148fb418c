// cuda_backend.cu — the CUDA backend's device, memory and conversions:
// device status, construction, allocation with peak tracking, upload,
// download, fill and convert. The ops live beside it, one file per op or
// family (gemm.cu, elementwise.cu, normalizers.cu, losses.cu, ...), each
// with the same skeleton: kernels, then the host side that checks shapes,
// launches and checks the launch.
#include "kernels/cuda/cuda_backend.h"

#include <string>

#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

__global__ void from_float(const float* src, void* dst, DType t, long n) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x)
    store(dst, t, i, src[i]);
}

__global__ void to_float(const void* src, DType t, float* dst, long n) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x)
    dst[i] = load(src, t, i);
}

__global__ void fill_kernel(void* dst, DType t, long n, float value) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x)
    store(dst, t, i, value);
}

__global__ void convert_kernel(const void* src, DType ts, void* dst, DType td, long n) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x)
    store(dst, td, i, load(src, ts, i));
}

}  // namespace

namespace cuda {
void convert_on_device(const void* src, DType ts, void* dst, DType td, long n) {
  convert_kernel<<<blocks_for(n), kThreads>>>(src, ts, dst, td, n);
  GRADEQ_LAUNCH_CHECK();
}
}  // namespace cuda

CudaDeviceStatus cuda_device_status() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of the query
    return {false, std::string("no CUDA device: ") + cudaGetErrorString(status)};
  }
  if (count == 0) return {false, "no CUDA device: the driver reports none"};
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return {false, "no CUDA device: properties unavailable"};
  return {true, std::string(prop.name) + ", compute capability " + std::to_string(prop.major) + "." +
                    std::to_string(prop.minor)};
}

CudaBackend::CudaBackend(ConvForm conv_form) : impl_(std::make_unique<Impl>()), conv_form_(conv_form) {
  GRADEQ_CUDA_CHECK(cudaSetDevice(0));
  GRADEQ_CUBLAS_CHECK(cublasCreate(&impl_->cublas));
  // Plain float32 (no TF32) for float32 inputs; tensor cores with float32
  // accumulation for bfloat16 / float16 inputs (docs/NUMERICS.md §1). No
  // reduced-precision reductions: split-K partial sums of a bf16/f16 output
  // would otherwise be combined in the output's type, not in float32.
  GRADEQ_CUBLAS_CHECK(cublasSetMathMode(
      impl_->cublas, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  GRADEQ_CUDA_CHECK(cudaMalloc(&impl_->flag, sizeof(int)));
  GRADEQ_CUDA_CHECK(cudaMalloc(&impl_->scalar, sizeof(float)));
}

CudaBackend::~CudaBackend() {
  // Destructors do not throw: errors here are reported by the next call.
  for (auto& [ptr, bytes] : allocations_) cudaFree(const_cast<void*>(ptr));
  for (float* s : impl_->scratch) cudaFree(s);
  cudaFree(impl_->chunks);
  cudaFree(impl_->partials);
  cudaFree(impl_->flag);
  cudaFree(impl_->scalar);
  if (impl_->cublas) cublasDestroy(impl_->cublas);
}

float* CudaBackend::scratch(long count, int slot) {
  auto& ptr = impl_->scratch[static_cast<std::size_t>(slot)];
  auto& size = impl_->scratch_size[static_cast<std::size_t>(slot)];
  if (count > size || !ptr) {
    Impl::reallocate(ptr, size, count);
    peak_bytes_ = std::max(peak_bytes_, live_bytes());
  }
  return ptr;
}

std::size_t CudaBackend::live_bytes() const { return live_bytes_ + impl_->workspace_bytes(); }

// The chunk lists grow inside list ops without a note here; they are a few
// bytes per 64k elements, counted when the peak is read.
std::size_t CudaBackend::peak_bytes() const { return std::max(peak_bytes_, live_bytes()); }

void CudaBackend::reset_peak_bytes() {
  impl_->drop_workspace();
  peak_bytes_ = live_bytes_;
}

Tensor CudaBackend::allocate(long rows, long cols, DType dtype) {
  GRADEQ_REQUIRE(rows >= 0 && cols >= 0, "allocate: negative shape");
  Tensor t{nullptr, rows, cols, dtype};
  const std::size_t bytes = static_cast<std::size_t>(std::max(rows * cols, 1L)) * element_bytes(dtype);
  GRADEQ_CUDA_CHECK(cudaMalloc(&t.data, bytes));
  allocations_[t.data] = bytes;
  live_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, live_bytes());
  return t;
}

void CudaBackend::release(Tensor& t) {
  auto it = allocations_.find(t.data);
  GRADEQ_REQUIRE(it != allocations_.end(), "release: tensor not allocated by this backend");
  live_bytes_ -= it->second;
  allocations_.erase(it);
  GRADEQ_CUDA_CHECK(cudaFree(t.data));
  t = Tensor{};
}

void CudaBackend::upload(const Tensor& dst, std::span<const float> host) {
  GRADEQ_REQUIRE(static_cast<long>(host.size()) == dst.size(), "upload: size mismatch");
  if (dst.empty()) return;
  float* staging = scratch(dst.size(), 1);
  GRADEQ_CUDA_CHECK(cudaMemcpy(staging, host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
  from_float<<<blocks_for(dst.size()), kThreads>>>(staging, dst.data, dst.dtype, dst.size());
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::download(const Tensor& src, std::span<float> host) {
  GRADEQ_REQUIRE(static_cast<long>(host.size()) == src.size(), "download: size mismatch");
  if (src.empty()) return;
  float* staging = scratch(src.size(), 1);
  to_float<<<blocks_for(src.size()), kThreads>>>(src.data, src.dtype, staging, src.size());
  GRADEQ_LAUNCH_CHECK();
  GRADEQ_CUDA_CHECK(cudaMemcpy(host.data(), staging, host.size_bytes(), cudaMemcpyDeviceToHost));
}

void CudaBackend::fill(const Tensor& t, float value) {
  if (t.empty()) return;
  fill_kernel<<<blocks_for(t.size()), kThreads>>>(t.data, t.dtype, t.size(), value);
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::convert(const Tensor& src, const Tensor& dst) {
  require_shape(dst, src.rows, src.cols, "convert");
  if (src.empty()) return;
  convert_kernel<<<blocks_for(src.size()), kThreads>>>(src.data, src.dtype, dst.data, dst.dtype, src.size());
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::set_deterministic(bool on) {
  deterministic_ = on;
  GRADEQ_CUBLAS_CHECK(
      cublasSetAtomicsMode(impl_->cublas, on ? CUBLAS_ATOMICS_NOT_ALLOWED : CUBLAS_ATOMICS_ALLOWED));
}

}  // namespace gradeq
