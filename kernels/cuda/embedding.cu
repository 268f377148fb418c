// embedding.cu — the CUDA backend's embedding_forward and embedding_backward
// (kernels/backend_ops.def). Backward, deterministic: one thread per column
// of the table, walking the rows in order, so each token's sum has one
// fixed order and no two threads write one element. Otherwise one thread
// per element of dy, added with atomicAdd: any order.
#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

__global__ void embedding_forward_kernel(const float* ids, const void* w, DType tw, void* y, DType ty, long rows,
                                         long width) {
  const long n = rows * width;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long r = i / width, c = i % width;
    store(y, ty, i, load(w, tw, static_cast<long>(ids[r]) * width + c));
  }
}

__global__ void embedding_backward_by_column(const float* ids, const void* dy, DType tdy, long rows, long width,
                                             long padding_idx, float* dw) {
  for (long c = blockIdx.x * blockDim.x + threadIdx.x; c < width; c += static_cast<long>(gridDim.x) * blockDim.x)
    for (long r = 0; r < rows; ++r) {
      const long v = static_cast<long>(ids[r]);
      if (v != padding_idx) dw[v * width + c] += load(dy, tdy, r * width + c);
    }
}

__global__ void embedding_backward_atomic(const float* ids, const void* dy, DType tdy, long rows, long width,
                                          long padding_idx, float* dw) {
  const long n = rows * width;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long r = i / width, c = i % width;
    const long v = static_cast<long>(ids[r]);
    if (v != padding_idx) atomicAdd(dw + v * width + c, load(dy, tdy, i));
  }
}

// dw = round(dw + sum) over every element (x + 0 = x where no token adds).
__global__ void add_rounded(void* dw, DType t, const float* sum, long n) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x)
    store(dw, t, i, load(dw, t, i) + sum[i]);
}

}  // namespace

void CudaBackend::embedding_forward(const Tensor& ids, const Tensor& w, const Tensor& y) {
  require_embedding_shapes(ids, w, y, "embedding_forward");
  if (y.empty()) return;
  embedding_forward_kernel<<<blocks_for(y.size()), kThreads>>>(static_cast<const float*>(ids.data), w.data, w.dtype,
                                                               y.data, y.dtype, y.rows, y.cols);
  GRADEQ_LAUNCH_CHECK();
}

// The sums go into a zeroed float32 scratch first, then one add into the
// buffer and one rounding per element (as the host backend, and for the
// same reason).
void CudaBackend::embedding_backward(const Tensor& ids, const Tensor& dy, long padding_idx, const Tensor& dw) {
  require_embedding_shapes(ids, dw, dy, "embedding_backward");
  if (dy.empty() || dw.empty()) return;
  const auto* id = static_cast<const float*>(ids.data);
  float* sum = scratch(dw.size());
  GRADEQ_CUDA_CHECK(cudaMemset(sum, 0, static_cast<std::size_t>(dw.size()) * sizeof(float)));
  if (deterministic()) {
    embedding_backward_by_column<<<blocks_for(dy.cols), kThreads>>>(id, dy.data, dy.dtype, dy.rows, dy.cols,
                                                                    padding_idx, sum);
  } else {
    embedding_backward_atomic<<<blocks_for(dy.size()), kThreads>>>(id, dy.data, dy.dtype, dy.rows, dy.cols,
                                                                   padding_idx, sum);
  }
  GRADEQ_LAUNCH_CHECK();
  add_rounded<<<blocks_for(dw.size()), kThreads>>>(dw.data, dw.dtype, sum, dw.size());
  GRADEQ_LAUNCH_CHECK();
}

}  // namespace gradeq
