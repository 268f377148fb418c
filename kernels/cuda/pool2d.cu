// pool2d.cu — the CUDA backend's average and max pooling
// (kernels/backend_ops.def); a max window's winner its first largest value,
// row by row, and max pooling's backward a gather per input. Average:
// one thread per output (forward: its window's pixels row by row, then
// / count) or per input (backward: the windows that read it by output row,
// then column, each term dy / count); the host backend's order, stored
// once.
#include "kernels/cuda/cuda_backend.h"

#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

__global__ void avgpool_forward_kernel(PoolConfig c, const void* x, DType tx, void* y, DType ty, long samples) {
  const long ho = c.out_height(), wo = c.out_width(), n_all = samples * c.out_size();
  const float count = static_cast<float>(c.count());
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long n = i / c.out_size(), ch = i % c.out_size() / (ho * wo), oy = i % (ho * wo) / wo, ox = i % wo;
    const long base = n * c.in_size() + (ch * c.height + oy * c.stride_h) * c.width + ox * c.stride_w;
    float s = 0.0f;
    for (long ky = 0; ky < c.kernel_h; ++ky)
      for (long kx = 0; kx < c.kernel_w; ++kx) s += load(x, tx, base + ky * c.width + kx);
    store(y, ty, i, s / count);
  }
}

__global__ void avgpool_backward_kernel(PoolConfig c, const void* dy, DType tdy, void* dx, DType tdx, long samples) {
  const long ho = c.out_height(), wo = c.out_width(), plane = c.height * c.width, n_all = samples * c.in_size();
  const float count = static_cast<float>(c.count());
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long n = i / c.in_size(), ch = i % c.in_size() / plane, iy = i % plane / c.width, ix = i % c.width;
    float s = 0.0f;
    for (long oy = 0; oy < ho; ++oy) {
      if (iy < oy * c.stride_h || iy >= oy * c.stride_h + c.kernel_h) continue;
      for (long ox = 0; ox < wo; ++ox)
        if (ix >= ox * c.stride_w && ix < ox * c.stride_w + c.kernel_w)
          s += load(dy, tdy, n * c.out_size() + (ch * ho + oy) * wo + ox) / count;
    }
    store(dx, tdx, i, s);
  }
}

// The flat index, within one sample's image, of window (ch, oy, ox)'s first
// largest value (the host backend's rule).
__device__ long window_winner(const PoolConfig& c, const void* x, DType tx, long base, long ch, long oy, long ox) {
  long best = (ch * c.height + oy * c.stride_h) * c.width + ox * c.stride_w;
  float best_value = load(x, tx, base + best);
  for (long ky = 0; ky < c.kernel_h; ++ky)
    for (long kx = 0; kx < c.kernel_w; ++kx) {
      const long i = (ch * c.height + oy * c.stride_h + ky) * c.width + ox * c.stride_w + kx;
      const float v = load(x, tx, base + i);
      if (v > best_value) {
        best = i;
        best_value = v;
      }
    }
  return best;
}

__global__ void maxpool_forward_kernel(PoolConfig c, const void* x, DType tx, void* y, DType ty, long samples) {
  const long ho = c.out_height(), wo = c.out_width(), n_all = samples * c.out_size();
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long n = i / c.out_size(), ch = i % c.out_size() / (ho * wo), oy = i % (ho * wo) / wo, ox = i % wo;
    const long base = n * c.in_size();
    store(y, ty, i, load(x, tx, base + window_winner(c, x, tx, base, ch, oy, ox)));
  }
}

// One thread per input: the windows that read it, by output row then
// column, each adding its dy where this input is its winner.
__global__ void maxpool_backward_kernel(PoolConfig c, const void* x, DType tx, const void* dy, DType tdy, void* dx,
                                        DType tdx, long samples) {
  const long ho = c.out_height(), wo = c.out_width(), plane = c.height * c.width, n_all = samples * c.in_size();
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long n = i / c.in_size(), within = i % c.in_size(), ch = within / plane, iy = within % plane / c.width,
               ix = within % c.width;
    float s = 0.0f;
    for (long oy = 0; oy < ho; ++oy) {
      if (iy < oy * c.stride_h || iy >= oy * c.stride_h + c.kernel_h) continue;
      for (long ox = 0; ox < wo; ++ox)
        if (ix >= ox * c.stride_w && ix < ox * c.stride_w + c.kernel_w &&
            window_winner(c, x, tx, n * c.in_size(), ch, oy, ox) == within)
          s += load(dy, tdy, n * c.out_size() + (ch * ho + oy) * wo + ox);
    }
    store(dx, tdx, i, s);
  }
}

}  // namespace

void CudaBackend::maxpool_forward(const PoolConfig& c, const Tensor& x, const Tensor& y) {
  require_pool(c, x, y, "maxpool_forward");
  if (y.empty()) return;
  maxpool_forward_kernel<<<blocks_for(y.size()), kThreads>>>(c, x.data, x.dtype, y.data, y.dtype, x.rows);
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::maxpool_backward(const PoolConfig& c, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  require_pool(c, x, dy, "maxpool_backward");
  require_shape(dx, x.rows, x.cols, "maxpool_backward dx");
  if (dx.empty()) return;
  maxpool_backward_kernel<<<blocks_for(dx.size()), kThreads>>>(c, x.data, x.dtype, dy.data, dy.dtype, dx.data,
                                                               dx.dtype, x.rows);
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::avgpool_forward(const PoolConfig& c, const Tensor& x, const Tensor& y) {
  require_pool(c, x, y, "avgpool_forward");
  if (y.empty()) return;
  avgpool_forward_kernel<<<blocks_for(y.size()), kThreads>>>(c, x.data, x.dtype, y.data, y.dtype, x.rows);
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::avgpool_backward(const PoolConfig& c, const Tensor& dy, const Tensor& dx) {
  require_pool(c, dx, dy, "avgpool_backward");
  if (dx.empty()) return;
  avgpool_backward_kernel<<<blocks_for(dx.size()), kThreads>>>(c, dy.data, dy.dtype, dx.data, dx.dtype, dx.rows);
  GRADEQ_LAUNCH_CHECK();
}

}  // namespace gradeq
