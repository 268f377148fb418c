// upsample.cpp — the host backend's nearest-neighbour up-sampling by 2
// (kernels/backend_ops.def): forward a copy; backward each 2x2 block's four
// dy summed in float32 in row order, stored once.
#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"

namespace gradeq {

using namespace cpu;

void CpuBackend::upsample_forward(long channels, long height, long width, const Tensor& x, const Tensor& y) {
  require_upsample(channels, height, width, x, y, "upsample_forward");
  const float* xv = values(x);
  float* yv = values(y);
  const long plane = height * width, w2 = 2 * width;
  dispatch(y.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long n = 0; n < x.rows; ++n)
      for (long ch = 0; ch < channels; ++ch)
        for (long oy = 0; oy < 2 * height; ++oy)
          for (long ox = 0; ox < w2; ++ox)
            yv[n * y.cols + (ch * 2 * height + oy) * w2 + ox] = store<D>(xv[n * x.cols + ch * plane + oy / 2 * width + ox / 2]);
  });
}

void CpuBackend::upsample_backward(long channels, long height, long width, const Tensor& dy, const Tensor& dx) {
  require_upsample(channels, height, width, dx, dy, "upsample_backward");
  const float* dyv = values(dy);
  float* dxv = values(dx);
  const long plane = height * width, w2 = 2 * width;
  dispatch(dx.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long n = 0; n < dx.rows; ++n)
      for (long ch = 0; ch < channels; ++ch)
        for (long iy = 0; iy < height; ++iy)
          for (long ix = 0; ix < width; ++ix) {
            const float* block = dyv + n * dy.cols + ch * 4 * plane + 2 * iy * w2 + 2 * ix;
            dxv[n * dx.cols + ch * plane + iy * width + ix] = store<D>(block[0] + block[1] + block[w2] + block[w2 + 1]);
          }
  });
}

}  // namespace gradeq
