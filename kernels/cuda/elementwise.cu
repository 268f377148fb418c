// elementwise.cu — activations, forward and backward, one thread per
// element, sharing their math with the host backend (kernels/element_math.h).
#include "kernels/cuda/cuda_backend.h"
#include "kernels/element_math.h"

#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

__device__ float activation(Activation a, float v) {
  switch (a) {
    case Activation::relu: return element::relu(v);
    case Activation::gelu_tanh: return element::gelu_tanh(v);
    case Activation::gelu_erf: return element::gelu_erf(v);
  }
  return v;
}

__device__ float activation_grad(Activation a, float v, float d) {
  switch (a) {
    case Activation::relu: return element::relu_grad(v, d);
    case Activation::gelu_tanh: return element::gelu_tanh_grad(v, d);
    case Activation::gelu_erf: return element::gelu_erf_grad(v, d);
  }
  return d;
}

__global__ void activation_forward_kernel(Activation a, const void* x, DType tx, void* y, DType ty, long n) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const float v = load(x, tx, i);
    store(y, ty, i, activation(a, v));
  }
}

__global__ void activation_backward_kernel(Activation a, const void* x, DType tx, const void* dy, DType tdy, void* dx,
                                           DType tdx, long n) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const float v = load(x, tx, i), d = load(dy, tdy, i);
    store(dx, tdx, i, activation_grad(a, v, d));
  }
}

}  // namespace

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

}  // namespace gradeq
