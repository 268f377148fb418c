// cuda_backend.cu — the CUDA kernels and cuBLAS calls of CudaBackend.
// Skeleton of every op: check shapes on the host, launch, check the launch.
// Reductions are block-level, strided then a shared-memory tree, always in
// the same order: results do not depend on timing.
#include "kernels/cuda/cuda_backend.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/element_math.h"

namespace gradeq {
namespace {

constexpr int kThreads = 256;

// ------------------------------------------------------------ dtype access

__device__ inline float load(const void* p, DType t, long i) {
  switch (t) {
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::f32: break;
  }
  return static_cast<const float*>(p)[i];
}

// Round to nearest even into the tensor's dtype, as round_to() does on the host.
__device__ inline void store(void* p, DType t, long i, float v) {
  switch (t) {
    case DType::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); return;
    case DType::f16: static_cast<__half*>(p)[i] = __float2half_rn(v); return;
    case DType::f32: break;
  }
  static_cast<float*>(p)[i] = v;
}

std::size_t element_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::f32: break;
  }
  return CUDA_R_32F;
}

int blocks_for(long n) { return static_cast<int>(std::min<long>((n + kThreads - 1) / kThreads, 65535)); }

void require_shape(const Tensor& t, long rows, long cols, const char* what) {
  GRADEQ_REQUIRE(t.rows == rows && t.cols == cols,
                 std::string(what) + ": expected [" + std::to_string(rows) + ", " + std::to_string(cols) +
                     "], got [" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "]");
}

// Sum over a block, fixed order: every thread's strided partial, then a
// shared-memory tree. All threads get the result.
__device__ float block_sum(float v) {
  __shared__ float partial[kThreads];
  __syncthreads();
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float total = partial[0];
  __syncthreads();
  return total;
}

// --------------------------------------------------------- simple kernels

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

// y[i, o] = acc[i, o] + b[o], stored in y's dtype (acc is the GEMM's float32 result).
__global__ void bias_epilogue(const float* acc, const void* b, DType tb, void* y, DType ty, long rows, long cols) {
  const long n = rows * cols;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x)
    store(y, ty, i, acc[i] + (b ? load(b, tb, i % cols) : 0.0f));
}

// The sum over rows [slice * per, ...) of column c, per = ceil(rows / slices),
// by the whole block; fixed order within the slice.
__device__ float slice_column_sum(const void* dy, DType t, long rows, long cols, long c, long slice, long slices) {
  const long per = (rows + slices - 1) / slices;
  const long end = (slice + 1) * per < rows ? (slice + 1) * per : rows;
  float s = 0.0f;
  for (long r = slice * per + threadIdx.x; r < end; r += blockDim.x) s += load(dy, t, r * cols + c);
  return block_sum(s);
}

// db[c] += sum over rows of dy[r, c]: one block per column, fixed order.
__global__ void column_sum_accumulate(const void* dy, DType t, long rows, long cols, void* db, DType tdb) {
  const float s = slice_column_sum(dy, t, rows, cols, blockIdx.x, 0, 1);
  if (threadIdx.x == 0) store(db, tdb, blockIdx.x, load(db, tdb, blockIdx.x) + s);
}

// Non-deterministic mode: each column summed by several blocks, their
// partials added into the float32 db with atomicAdd in whatever order the
// blocks finish: correct, not bitwise reproducible.
__global__ void column_sum_atomic(const void* dy, DType t, long rows, long cols, float* db, long slices) {
  const float s = slice_column_sum(dy, t, rows, cols, blockIdx.x, blockIdx.y, slices);
  if (threadIdx.x == 0) atomicAdd(db + blockIdx.x, s);
}

// B19: the same slicing, each partial added into db with a plain
// read-modify-write: concurrent updates are lost.
__global__ void racy_column_sum(const void* dy, DType t, long rows, long cols, void* db, DType tdb, long slices) {
  const float s = slice_column_sum(dy, t, rows, cols, blockIdx.x, blockIdx.y, slices);
  if (threadIdx.x == 0) store(db, tdb, blockIdx.x, load(db, tdb, blockIdx.x) + s);  // the race: no atomic, no ordering
}

__global__ void activation_forward_kernel(Activation a, const void* x, DType tx, void* y, DType ty, long n) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const float v = load(x, tx, i);
    store(y, ty, i, a == Activation::relu ? element::relu(v) : element::gelu_tanh(v));
  }
}

__global__ void activation_backward_kernel(Activation a, const void* x, DType tx, const void* dy, DType tdy, void* dx,
                                           DType tdx, long n) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const float v = load(x, tx, i), d = load(dy, tdy, i);
    store(dx, tdx, i, a == Activation::relu ? element::relu_grad(v, d) : element::gelu_tanh_grad(v, d));
  }
}

// -------------------------------------------------------------- normalizers

struct NormGeometry {
  NormKind kind;
  long rows, cols, groups_per_sample, positions;
  __host__ __device__ long group_count() const {
    switch (kind) {
      case NormKind::layer:
      case NormKind::rms: return rows;
      case NormKind::batch: return cols;
      case NormKind::group: return rows / positions * groups_per_sample;
    }
    return 0;
  }
  __device__ long size(long) const {
    switch (kind) {
      case NormKind::layer:
      case NormKind::rms: return cols;
      case NormKind::batch: return rows;
      case NormKind::group: return positions * (cols / groups_per_sample);
    }
    return 0;
  }
  // Flat index of the i-th element of group g.
  __device__ long element(long g, long i) const {
    switch (kind) {
      case NormKind::layer:
      case NormKind::rms: return g * cols + i;
      case NormKind::batch: return i * cols + g;
      case NormKind::group: {
        const long per_group = cols / groups_per_sample;
        const long sample = g / groups_per_sample, gg = g % groups_per_sample;
        return (sample * positions + i / per_group) * cols + gg * per_group + i % per_group;
      }
    }
    return 0;
  }
  // The group of flat element e.
  __device__ long group_of(long e) const {
    const long r = e / cols, c = e % cols;
    switch (kind) {
      case NormKind::layer:
      case NormKind::rms: return r;
      case NormKind::batch: return c;
      case NormKind::group: return (r / positions) * groups_per_sample + c / (cols / groups_per_sample);
    }
    return 0;
  }
};

// One block per statistics group: two-pass mean and variance, y, the
// saved statistics, and BatchNorm's running statistics.
__global__ void norm_forward_kernel(NormGeometry geo, float eps, float momentum, const void* x, DType tx,
                                    const void* gamma, DType tg, const void* beta, DType tb, void* y, DType ty,
                                    float* saved_mean, float* saved_rstd, float* running_mean, float* running_var) {
  const long g = blockIdx.x;
  const long n = geo.size(g);
  const bool centred = geo.kind != NormKind::rms;
  float s = 0.0f;
  if (centred)
    for (long i = threadIdx.x; i < n; i += blockDim.x) s += load(x, tx, geo.element(g, i));
  const float mean = centred ? block_sum(s) / static_cast<float>(n) : 0.0f;
  float q = 0.0f;
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    const float d = load(x, tx, geo.element(g, i)) - mean;
    q += d * d;
  }
  const float sum_sq = block_sum(q);
  const float rstd = 1.0f / sqrtf(sum_sq / static_cast<float>(n) + eps);
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    const long e = geo.element(g, i);
    const long c = e % geo.cols;
    const float x_hat = (load(x, tx, e) - mean) * rstd;
    const float v = load(gamma, tg, c) * x_hat;
    store(y, ty, e, centred ? v + load(beta, tb, c) : v);
  }
  if (threadIdx.x == 0) {
    saved_mean[g] = mean;
    saved_rstd[g] = rstd;
    if (running_mean) {
      const float unbiased = n > 1 ? sum_sq / static_cast<float>(n - 1) : 0.0f;
      running_mean[g] = (1.0f - momentum) * running_mean[g] + momentum * mean;
      running_var[g] = (1.0f - momentum) * running_var[g] + momentum * unbiased;
    }
  }
}

// One block per statistics group: the coupling means, then dx.
__global__ void norm_backward_dx_kernel(NormGeometry geo, const void* x, DType tx, const void* gamma, DType tg,
                                        const void* dy, DType tdy, const float* saved_mean, const float* saved_rstd,
                                        void* dx, DType tdx) {
  const long g = blockIdx.x;
  const long n = geo.size(g);
  const bool centred = geo.kind != NormKind::rms;
  const float mean = saved_mean[g], rstd = saved_rstd[g];
  float sg = 0.0f, sgx = 0.0f;
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    const long e = geo.element(g, i);
    const float gd = load(gamma, tg, e % geo.cols) * load(dy, tdy, e);
    sg += gd;
    sgx += gd * ((load(x, tx, e) - mean) * rstd);
  }
  const float mean_g = centred ? block_sum(sg) / static_cast<float>(n) : 0.0f;
  const float mean_gx = block_sum(sgx) / static_cast<float>(n);
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    const long e = geo.element(g, i);
    const float x_hat = (load(x, tx, e) - mean) * rstd;
    store(dx, tdx, e, rstd * (load(gamma, tg, e % geo.cols) * load(dy, tdy, e) - mean_g - x_hat * mean_gx));
  }
}

// One block per channel: dgamma += sum dy x_hat, dbeta += sum dy.
__global__ void norm_backward_params_kernel(NormGeometry geo, const void* x, DType tx, const void* dy, DType tdy,
                                            const float* saved_mean, const float* saved_rstd, void* dgamma,
                                            DType tdg, void* dbeta, DType tdb) {
  const long c = blockIdx.x;
  float sgx = 0.0f, sd = 0.0f;
  for (long r = threadIdx.x; r < geo.rows; r += blockDim.x) {
    const long e = r * geo.cols + c;
    const long g = geo.group_of(e);
    const float d = load(dy, tdy, e);
    sgx += d * ((load(x, tx, e) - saved_mean[g]) * saved_rstd[g]);
    sd += d;
  }
  sgx = block_sum(sgx);
  sd = block_sum(sd);
  if (threadIdx.x == 0) {
    store(dgamma, tdg, c, load(dgamma, tdg, c) + sgx);
    if (dbeta) store(dbeta, tdb, c, load(dbeta, tdb, c) + sd);
  }
}

// ------------------------------------------------------------------ losses

// One block per row: the row's loss into row_loss[r], dy = scale d(loss)/dy.
__global__ void mse_kernel(const void* y, DType ty, const float* t, long cols, float scale, void* dy, DType tdy,
                           float* row_loss) {
  const long r = blockIdx.x;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float s = 0.0f;
  for (long j = threadIdx.x; j < cols; j += blockDim.x) {
    const float yv = load(y, ty, r * cols + j), tv = t[r * cols + j];
    const float d = yv - tv;
    s += d * d;
    store(dy, tdy, r * cols + j, element::mse_grad(yv, tv, inv_cols, scale));
  }
  s = block_sum(s);
  if (threadIdx.x == 0) row_loss[r] = s * inv_cols;
}

__global__ void cross_entropy_kernel(const void* y, DType ty, const float* classes, long cols, float scale, void* dy,
                                     DType tdy, float* row_loss, int* bad_class) {
  const long r = blockIdx.x;
  const int cls = static_cast<int>(classes[r]);
  if (cls < 0) {  // ignored row
    for (long j = threadIdx.x; j < cols; j += blockDim.x) store(dy, tdy, r * cols + j, 0.0f);
    if (threadIdx.x == 0) row_loss[r] = 0.0f;
    return;
  }
  if (cls >= cols) {
    if (threadIdx.x == 0) atomicExch(bad_class, 1);
    return;
  }
  __shared__ float row_max_shared;
  if (threadIdx.x == 0) {
    float m = load(y, ty, r * cols);
    for (long j = 1; j < cols; ++j) m = fmaxf(m, load(y, ty, r * cols + j));
    row_max_shared = m;
  }
  __syncthreads();
  const float row_max = row_max_shared;
  float s = 0.0f;
  for (long j = threadIdx.x; j < cols; j += blockDim.x) s += expf(load(y, ty, r * cols + j) - row_max);
  const float denom = block_sum(s);
  for (long j = threadIdx.x; j < cols; j += blockDim.x) {
    const float p = expf(load(y, ty, r * cols + j) - row_max) / denom;
    store(dy, tdy, r * cols + j, scale * (j == cls ? p - 1.0f : p));
  }
  if (threadIdx.x == 0) row_loss[r] = logf(denom) - (load(y, ty, r * cols + cls) - row_max);
}

// One block: the sum of n values in a fixed order.
__global__ void sum_kernel(const float* v, long n, float* out) {
  float s = 0.0f;
  for (long i = threadIdx.x; i < n; i += blockDim.x) s += v[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

// ------------------------------------------------------- many tensors at once

// One chunk of one tensor; a launch covers every chunk of every tensor.
struct Chunk {
  void* dst;
  const void* src;
  void* comp;
  DType dst_type, src_type;
  long begin, end;  // element range within the tensor
};

enum class ListOp : int { zero, scale, accumulate, accumulate_compensated, square_sum, finite };

// Vectorized float4 path where a float32 chunk is 16-byte aligned, scalar
// for the rest and every other dtype.
__global__ void list_kernel(ListOp op, const Chunk* chunks, float factor, float* partials, int* non_finite) {
  const Chunk ch = chunks[blockIdx.x];
  float s = 0.0f;
  long i = ch.begin + threadIdx.x;
  const bool vector = ch.dst_type == DType::f32 && (op == ListOp::zero || op == ListOp::scale ||
                                                    (op == ListOp::accumulate && ch.src_type == DType::f32));
  if (vector && ch.begin % 4 == 0 && reinterpret_cast<std::uintptr_t>(ch.dst) % 16 == 0 &&
      (op != ListOp::accumulate || reinterpret_cast<std::uintptr_t>(ch.src) % 16 == 0)) {
    const long vector_end = ch.begin + (ch.end - ch.begin) / 4 * 4;
    float4* d4 = reinterpret_cast<float4*>(static_cast<float*>(ch.dst));
    const float4* s4 = reinterpret_cast<const float4*>(static_cast<const float*>(ch.src));
    for (long k = ch.begin / 4 + threadIdx.x; k < vector_end / 4; k += blockDim.x) {
      float4 v = op == ListOp::zero ? make_float4(0.f, 0.f, 0.f, 0.f) : d4[k];
      if (op == ListOp::scale) v = make_float4(v.x * factor, v.y * factor, v.z * factor, v.w * factor);
      if (op == ListOp::accumulate) {
        const float4 a = s4[k];
        v = make_float4(v.x + a.x, v.y + a.y, v.z + a.z, v.w + a.w);
      }
      d4[k] = v;
    }
    i = vector_end + threadIdx.x;
  }
  for (; i < ch.end; i += blockDim.x) {
    switch (op) {
      case ListOp::zero: store(ch.dst, ch.dst_type, i, 0.0f); break;
      case ListOp::scale: store(ch.dst, ch.dst_type, i, load(ch.dst, ch.dst_type, i) * factor); break;
      case ListOp::accumulate:
        store(ch.dst, ch.dst_type, i, load(ch.dst, ch.dst_type, i) + load(ch.src, ch.src_type, i));
        break;
      case ListOp::accumulate_compensated: {
        float sum = load(ch.dst, ch.dst_type, i), comp = load(ch.comp, ch.dst_type, i);
        element::kahan_add(sum, comp, load(ch.src, ch.src_type, i), ch.dst_type);
        store(ch.dst, ch.dst_type, i, sum);
        store(ch.comp, ch.dst_type, i, comp);
        break;
      }
      case ListOp::square_sum: {
        const float v = load(ch.dst, ch.dst_type, i);
        s += v * v;
        break;
      }
      case ListOp::finite:
        if (!isfinite(load(ch.dst, ch.dst_type, i))) atomicExch(non_finite, 1);  // order-free
        break;
    }
  }
  if (op == ListOp::square_sum) {
    s = block_sum(s);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
  }
}

// ---------------------------------------------------------------- optimizer

__global__ void optimizer_kernel(OptimizerStep st, float* p, const void* g, DType tg, float* a, float* b, long n) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    float unused = 0.0f;
    if (st.kind == OptimizerKind::sgd) {
      element::sgd_update(p[i], load(g, tg, i), a ? a[i] : unused, st.lr, st.momentum, st.one_minus_dampening,
                          st.nesterov, st.first_step, st.weight_decay);
    } else {
      element::adam_update(p[i], load(g, tg, i), a[i], b[i], st.kind == OptimizerKind::adamw, st.weight_decay,
                           st.decay, st.beta1, st.one_minus_beta1, st.beta2, st.one_minus_beta2, st.eps, st.step_size,
                           st.inv_sqrt_bias_correction2);
    }
  }
}

}  // namespace

// ------------------------------------------------------------ host side

struct CudaBackend::Impl {
  cublasHandle_t cublas = nullptr;
  // Slots: 0 GEMM results and row losses, 1 upload/download staging,
  // 2 and 3 GEMM operands widened to float32.
  std::vector<float*> scratch{nullptr, nullptr, nullptr, nullptr};
  std::vector<long> scratch_size{0, 0, 0, 0};
  Chunk* chunks = nullptr;
  long chunk_capacity = 0;
  float* partials = nullptr;
  long partial_capacity = 0;
  int* flag = nullptr;
  float* scalar = nullptr;

  // Grows a device buffer to n elements. The old one is released first and
  // forgotten before the allocation, so a failed allocation leaves nothing
  // dangling.
  template <class T>
  static void reallocate(T*& ptr, long& capacity, long n) {
    if (ptr) GRADEQ_CUDA_CHECK(cudaFree(ptr));
    ptr = nullptr;
    capacity = 0;
    GRADEQ_CUDA_CHECK(cudaMalloc(&ptr, static_cast<std::size_t>(std::max(n, 1L)) * sizeof(T)));
    capacity = n;
  }

  // One launch over every chunk of every tensor in the lists.
  void launch_list(ListOp op, const std::vector<Chunk>& list, float factor) {
    if (list.empty()) return;
    const long n = static_cast<long>(list.size());
    if (n > chunk_capacity) reallocate(chunks, chunk_capacity, n);
    if (n > partial_capacity) reallocate(partials, partial_capacity, n);
    GRADEQ_CUDA_CHECK(cudaMemcpy(chunks, list.data(), list.size() * sizeof(Chunk), cudaMemcpyHostToDevice));
    list_kernel<<<static_cast<unsigned>(n), kThreads>>>(op, chunks, factor, partials, flag);
    GRADEQ_LAUNCH_CHECK();
  }
};

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

CudaBackend::CudaBackend() : impl_(std::make_unique<Impl>()) {
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
  if (count > size || !ptr) Impl::reallocate(ptr, size, count);
  return ptr;
}

Tensor CudaBackend::allocate(long rows, long cols, DType dtype) {
  GRADEQ_REQUIRE(rows >= 0 && cols >= 0, "allocate: negative shape");
  Tensor t{nullptr, rows, cols, dtype};
  const std::size_t bytes = static_cast<std::size_t>(std::max(rows * cols, 1L)) * element_bytes(dtype);
  GRADEQ_CUDA_CHECK(cudaMalloc(&t.data, bytes));
  allocations_[t.data] = bytes;
  live_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
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

// cublasGemmEx with float32 compute multiplies A and B of one type into C of
// that type or float32 (f32·f32→f32, bf16·bf16→bf16|f32, f16·f16→f16|f32).
namespace {
bool gemm_writes(DType ab, DType c) { return c == DType::f32 || c == ab; }
}  // namespace

// Column-major C[m, n] = op(A) op(B) + beta C (ldc = m), float32 compute.
// A pair of different input types is multiplied as float32, the 16-bit one
// widened exactly into a scratch slot; C must be a type cuBLAS writes.
void CudaBackend::gemm(bool transpose_a, bool transpose_b, long m, long n, long k, const Tensor& a, long lda,
                       const Tensor& b, long ldb, float beta, const Tensor& c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty product: C = beta C (cuBLAS wants leading dimensions >= 1)
    if (beta == 0.0f) fill(c, 0.0f);
    return;
  }
  auto operand = [&](const Tensor& t, int slot) -> std::pair<const void*, DType> {
    if (a.dtype == b.dtype || t.dtype == DType::f32) return {t.data, t.dtype};
    float* wide = scratch(t.size(), slot);
    convert_kernel<<<blocks_for(t.size()), kThreads>>>(t.data, t.dtype, wide, DType::f32, t.size());
    GRADEQ_LAUNCH_CHECK();
    return {wide, DType::f32};
  };
  const auto [a_data, a_type] = operand(a, 2);
  const auto [b_data, b_type] = operand(b, 3);
  GRADEQ_REQUIRE(gemm_writes(a_type, c.dtype), "gemm: no cuBLAS kernel writes this output dtype");
  const float one = 1.0f;
  GRADEQ_CUBLAS_CHECK(cublasGemmEx(impl_->cublas, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
                                   static_cast<int>(k), &one, a_data, cuda_type(a_type), static_cast<int>(lda), b_data,
                                   cuda_type(b_type), static_cast<int>(ldb), &beta, c.data, cuda_type(c.dtype),
                                   static_cast<int>(m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Row-major Y[rows, out] = X W^T is column-major Y^T = W X^T: A = W seen as
// [in, out] (transposed), B = X seen as [in, rows].
void CudaBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  const long rows = x.rows, in = x.cols, out = w.rows;
  require_shape(w, out, in, "linear_forward weight");
  require_shape(b, 1, out, "linear_forward bias");
  require_shape(y, rows, out, "linear_forward output");
  if (y.empty()) return;
  const Tensor acc{scratch(rows * out), rows, out, DType::f32};
  gemm(true, false, out, rows, in, w, in, x, in, 0.0f, acc);
  bias_epilogue<<<blocks_for(rows * out), kThreads>>>(static_cast<const float*>(acc.data), b.data, b.dtype, y.data,
                                                      y.dtype, rows, out);
  GRADEQ_LAUNCH_CHECK();
}

// dX[rows, in] = dY W: column-major dX^T = W^T dY^T, A = W as [in, out], B = dY as [out, rows].
void CudaBackend::linear_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx) {
  const long rows = dy.rows, out = w.rows, in = w.cols;
  require_shape(dy, rows, out, "linear_backward_data dy");
  require_shape(dx, rows, in, "linear_backward_data dx");
  if (dx.empty()) return;
  const Tensor acc{scratch(rows * in), rows, in, DType::f32};
  gemm(false, false, in, rows, out, w, in, dy, out, 0.0f, acc);
  bias_epilogue<<<blocks_for(rows * in), kThreads>>>(static_cast<const float*>(acc.data), nullptr, DType::f32,
                                                     dx.data, dx.dtype, rows, in);
  GRADEQ_LAUNCH_CHECK();
}

// dW[out, in] += dY^T X with beta = 1, straight into the gradient buffer:
// column-major dW^T = X^T dY, A = X as [in, rows], B = dY as [out, rows] transposed.
// Where cuBLAS has no such type combination (float32 inputs into a 16-bit
// buffer, bf16 into f16), the product goes to float32 scratch and is added
// by the accumulate kernel: the same roundings (float32 sum, then one store
// in the buffer's dtype), as the host backend does.
void CudaBackend::linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  const long rows = x.rows, in = x.cols, out = dy.cols;
  require_shape(dy, rows, out, "linear_backward_weight dy");
  require_shape(dw, out, in, "linear_backward_weight dw");
  require_shape(db, 1, out, "linear_backward_weight db");
  if (rows == 0) return;
  const DType inputs = x.dtype == dy.dtype ? x.dtype : DType::f32;
  if (gemm_writes(inputs, dw.dtype)) {
    gemm(false, true, in, out, rows, x, in, dy, out, 1.0f, dw);
  } else {
    const Tensor product{scratch(out * in), out, in, DType::f32};
    gemm(false, true, in, out, rows, x, in, dy, out, 0.0f, product);
    const Tensor dst[] = {dw}, src[] = {product};
    accumulate(dst, src, {});
  }
  bias_gradient(dy, db);
}

void CudaBackend::set_deterministic(bool on) {
  deterministic_ = on;
  GRADEQ_CUBLAS_CHECK(
      cublasSetAtomicsMode(impl_->cublas, on ? CUBLAS_ATOMICS_NOT_ALLOWED : CUBLAS_ATOMICS_ALLOWED));
}

// Rows summed per block by the sliced bias-gradient kernels.
constexpr long kRowsPerSlice = 4 * kThreads;

void CudaBackend::bias_gradient(const Tensor& dy, const Tensor& db) {
  if (dy.empty()) return;
  if (!deterministic_ && db.dtype == DType::f32 && dy.rows > kRowsPerSlice) {
    // gridDim.y is at most 65535: beyond that, slices take more rows each.
    const long slices = std::min((dy.rows + kRowsPerSlice - 1) / kRowsPerSlice, 65535L);
    column_sum_atomic<<<dim3(static_cast<unsigned>(dy.cols), static_cast<unsigned>(slices)), kThreads>>>(
        dy.data, dy.dtype, dy.rows, dy.cols, static_cast<float*>(db.data), slices);
    GRADEQ_LAUNCH_CHECK();
    return;
  }
  column_sum_accumulate<<<static_cast<unsigned>(dy.cols), kThreads>>>(dy.data, dy.dtype, dy.rows, dy.cols, db.data,
                                                                       db.dtype);
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::activation_forward(Activation a, const Tensor& x, const Tensor& y) {
  require_shape(y, x.rows, x.cols, "activation_forward");
  if (x.empty()) return;
  activation_forward_kernel<<<blocks_for(x.size()), kThreads>>>(a, x.data, x.dtype, y.data, y.dtype, x.size());
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::activation_backward(Activation a, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  require_shape(dy, x.rows, x.cols, "activation_backward dy");
  require_shape(dx, x.rows, x.cols, "activation_backward dx");
  if (x.empty()) return;
  activation_backward_kernel<<<blocks_for(x.size()), kThreads>>>(a, x.data, x.dtype, dy.data, dy.dtype, dx.data,
                                                                  dx.dtype, x.size());
  GRADEQ_LAUNCH_CHECK();
}

namespace {
NormGeometry geometry(const NormConfig& c, const Tensor& x) {
  return NormGeometry{c.kind, x.rows, x.cols, c.groups, c.positions};
}
}  // namespace

void CudaBackend::norm_forward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& y, const Tensor& saved_mean, const Tensor& saved_rstd,
                               const Tensor& running_mean, const Tensor& running_var) {
  GRADEQ_REQUIRE(c.kind != NormKind::group || (c.groups > 0 && x.cols % c.groups == 0 && x.rows % c.positions == 0),
                 "norm_forward: groups must divide channels and positions must divide rows");
  require_shape(gamma, 1, x.cols, "norm_forward gamma");
  if (c.kind != NormKind::rms) require_shape(beta, 1, x.cols, "norm_forward beta");
  require_shape(y, x.rows, x.cols, "norm_forward y");
  const NormGeometry geo = geometry(c, x);
  const long groups = geo.group_count();
  require_shape(saved_mean, 1, groups, "norm_forward saved_mean");
  require_shape(saved_rstd, 1, groups, "norm_forward saved_rstd");
  GRADEQ_REQUIRE(saved_mean.dtype == DType::f32 && saved_rstd.dtype == DType::f32, "norm_forward: statistics are float32");
  const bool update = c.kind == NormKind::batch && !running_mean.empty();
  GRADEQ_REQUIRE(!update || (running_mean.dtype == DType::f32 && running_var.dtype == DType::f32),
                 "norm_forward: running statistics are float32");
  if (groups == 0) return;
  norm_forward_kernel<<<static_cast<unsigned>(groups), kThreads>>>(
      geo, c.eps, c.momentum, x.data, x.dtype, gamma.data, gamma.dtype, beta.data, beta.dtype, y.data, y.dtype,
      static_cast<float*>(saved_mean.data), static_cast<float*>(saved_rstd.data),
      update ? static_cast<float*>(running_mean.data) : nullptr, update ? static_cast<float*>(running_var.data) : nullptr);
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::norm_backward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& dy,
                                const Tensor& saved_mean, const Tensor& saved_rstd, const Tensor& dx,
                                const Tensor& dgamma, const Tensor& dbeta) {
  require_shape(dy, x.rows, x.cols, "norm_backward dy");
  require_shape(dx, x.rows, x.cols, "norm_backward dx");
  require_shape(dgamma, 1, x.cols, "norm_backward dgamma");
  const bool centred = c.kind != NormKind::rms;
  if (centred) require_shape(dbeta, 1, x.cols, "norm_backward dbeta");
  GRADEQ_REQUIRE(c.kind != NormKind::group || (c.groups > 0 && x.cols % c.groups == 0 && x.rows % c.positions == 0),
                 "norm_backward: groups must divide channels and positions must divide rows");
  const NormGeometry geo = geometry(c, x);
  if (x.empty() || geo.group_count() == 0) return;
  norm_backward_dx_kernel<<<static_cast<unsigned>(geo.group_count()), kThreads>>>(
      geo, x.data, x.dtype, gamma.data, gamma.dtype, dy.data, dy.dtype, static_cast<const float*>(saved_mean.data),
      static_cast<const float*>(saved_rstd.data), dx.data, dx.dtype);
  GRADEQ_LAUNCH_CHECK();
  norm_backward_params_kernel<<<static_cast<unsigned>(x.cols), kThreads>>>(
      geo, x.data, x.dtype, dy.data, dy.dtype, static_cast<const float*>(saved_mean.data),
      static_cast<const float*>(saved_rstd.data), dgamma.data, dgamma.dtype, centred ? dbeta.data : nullptr,
      dbeta.dtype);
  GRADEQ_LAUNCH_CHECK();
}

double CudaBackend::loss_forward_backward(LossKind k, const Tensor& y, const Tensor& targets, float scale,
                                          const Tensor& dy) {
  const long rows = y.rows, cols = y.cols;
  require_shape(dy, rows, cols, "loss dy");
  GRADEQ_REQUIRE(targets.dtype == DType::f32, "loss: targets are float32");
  if (rows == 0) return 0.0;
  float* row_loss = scratch(rows);
  if (k == LossKind::mse) {
    require_shape(targets, rows, cols, "mse targets");
    mse_kernel<<<static_cast<unsigned>(rows), kThreads>>>(y.data, y.dtype, static_cast<const float*>(targets.data),
                                                          cols, scale, dy.data, dy.dtype, row_loss);
    GRADEQ_LAUNCH_CHECK();
  } else {
    require_shape(targets, rows, 1, "cross_entropy targets");
    GRADEQ_CUDA_CHECK(cudaMemset(impl_->flag, 0, sizeof(int)));
    cross_entropy_kernel<<<static_cast<unsigned>(rows), kThreads>>>(
        y.data, y.dtype, static_cast<const float*>(targets.data), cols, scale, dy.data, dy.dtype, row_loss, impl_->flag);
    GRADEQ_LAUNCH_CHECK();
    int bad = 0;
    GRADEQ_CUDA_CHECK(cudaMemcpy(&bad, impl_->flag, sizeof(int), cudaMemcpyDeviceToHost));
    GRADEQ_REQUIRE(bad == 0, "cross_entropy: class index out of range");
  }
  sum_kernel<<<1, kThreads>>>(row_loss, rows, impl_->scalar);
  GRADEQ_LAUNCH_CHECK();
  float total = 0.0f;
  GRADEQ_CUDA_CHECK(cudaMemcpy(&total, impl_->scalar, sizeof(float), cudaMemcpyDeviceToHost));
  return total;
}

namespace {
constexpr long kChunk = 4096;

std::vector<Chunk> chunks_of(std::span<const Tensor> dst, std::span<const Tensor> src, std::span<const Tensor> comp) {
  std::vector<Chunk> out;
  for (std::size_t t = 0; t < dst.size(); ++t)
    for (long b = 0; b < dst[t].size(); b += kChunk)
      out.push_back({dst[t].data, src.empty() ? nullptr : src[t].data, comp.empty() ? nullptr : comp[t].data,
                     dst[t].dtype, src.empty() ? DType::f32 : src[t].dtype, b, std::min(dst[t].size(), b + kChunk)});
  return out;
}
}  // namespace

void CudaBackend::zero(std::span<const Tensor> ts) { impl_->launch_list(ListOp::zero, chunks_of(ts, {}, {}), 0.0f); }

void CudaBackend::scale(std::span<const Tensor> ts, float s) {
  impl_->launch_list(ListOp::scale, chunks_of(ts, {}, {}), s);
}

void CudaBackend::accumulate(std::span<const Tensor> dst, std::span<const Tensor> src,
                             std::span<const Tensor> compensation) {
  GRADEQ_REQUIRE(dst.size() == src.size(), "accumulate: list lengths differ");
  GRADEQ_REQUIRE(compensation.empty() || compensation.size() == dst.size(), "accumulate: compensation list length");
  for (std::size_t t = 0; t < dst.size(); ++t) {
    require_shape(src[t], dst[t].rows, dst[t].cols, "accumulate");
    if (!compensation.empty()) {
      require_shape(compensation[t], dst[t].rows, dst[t].cols, "accumulate compensation");
      GRADEQ_REQUIRE(compensation[t].dtype == dst[t].dtype, "accumulate: compensation has the buffer's dtype");
    }
  }
  impl_->launch_list(compensation.empty() ? ListOp::accumulate : ListOp::accumulate_compensated,
              chunks_of(dst, src, compensation), 0.0f);
}

float CudaBackend::global_norm(std::span<const Tensor> ts) {
  const std::vector<Chunk> chunks = chunks_of(ts, {}, {});
  if (chunks.empty()) return 0.0f;
  impl_->launch_list(ListOp::square_sum, chunks, 0.0f);
  sum_kernel<<<1, kThreads>>>(impl_->partials, static_cast<long>(chunks.size()), impl_->scalar);
  GRADEQ_LAUNCH_CHECK();
  float sum = 0.0f;
  GRADEQ_CUDA_CHECK(cudaMemcpy(&sum, impl_->scalar, sizeof(float), cudaMemcpyDeviceToHost));
  return std::sqrt(sum);
}

bool CudaBackend::all_finite(std::span<const Tensor> ts) {
  GRADEQ_CUDA_CHECK(cudaMemset(impl_->flag, 0, sizeof(int)));
  impl_->launch_list(ListOp::finite, chunks_of(ts, {}, {}), 0.0f);
  int non_finite = 0;
  GRADEQ_CUDA_CHECK(cudaMemcpy(&non_finite, impl_->flag, sizeof(int), cudaMemcpyDeviceToHost));
  return non_finite == 0;
}

void CudaBackend::optimizer_step(const OptimizerStep& step, std::span<const Tensor> params,
                                 std::span<const Tensor> grads, std::span<const Tensor> state_a,
                                 std::span<const Tensor> state_b) {
  GRADEQ_REQUIRE(params.size() == grads.size(), "optimizer_step: list lengths differ");
  const bool needs_a = step.kind != OptimizerKind::sgd || step.momentum != 0.0f;
  const bool needs_b = step.kind != OptimizerKind::sgd;
  GRADEQ_REQUIRE(!needs_a || state_a.size() == params.size(), "optimizer_step: missing first optimizer state");
  GRADEQ_REQUIRE(!needs_b || state_b.size() == params.size(), "optimizer_step: missing second optimizer state");
  for (std::size_t t = 0; t < params.size(); ++t) {
    require_shape(grads[t], params[t].rows, params[t].cols, "optimizer_step grad");
    GRADEQ_REQUIRE(params[t].dtype == DType::f32, "optimizer_step: master weights are float32");
    GRADEQ_REQUIRE((!needs_a || state_a[t].dtype == DType::f32) && (!needs_b || state_b[t].dtype == DType::f32),
                   "optimizer_step: optimizer state is float32");
    if (params[t].empty()) continue;
    optimizer_kernel<<<blocks_for(params[t].size()), kThreads>>>(
        step, static_cast<float*>(params[t].data), grads[t].data, grads[t].dtype,
        needs_a ? static_cast<float*>(state_a[t].data) : nullptr, needs_b ? static_cast<float*>(state_b[t].data) : nullptr,
        params[t].size());
    GRADEQ_LAUNCH_CHECK();
  }
}

// ------------------------------------------------------------------- B19

namespace {
class RacyBiasBackend : public CudaBackend {
 protected:
  void bias_gradient(const Tensor& dy, const Tensor& db) override {
    // One slice per row (up to 64): many blocks race on each column.
    const long slices = std::min(dy.rows, 64L);
    if (slices == 0) return;
    racy_column_sum<<<dim3(static_cast<unsigned>(dy.cols), static_cast<unsigned>(slices)), kThreads>>>(
        dy.data, dy.dtype, dy.rows, dy.cols, db.data, db.dtype, slices);
    GRADEQ_LAUNCH_CHECK();
  }
};
}  // namespace

std::unique_ptr<Backend> make_racy_bias_backend() { return std::make_unique<RacyBiasBackend>(); }

}  // namespace gradeq
