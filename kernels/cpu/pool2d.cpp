// pool2d.cpp — the host backend's average and max pooling
// (kernels/backend_ops.def): every sum in float32 in a fixed order (a
// window's pixels row by row; an input's windows by output row, then
// column, each term dy / count), stored once; a window's winner the first
// of its largest values, row by row.
#include <algorithm>

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

namespace {

// The flat index, within one sample's image, of window (ch, oy, ox)'s first
// largest value.
long window_winner(const PoolConfig& c, const float* image, long ch, long oy, long ox) {
  long best = (ch * c.height + oy * c.stride_h) * c.width + ox * c.stride_w;
  for (long ky = 0; ky < c.kernel_h; ++ky)
    for (long kx = 0; kx < c.kernel_w; ++kx) {
      const long i = (ch * c.height + oy * c.stride_h + ky) * c.width + ox * c.stride_w + kx;
      if (image[i] > image[best]) best = i;
    }
  return best;
}

}  // namespace

void CpuBackend::maxpool_forward(const PoolConfig& c, const Tensor& x, const Tensor& y) {
  require_pool(c, x, y, "maxpool_forward");
  const float* xv = values(x);
  float* yv = values(y);
  const long ho = c.out_height(), wo = c.out_width();
  dispatch(y.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long n = 0; n < x.rows; ++n)
      for (long ch = 0; ch < c.channels; ++ch)
        for (long oy = 0; oy < ho; ++oy)
          for (long ox = 0; ox < wo; ++ox) {
            const float* image = xv + n * c.in_size();
            yv[n * c.out_size() + (ch * ho + oy) * wo + ox] = store<D>(image[window_winner(c, image, ch, oy, ox)]);
          }
  });
}

void CpuBackend::maxpool_backward(const PoolConfig& c, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  require_pool(c, x, dy, "maxpool_backward");
  require_shape(dx, x.rows, x.cols, "maxpool_backward dx");
  const float *xv = values(x), *dyv = values(dy);
  float* dxv = values(dx);
  const long ho = c.out_height(), wo = c.out_width();
  std::fill(dxv, dxv + dx.size(), 0.0f);
  for (long n = 0; n < x.rows; ++n)
    for (long ch = 0; ch < c.channels; ++ch)
      for (long oy = 0; oy < ho; ++oy)
        for (long ox = 0; ox < wo; ++ox) {
          const long winner = window_winner(c, xv + n * c.in_size(), ch, oy, ox);
          dxv[n * c.in_size() + winner] += dyv[n * c.out_size() + (ch * ho + oy) * wo + ox];
        }
  dispatch(dx.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long i = 0; i < dx.size(); ++i) dxv[i] = store<D>(dxv[i]);
  });
}

}  // namespace gradeq
