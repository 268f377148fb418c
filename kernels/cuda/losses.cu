// losses.cu — MSE and token cross-entropy with an ignore mask: one block
// per row writes dy and the row's loss; the loss sum is a fixed-order
// reduction.
#include "kernels/cuda/cuda_backend.h"
#include "kernels/element_math.h"

#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

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

}  // namespace

double CudaBackend::loss_forward_backward(LossKind k, const Tensor& y, const Tensor& targets, float scale,
                                          const Tensor& dy) {
  const long rows = y.rows, cols = y.cols;
  require_kernel_loss(k);
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
  impl_->sum_to_scalar(row_loss, rows);
  float total = 0.0f;
  GRADEQ_CUDA_CHECK(cudaMemcpy(&total, impl_->scalar, sizeof(float), cudaMemcpyDeviceToHost));
  return total;
}

}  // namespace gradeq
