// upsample.cu — the CUDA backend's nearest-neighbour up-sampling by 2
// (kernels/backend_ops.def): one thread per output (a copy) or per input
// (its 2x2 block's four dy in row order, the host backend's), stored once.
#include "kernels/cuda/cuda_backend.h"

#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

__global__ void upsample_forward_kernel(long channels, long height, long width, const void* x, DType tx, void* y,
                                        DType ty, long samples) {
  const long w2 = 2 * width, out = 4 * channels * height * width, n_all = samples * out;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long n = i / out, ch = i % out / (4 * height * width), oy = i % (4 * height * width) / w2, ox = i % w2;
    store(y, ty, i, load(x, tx, n * channels * height * width + (ch * height + oy / 2) * width + ox / 2));
  }
}

__global__ void upsample_backward_kernel(long channels, long height, long width, const void* dy, DType tdy, void* dx,
                                         DType tdx, long samples) {
  const long w2 = 2 * width, plane = height * width, in = channels * plane, n_all = samples * in;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long n = i / in, ch = i % in / plane, iy = i % plane / width, ix = i % width;
    const long b = n * 4 * in + ch * 4 * plane + 2 * iy * w2 + 2 * ix;
    store(dx, tdx, i, load(dy, tdy, b) + load(dy, tdy, b + 1) + load(dy, tdy, b + w2) + load(dy, tdy, b + w2 + 1));
  }
}

}  // namespace

void CudaBackend::upsample_forward(long channels, long height, long width, const Tensor& x, const Tensor& y) {
  require_upsample(channels, height, width, x, y, "upsample_forward");
  if (y.empty()) return;
  upsample_forward_kernel<<<blocks_for(y.size()), kThreads>>>(channels, height, width, x.data, x.dtype, y.data,
                                                              y.dtype, x.rows);
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::upsample_backward(long channels, long height, long width, const Tensor& dy, const Tensor& dx) {
  require_upsample(channels, height, width, dx, dy, "upsample_backward");
  if (dx.empty()) return;
  upsample_backward_kernel<<<blocks_for(dx.size()), kThreads>>>(channels, height, width, dy.data, dy.dtype, dx.data,
                                                                dx.dtype, dx.rows);
  GRADEQ_LAUNCH_CHECK();
}

}  // namespace gradeq
