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

}  // namespace

void CudaBackend::embedding_forward(const Tensor& ids, const Tensor& w, const Tensor& y) {
  require_embedding_shapes(ids, w, y, "embedding_forward");
  if (y.empty()) return;
  embedding_forward_kernel<<<blocks_for(y.size()), kThreads>>>(static_cast<const float*>(ids.data), w.data, w.dtype,
                                                               y.data, y.dtype, y.rows, y.cols);
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::embedding_backward(const Tensor& ids, const Tensor& dy, long padding_idx, const Tensor& dw) {
  require_embedding_shapes(ids, dw, dy, "embedding_backward");
  GRADEQ_REQUIRE(dw.dtype == DType::f32, "embedding_backward: the gradient buffer is float32");
  if (dy.empty()) return;
  const auto* id = static_cast<const float*>(ids.data);
  auto* out = static_cast<float*>(dw.data);
  if (deterministic()) {
    embedding_backward_by_column<<<blocks_for(dy.cols), kThreads>>>(id, dy.data, dy.dtype, dy.rows, dy.cols,
                                                                    padding_idx, out);
  } else {
    embedding_backward_atomic<<<blocks_for(dy.size()), kThreads>>>(id, dy.data, dy.dtype, dy.rows, dy.cols,
                                                                   padding_idx, out);
  }
  GRADEQ_LAUNCH_CHECK();
}

}  // namespace gradeq
