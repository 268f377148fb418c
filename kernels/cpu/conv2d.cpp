// conv2d.cpp — the host backend's conv2d_forward, _backward_data and
// _backward_weight (kernels/backend_ops.def): im2col and the float32 GEMM,
// one product per group.
//   forward          y = cols(x) W^T, then + b, each output stored once;
//   backward data    dcols = dy W (a GEMM over C_out/groups), then col2im:
//                    each input's k^2 partial products added in float32 in
//                    tap order, then stored once (an order the
//                    reference's one-dot-product bound covers);
//   backward weight  the product dy^T cols(x) formed whole in float32 over
//                    every sample and output position, then added once
//                    into dw (beta = 1); db's sums likewise.
#include <algorithm>

#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"

namespace gradeq {

using namespace cpu;

namespace {

// Group g's taps of x: [samples H_out W_out, C_in/groups k^2], row (n, oy,
// ox), column (c, ky, kx), 0 in the padding.
void im2col(const Conv2dConfig& c, const float* x, long samples, long g, float* cols) {
  const long ho = c.out_height(), wo = c.out_width(), k = c.kernel, plane = c.height * c.width;
  for (long n = 0; n < samples; ++n)
    for (long oy = 0; oy < ho; ++oy)
      for (long ox = 0; ox < wo; ++ox) {
        float* row = cols + ((n * ho + oy) * wo + ox) * c.taps();
        for (long ch = 0; ch < c.in_per_group(); ++ch) {
          const float* image = x + n * c.in_size() + (g * c.in_per_group() + ch) * plane;
          for (long ky = 0; ky < k; ++ky) {
            const long iy = oy * c.stride - c.padding + ky * c.dilation;
            for (long kx = 0; kx < k; ++kx) {
              const long ix = ox * c.stride - c.padding + kx * c.dilation;
              const bool inside = iy >= 0 && iy < c.height && ix >= 0 && ix < c.width;
              row[(ch * k + ky) * k + kx] = inside ? image[iy * c.width + ix] : 0.0f;
            }
          }
        }
      }
}

// Group g's output (or its gradient) as rows of positions: [samples H_out
// W_out, C_out/groups].
void output_rows(const Conv2dConfig& c, const float* y, long samples, long g, float* rows) {
  const long positions = c.out_height() * c.out_width(), og = c.out_per_group();
  for (long n = 0; n < samples; ++n)
    for (long p = 0; p < positions; ++p)
      for (long o = 0; o < og; ++o) rows[(n * positions + p) * og + o] = y[n * c.out_size() + (g * og + o) * positions + p];
}

}  // namespace

void CpuBackend::conv2d_forward(const Conv2dConfig& c, const Tensor& x, const Tensor& w, const Tensor& b,
                                const Tensor& y) {
  require_conv2d(c, x, w, b, y, "conv2d_forward");
  const long samples = x.rows, positions = c.out_height() * c.out_width(), og = c.out_per_group();
  const long row_count = samples * positions;
  if (samples == 0) return;
  float* cols = scratch(static_cast<std::size_t>(row_count * (c.taps() + og)));
  float* product = cols + row_count * c.taps();
  const float* bv = b.empty() ? nullptr : values(b);
  float* yv = values(y);
  for (long g = 0; g < c.groups; ++g) {
    im2col(c, values(x), samples, g, cols);
    gemm(cols, false, values(w) + g * og * c.taps(), true, product, row_count, og, c.taps());
    dispatch(y.dtype, [&](auto dt) {
      constexpr DType D = decltype(dt)::value;
      for (long n = 0; n < samples; ++n)
        for (long p = 0; p < positions; ++p)
          for (long o = 0; o < og; ++o) {
            const long oc = g * og + o;
            const float v = product[(n * positions + p) * og + o];
            yv[n * c.out_size() + oc * positions + p] = store<D>(bv ? v + bv[oc] : v);
          }
    });
  }
}

void CpuBackend::conv2d_backward_data(const Conv2dConfig& c, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  require_conv2d(c, dx, w, Tensor{}, dy, "conv2d_backward_data");
  const long samples = dy.rows, positions = c.out_height() * c.out_width(), og = c.out_per_group();
  const long row_count = samples * positions, k = c.kernel, plane = c.height * c.width;
  if (samples == 0) return;
  float* rows = scratch(static_cast<std::size_t>(row_count * (og + c.taps())));
  float* dcols = rows + row_count * og;
  float* dxv = values(dx);
  std::fill(dxv, dxv + dx.size(), 0.0f);
  for (long g = 0; g < c.groups; ++g) {
    output_rows(c, values(dy), samples, g, rows);
    gemm(rows, false, values(w) + g * og * c.taps(), false, dcols, row_count, c.taps(), og);
    for (long n = 0; n < samples; ++n)
      for (long ch = 0; ch < c.in_per_group(); ++ch) {
        float* image = dxv + n * c.in_size() + (g * c.in_per_group() + ch) * plane;
        for (long oy = 0; oy < c.out_height(); ++oy)
          for (long ox = 0; ox < c.out_width(); ++ox) {
            const float* row = dcols + ((n * c.out_height() + oy) * c.out_width() + ox) * c.taps();
            for (long ky = 0; ky < k; ++ky) {
              const long iy = oy * c.stride - c.padding + ky * c.dilation;
              if (iy < 0 || iy >= c.height) continue;
              for (long kx = 0; kx < k; ++kx) {
                const long ix = ox * c.stride - c.padding + kx * c.dilation;
                if (ix >= 0 && ix < c.width) image[iy * c.width + ix] += row[(ch * k + ky) * k + kx];
              }
            }
          }
      }
  }
  dispatch(dx.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long i = 0; i < dx.size(); ++i) dxv[i] = store<D>(dxv[i]);
  });
}

void CpuBackend::conv2d_backward_weight(const Conv2dConfig& c, const Tensor& dy, const Tensor& x, const Tensor& dw,
                                        const Tensor& db) {
  require_conv2d(c, x, dw, db, dy, "conv2d_backward_weight");
  const long samples = x.rows, positions = c.out_height() * c.out_width(), og = c.out_per_group();
  const long row_count = samples * positions;
  float* cols = scratch(static_cast<std::size_t>(row_count * (c.taps() + og) + c.out_channels * c.taps() +
                                                 c.out_channels));
  float* rows = cols + row_count * c.taps();
  float* product = rows + row_count * og;
  float* sums = product + c.out_channels * c.taps();
  std::fill(sums, sums + c.out_channels, 0.0f);
  for (long g = 0; g < c.groups; ++g) {
    im2col(c, values(x), samples, g, cols);
    output_rows(c, values(dy), samples, g, rows);
    gemm(rows, true, cols, false, product + g * og * c.taps(), og, c.taps(), row_count);
    for (long r = 0; r < row_count; ++r)
      for (long o = 0; o < og; ++o) sums[g * og + o] += rows[r * og + o];
  }
  float* dwv = values(dw);
  dispatch(dw.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long i = 0; i < dw.size(); ++i) dwv[i] = store<D>(dwv[i] + product[i]);
  });
  if (db.empty()) return;
  float* dbv = values(db);
  dispatch(db.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long o = 0; o < c.out_channels; ++o) dbv[o] = store<D>(dbv[o] + sums[o]);
  });
}

}  // namespace gradeq
