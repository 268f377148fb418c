// cuda_internal.cuh — what the CUDA backend's op files share: dtype
// access on the device, the block reduction, launch geometry, the list
// chunks and the backend's device-side state (CudaBackend::Impl). Included
// only by kernels/cuda/*.cu and the CUDA mutant (kernels/mutants); host-only
// code never sees it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/check.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

namespace gradeq::cuda {

inline constexpr int kThreads = 256;

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

inline std::size_t element_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

inline int blocks_for(long n) { return static_cast<int>(std::min<long>((n + kThreads - 1) / kThreads, 65535)); }

// Sum over a block, fixed order: every thread's strided partial, then a
// shared-memory tree. All threads get the result.
__device__ inline float block_sum(float v) {
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

// The sum over rows [slice * per, ...) of column c, per = ceil(rows / slices),
// by the whole block; fixed order within the slice.
__device__ inline float slice_column_sum(const void* dy, DType t, long rows, long cols, long c, long slice, long slices) {
  const long per = (rows + slices - 1) / slices;
  const long end = (slice + 1) * per < rows ? (slice + 1) * per : rows;
  float s = 0.0f;
  for (long r = slice * per + threadIdx.x; r < end; r += blockDim.x) s += load(dy, t, r * cols + c);
  return block_sum(s);
}

// dst[i] = src[i] rounded to td, on the device (cuda_backend.cu).
void convert_on_device(const void* src, DType ts, void* dst, DType td, long n);

// --------------------------------------------------- many tensors at once

// One chunk of one tensor; a launch covers every chunk of every tensor.
struct Chunk {
  void* dst;
  const void* src;
  void* comp;
  DType dst_type, src_type;
  long begin, end;  // element range within the tensor
};

enum class ListOp : int { zero, scale, accumulate, accumulate_compensated, square_sum, finite };

}  // namespace gradeq::cuda

namespace gradeq {

struct CudaBackend::Impl {
  cublasHandle_t cublas = nullptr;
  // Slots: 0 GEMM results and row losses, 1 upload/download staging,
  // 2 and 3 GEMM operands widened to float32; 4-7 the chunked head's tile
  // of logits, its dz, dx's float32 sums and a chunk's dw sum; 8
  // attention's dQ slices; 9 and 10 a convolution's taps (im2col) and its
  // output rows.
  std::vector<float*> scratch = std::vector<float*>(11, nullptr);
  std::vector<long> scratch_size = std::vector<long>(11, 0);
  cuda::Chunk* chunks = nullptr;
  long chunk_capacity = 0;
  float* partials = nullptr;
  long partial_capacity = 0;
  int* flag = nullptr;
  float* scalar = nullptr;

  // Device bytes held by the buffers above (the workspace).
  std::size_t workspace_bytes() const {
    std::size_t bytes = 0;
    for (long n : scratch_size) bytes += static_cast<std::size_t>(n) * sizeof(float);
    return bytes + static_cast<std::size_t>(chunk_capacity) * sizeof(cuda::Chunk) +
           static_cast<std::size_t>(partial_capacity) * sizeof(float);
  }
  // Releases the growable buffers (scratch, chunks, partials).
  void drop_workspace() {
    for (std::size_t i = 0; i < scratch.size(); ++i) {
      if (scratch[i]) GRADEQ_CUDA_CHECK(cudaFree(scratch[i]));
      scratch[i] = nullptr;
      scratch_size[i] = 0;
    }
    if (chunks) GRADEQ_CUDA_CHECK(cudaFree(chunks));
    if (partials) GRADEQ_CUDA_CHECK(cudaFree(partials));
    chunks = nullptr;
    partials = nullptr;
    chunk_capacity = partial_capacity = 0;
  }

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


  // One launch over every chunk of every tensor in the lists (list_ops.cu).
  void launch_list(cuda::ListOp op, const std::vector<cuda::Chunk>& list, float factor);
  // *scalar = the sum of n device values in a fixed order (list_ops.cu).
  void sum_to_scalar(const float* values, long n);
};

}  // namespace gradeq
