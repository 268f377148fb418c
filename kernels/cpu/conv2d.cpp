// conv2d.cpp — the host backend's conv2d_forward, _backward_data and
// _backward_weight (kernels/backend_ops.def), in two forms (ConvForm).
// im2col (backend "cpu"): im2col and the float32 GEMM, one product per group.
//   forward          y = cols(x) W^T, then + b, each output stored once;
//   backward data    dcols = dy W (a GEMM over C_out/groups), then col2im:
//                    each input's k^2 partial products added in float32 in
//                    tap order, then stored once (an order the
//                    reference's one-dot-product bound covers);
//   backward weight  the product dy^T cols(x) formed whole in float32 over
//                    every sample and output position, then added once
//                    into dw (beta = 1); db's sums likewise.
// direct (backend "cpu-direct"): no column buffer; each result one float32
// dot product summed in loop order, the taps inside the image only:
//   forward          y[n, o, oy, ox] over (c, ky, kx), then + b;
//   backward data    dx[n, c, iy, ix] over (o, ky, kx) of the outputs its
//                    taps reach;
//   backward weight  dw[o, c, ky, kx] over (n, oy, ox), added once into dw
//                    (beta = 1); db[o] over (n, oy, ox) likewise.
// A different order from im2col's blocked GEMM for every sum, under the
// same one-dot-product bounds (docs/NUMERICS.md, "Convolutions").
// cpu-adversarial is the im2col form with its GEMMs and db's sums in the
// adversarial order (cpu::adversarial_sum); col2im's k^2 additions stay in
// tap order.
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
            const long iy = c.input_index(oy, ky);
            for (long kx = 0; kx < k; ++kx) {
              const long ix = c.input_index(ox, kx);
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


// ---- the direct form ----

// x[n, c, iy, ix] of an NCHW image stored one sample per row.
struct Image {
  const float* v;
  long per_sample, height, width;
  float at(long n, long c, long iy, long ix) const { return v[n * per_sample + (c * height + iy) * width + ix]; }
};

void direct_forward(const Conv2dConfig& c, const float* x, const float* w, const float* b, long samples, float* y) {
  const long ho = c.out_height(), wo = c.out_width(), k = c.kernel, og = c.out_per_group();
  const Image in{x, c.in_size(), c.height, c.width};
  for (long n = 0; n < samples; ++n)
    for (long oc = 0; oc < c.out_channels; ++oc) {
      const long first = oc / og * c.in_per_group();
      const float* row = w + oc * c.taps();
      for (long oy = 0; oy < ho; ++oy)
        for (long ox = 0; ox < wo; ++ox) {
          float acc = 0.0f;
          for (long ch = 0; ch < c.in_per_group(); ++ch)
            for (long ky = 0; ky < k; ++ky) {
              const long iy = c.input_index(oy, ky);
              if (iy < 0 || iy >= c.height) continue;
              for (long kx = 0; kx < k; ++kx) {
                const long ix = c.input_index(ox, kx);
                if (ix >= 0 && ix < c.width) acc += row[(ch * k + ky) * k + kx] * in.at(n, first + ch, iy, ix);
              }
            }
          y[n * c.out_size() + (oc * ho + oy) * wo + ox] = b ? acc + b[oc] : acc;
        }
    }
}

void direct_backward_data(const Conv2dConfig& c, const float* dy, const float* w, long samples, float* dx) {
  const long ho = c.out_height(), wo = c.out_width(), k = c.kernel, og = c.out_per_group();
  const Image grad{dy, c.out_size(), ho, wo};
  for (long n = 0; n < samples; ++n)
    for (long ci = 0; ci < c.in_channels; ++ci) {
      const long g = ci / c.in_per_group(), ch = ci % c.in_per_group();
      for (long iy = 0; iy < c.height; ++iy)
        for (long ix = 0; ix < c.width; ++ix) {
          float acc = 0.0f;
          for (long o = 0; o < og; ++o) {
            const long oc = g * og + o;
            for (long ky = 0; ky < k; ++ky) {
              const long oy = c.output_index(iy, ky, ho);
              if (oy < 0) continue;
              for (long kx = 0; kx < k; ++kx) {
                const long ox = c.output_index(ix, kx, wo);
                if (ox < 0) continue;
                acc += grad.at(n, oc, oy, ox) * w[oc * c.taps() + (ch * k + ky) * k + kx];
              }
            }
          }
          dx[n * c.in_size() + (ci * c.height + iy) * c.width + ix] = acc;
        }
    }
}

// The weight gradient's and bias gradient's sums, before they are added into dw and db.
void direct_backward_weight(const Conv2dConfig& c, const float* dy, const float* x, long samples, float* dw_sum,
                            float* db_sum) {
  const long ho = c.out_height(), wo = c.out_width(), k = c.kernel, og = c.out_per_group();
  const Image grad{dy, c.out_size(), ho, wo}, in{x, c.in_size(), c.height, c.width};
  for (long oc = 0; oc < c.out_channels; ++oc) {
    const long first = oc / og * c.in_per_group();
    for (long ch = 0; ch < c.in_per_group(); ++ch)
      for (long ky = 0; ky < k; ++ky)
        for (long kx = 0; kx < k; ++kx) {
          float acc = 0.0f;
          for (long n = 0; n < samples; ++n)
            for (long oy = 0; oy < ho; ++oy) {
              const long iy = c.input_index(oy, ky);
              if (iy < 0 || iy >= c.height) continue;
              for (long ox = 0; ox < wo; ++ox) {
                const long ix = c.input_index(ox, kx);
                if (ix >= 0 && ix < c.width) acc += grad.at(n, oc, oy, ox) * in.at(n, first + ch, iy, ix);
              }
            }
          dw_sum[oc * c.taps() + (ch * k + ky) * k + kx] = acc;
        }
    float acc = 0.0f;
    for (long n = 0; n < samples; ++n)
      for (long p = 0; p < ho * wo; ++p) acc += grad.at(n, oc, 0, p);
    db_sum[oc] = acc;
  }
}

// Stores each value of v (float32) at t's dtype, in place.
void store_all(const Tensor& t, float* v) {
  dispatch(t.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long i = 0; i < t.size(); ++i) v[i] = store<D>(v[i]);
  });
}

}  // namespace

void CpuBackend::conv2d_forward(const Conv2dConfig& c, const Tensor& x, const Tensor& w, const Tensor& b,
                                const Tensor& y) {
  require_conv2d(c, x, w, b, y, "conv2d_forward");
  const long samples = x.rows, positions = c.out_height() * c.out_width(), og = c.out_per_group();
  const long row_count = samples * positions;
  if (samples == 0) return;
  const float* bv = b.empty() ? nullptr : values(b);
  float* yv = values(y);
  if (conv_form_ == ConvForm::direct) {
    direct_forward(c, values(x), values(w), bv, samples, yv);
    store_all(y, yv);
    return;
  }
  float* cols = scratch(static_cast<std::size_t>(row_count * (c.taps() + og)));
  float* product = cols + row_count * c.taps();
  for (long g = 0; g < c.groups; ++g) {
    im2col(c, values(x), samples, g, cols);
    gemm(cols, false, values(w) + g * og * c.taps(), true, product, row_count, og, c.taps(), sum_order_);
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
  float* dxv = values(dx);
  if (conv_form_ == ConvForm::direct) {
    direct_backward_data(c, values(dy), values(w), samples, dxv);
    store_all(dx, dxv);
    return;
  }
  float* rows = scratch(static_cast<std::size_t>(row_count * (og + c.taps())));
  float* dcols = rows + row_count * og;
  std::fill(dxv, dxv + dx.size(), 0.0f);
  for (long g = 0; g < c.groups; ++g) {
    output_rows(c, values(dy), samples, g, rows);
    gemm(rows, false, values(w) + g * og * c.taps(), false, dcols, row_count, c.taps(), og, sum_order_);
    for (long n = 0; n < samples; ++n)
      for (long ch = 0; ch < c.in_per_group(); ++ch) {
        float* image = dxv + n * c.in_size() + (g * c.in_per_group() + ch) * plane;
        for (long oy = 0; oy < c.out_height(); ++oy)
          for (long ox = 0; ox < c.out_width(); ++ox) {
            const float* row = dcols + ((n * c.out_height() + oy) * c.out_width() + ox) * c.taps();
            for (long ky = 0; ky < k; ++ky) {
              const long iy = c.input_index(oy, ky);
              if (iy < 0 || iy >= c.height) continue;
              for (long kx = 0; kx < k; ++kx) {
                const long ix = c.input_index(ox, kx);
                if (ix >= 0 && ix < c.width) image[iy * c.width + ix] += row[(ch * k + ky) * k + kx];
              }
            }
          }
      }
  }
  store_all(dx, dxv);
}

void CpuBackend::conv2d_backward_weight(const Conv2dConfig& c, const Tensor& dy, const Tensor& x, const Tensor& dw,
                                        const Tensor& db) {
  require_conv2d(c, x, dw, db, dy, "conv2d_backward_weight");
  const long samples = x.rows, positions = c.out_height() * c.out_width(), og = c.out_per_group();
  const long row_count = samples * positions;
  // The sums to add into dw and db first; after them, im2col's buffers.
  const bool direct = conv_form_ == ConvForm::direct;
  float* product = scratch(static_cast<std::size_t>(c.out_channels * (c.taps() + 1) +
                                                    (direct ? 0 : row_count * (c.taps() + og))));
  float* sums = product + c.out_channels * c.taps();
  float* cols = sums + c.out_channels;
  float* rows = cols + row_count * c.taps();
  if (direct) {
    direct_backward_weight(c, values(dy), values(x), samples, product, sums);
  } else {
    for (long g = 0; g < c.groups; ++g) {
      im2col(c, values(x), samples, g, cols);
      output_rows(c, values(dy), samples, g, rows);
      gemm(rows, true, cols, false, product + g * og * c.taps(), og, c.taps(), row_count, sum_order_);
      column_sums(rows, row_count, og, sums + g * og, sum_order_);
    }
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
