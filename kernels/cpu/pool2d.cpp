// pool2d.cpp — the host backend's average pooling (kernels/backend_ops.def):
// every sum in float32 in a fixed order (a window's pixels row by row; an
// input's windows by output row, then column, each term dy / count), stored
// once.
#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"

namespace gradeq {

using namespace cpu;

void CpuBackend::avgpool_forward(const PoolConfig& c, const Tensor& x, const Tensor& y) {
  require_pool(c, x, y, "avgpool_forward");
  const float* xv = values(x);
  float* yv = values(y);
  const long ho = c.out_height(), wo = c.out_width();
  const float count = static_cast<float>(c.count());
  dispatch(y.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long n = 0; n < x.rows; ++n)
      for (long ch = 0; ch < c.channels; ++ch)
        for (long oy = 0; oy < ho; ++oy)
          for (long ox = 0; ox < wo; ++ox) {
            const float* window = xv + n * c.in_size() + (ch * c.height + oy * c.stride_h) * c.width + ox * c.stride_w;
            float s = 0.0f;
            for (long ky = 0; ky < c.kernel_h; ++ky)
              for (long kx = 0; kx < c.kernel_w; ++kx) s += window[ky * c.width + kx];
            yv[n * c.out_size() + (ch * ho + oy) * wo + ox] = store<D>(s / count);
          }
  });
}

void CpuBackend::avgpool_backward(const PoolConfig& c, const Tensor& dy, const Tensor& dx) {
  require_pool(c, dx, dy, "avgpool_backward");
  const float* dyv = values(dy);
  float* dxv = values(dx);
  const long ho = c.out_height(), wo = c.out_width();
  const float count = static_cast<float>(c.count());
  dispatch(dx.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long n = 0; n < dx.rows; ++n)
      for (long ch = 0; ch < c.channels; ++ch)
        for (long iy = 0; iy < c.height; ++iy)
          for (long ix = 0; ix < c.width; ++ix) {
            float s = 0.0f;
            for (long oy = 0; oy < ho; ++oy) {
              if (iy < oy * c.stride_h || iy >= oy * c.stride_h + c.kernel_h) continue;
              for (long ox = 0; ox < wo; ++ox)
                if (ix >= ox * c.stride_w && ix < ox * c.stride_w + c.kernel_w)
                  s += dyv[n * c.out_size() + (ch * ho + oy) * wo + ox] / count;
            }
            dxv[n * c.in_size() + (ch * c.height + iy) * c.width + ix] = store<D>(s);
          }
  });
}

}  // namespace gradeq
