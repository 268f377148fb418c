// position_embedding.cu — the CUDA backend's position_embedding_forward and
// position_embedding_backward (kernels/backend_ops.def). Backward: one
// thread per element of the table, summing its position's rows in row
// order (a fixed order, deterministic), then one add into the gradient.
#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

__global__ void position_forward_kernel(const void* x, DType tx, const void* p, DType tp, long positions, void* y,
                                        DType ty, long rows, long width) {
  const long n = rows * width;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long r = i / width, c = i % width;
    store(y, ty, i, load(x, tx, i) + load(p, tp, (r % positions) * width + c));
  }
}

__global__ void position_backward_kernel(const void* dy, DType tdy, long rows, long width, void* dp, DType tdp,
                                         long positions) {
  const long n = positions * width;  // the table's rows past `positions` get nothing
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long t = i / width, c = i % width;
    float sum = 0.0f;
    for (long r = t; r < rows; r += positions) sum += load(dy, tdy, r * width + c);
    store(dp, tdp, i, load(dp, tdp, i) + sum);
  }
}

}  // namespace

void CudaBackend::position_embedding_forward(const Tensor& x, const Tensor& p, long positions, const Tensor& y) {
  require_position_shapes(x, p, positions, "position_embedding_forward");
  require_shape(y, x.rows, x.cols, "position_embedding_forward output");
  if (y.empty()) return;
  position_forward_kernel<<<blocks_for(y.size()), kThreads>>>(x.data, x.dtype, p.data, p.dtype, positions, y.data,
                                                              y.dtype, y.rows, y.cols);
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::position_embedding_backward(const Tensor& dy, long positions, const Tensor& dp) {
  require_position_shapes(dy, dp, positions, "position_embedding_backward");
  if (dp.empty()) return;
  position_backward_kernel<<<blocks_for(dp.size()), kThreads>>>(dy.data, dy.dtype, dy.rows, dy.cols, dp.data,
                                                                dp.dtype, positions);
  GRADEQ_LAUNCH_CHECK();
}

}  // namespace gradeq
