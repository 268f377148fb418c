// conv.h — 2-D convolution (PyTorch's nn.Conv2d: cross-correlation with
// stride, zero padding, dilation and groups) on images stored one sample
// per row in NCHW order (ImageShape). The weight is [C_out, C_in/groups
// k k] (PyTorch's [C_out, C_in/groups, k, k], flattened), the bias
// [1, C_out].
//
// Each of the three products is one GEMM per group, so that the matrix
// form of the dot-product rule bounds it (docs/NUMERICS.md §3,
// "Convolution"):
//   forward           y = cols(x) W^T + b: each output a dot product over
//                     C_in/groups k^2 taps;
//   input gradient    dx = taps(dy) W': each input a dot product over
//                     C_out/groups k^2 terms, the output positions that
//                     read it (a transposed convolution written as a
//                     gather, so that the bound is one dot product's
//                     whatever order a kernel takes: im2col's GEMM then
//                     col2im's sums is one such order);
//   weight gradient   dW = dy^T cols(x): a dot product over the batch's
//                     samples x H_out x W_out positions; db its column
//                     sums of dy.
// Taps that fall in the padding, and the input-gradient terms no output
// reads (stride > 1), are exact zeros: the rule counts them among its n
// terms, which only makes the bound larger.
#pragma once

#include <stdexcept>
#include <string>

#include "reference/layers.h"
#include "reference/op.h"

namespace gradeq::ref {

struct ConvShape {
  ImageShape in;
  long out_channels = 1, kernel = 1, stride = 1, padding = 0, dilation = 1, groups = 1;

  long out_height() const { return (in.height + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1; }
  long out_width() const { return (in.width + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1; }
  ImageShape out() const { return {out_channels, out_height(), out_width()}; }
  long in_per_group() const { return in.channels / groups; }
  long out_per_group() const { return out_channels / groups; }
  long taps() const { return in_per_group() * kernel * kernel; }  // a weight row's width

  // Throws std::invalid_argument (without a location) where the shape is
  // not a convolution PyTorch would run.
  void check() const {
    if (!in.is_image()) throw std::invalid_argument(": its input is not an image (give the scenario an image)");
    if (out_channels < 1 || kernel < 1 || stride < 1 || padding < 0 || dilation < 1 || groups < 1)
      throw std::invalid_argument(": channels, kernel, stride, dilation and groups must be >= 1, padding >= 0");
    if (in.channels % groups != 0 || out_channels % groups != 0)
      throw std::invalid_argument(": " + std::to_string(groups) + " groups must divide its " +
                                  std::to_string(in.channels) + " input and " + std::to_string(out_channels) +
                                  " output channels");
    const long reach = dilation * (kernel - 1) + 1;
    if (in.height + 2 * padding < reach || in.width + 2 * padding < reach)
      throw std::invalid_argument(": its kernel reaches " + std::to_string(reach) + " pixels, more than the padded " +
                                  describe(in) + " input");
  }
};

namespace detail {

template <class T>
Matrix<T> zeros(long rows, long cols) {
  Matrix<T> m(rows, cols);
  m.fill(T(0.0));
  return m;
}

// Group g's taps of x: [samples H_out W_out, C_in/groups k^2], row (s, oy,
// ox), column (c, ky, kx) as the weight's; 0 in the padding.
template <class T>
Matrix<T> im2col(const ConvShape& s, const Matrix<T>& x, long g) {
  const ImageShape o = s.out();
  const long k = s.kernel, plane = s.in.plane();
  Matrix<T> cols = zeros<T>(x.rows() * o.plane(), s.taps());
  for (long n = 0; n < x.rows(); ++n)
    for (long oy = 0; oy < o.height; ++oy)
      for (long ox = 0; ox < o.width; ++ox) {
        const long r = (n * o.height + oy) * o.width + ox;
        for (long c = 0; c < s.in_per_group(); ++c)
          for (long ky = 0; ky < k; ++ky) {
            const long iy = oy * s.stride - s.padding + ky * s.dilation;
            if (iy < 0 || iy >= s.in.height) continue;
            for (long kx = 0; kx < k; ++kx) {
              const long ix = ox * s.stride - s.padding + kx * s.dilation;
              if (ix < 0 || ix >= s.in.width) continue;
              cols(r, (c * k + ky) * k + kx) = x(n, (g * s.in_per_group() + c) * plane + iy * s.in.width + ix);
            }
          }
      }
  return cols;
}

// Group g's output gradient as rows of output positions: [samples H_out
// W_out, C_out/groups].
template <class T>
Matrix<T> output_rows(const ConvShape& s, const Matrix<T>& dy, long g) {
  const long positions = s.out().plane();
  Matrix<T> m(dy.rows() * positions, s.out_per_group());
  for (long n = 0; n < dy.rows(); ++n)
    for (long p = 0; p < positions; ++p)
      for (long o = 0; o < s.out_per_group(); ++o) m(n * positions + p, o) = dy(n, (g * s.out_per_group() + o) * positions + p);
  return m;
}

}  // namespace detail

template <class T>
Matrix<T> conv2d_forward(const ConvShape& s, const Matrix<T>& x, const Matrix<T>& w, const Matrix<T>& b) {
  const ImageShape o = s.out();
  Matrix<T> y(x.rows(), o.size());
  for (long g = 0; g < s.groups; ++g) {
    const Matrix<T> wg = w.middleRows(g * s.out_per_group(), s.out_per_group());
    const Matrix<T> yg = gemm(detail::im2col(s, x, g), transposed(wg));
    for (long n = 0; n < x.rows(); ++n)
      for (long p = 0; p < o.plane(); ++p)
        for (long c = 0; c < s.out_per_group(); ++c) {
          const long oc = g * s.out_per_group() + c;
          y(n, oc * o.plane() + p) = yg(n * o.plane() + p, c) + b(0, oc);
        }
  }
  return y;
}

// dW += dy^T cols(x) per group (block g of dW's rows), db += dy's sums over
// every sample and position.
template <class T>
void conv2d_backward_weight(const ConvShape& s, const Matrix<T>& x, const Matrix<T>& dy, RowSum<T>& dw, RowSum<T>& db) {
  const long positions = s.out().plane();
  for (long g = 0; g < s.groups; ++g)
    dw.add_product_block(g, s.groups, transposed(detail::output_rows(s, dy, g)), detail::im2col(s, x, g));
  db.add_columns(dy.rows() * positions, s.out_channels, [&](long r, long o) -> const T& {
    return dy(r / positions, o * positions + r % positions);
  });
}

// dx[n, c, iy, ix] = sum over (o, ky, kx) of w[o, c, ky, kx] dy[n, o, oy, ox]
// where oy stride = iy + padding - ky dilation (and likewise ox): one GEMM
// per group over the gathered dy, [samples H W, C_out/groups k^2], and the
// weight rearranged to [C_out/groups k^2, C_in/groups].
template <class T>
Matrix<T> conv2d_backward_data(const ConvShape& s, const Matrix<T>& w, const Matrix<T>& dy) {
  const ImageShape o = s.out();
  const long k = s.kernel, plane = s.in.plane(), og = s.out_per_group(), cg = s.in_per_group();
  Matrix<T> dx(dy.rows(), s.in.size());
  for (long g = 0; g < s.groups; ++g) {
    Matrix<T> taps = detail::zeros<T>(dy.rows() * plane, og * k * k);
    for (long n = 0; n < dy.rows(); ++n)
      for (long iy = 0; iy < s.in.height; ++iy)
        for (long ix = 0; ix < s.in.width; ++ix) {
          const long r = (n * s.in.height + iy) * s.in.width + ix;
          for (long ky = 0; ky < k; ++ky) {
            const long ty = iy + s.padding - ky * s.dilation;
            if (ty < 0 || ty % s.stride != 0 || ty / s.stride >= o.height) continue;
            for (long kx = 0; kx < k; ++kx) {
              const long tx = ix + s.padding - kx * s.dilation;
              if (tx < 0 || tx % s.stride != 0 || tx / s.stride >= o.width) continue;
              for (long c = 0; c < og; ++c)
                taps(r, (c * k + ky) * k + kx) = dy(n, (g * og + c) * o.plane() + (ty / s.stride) * o.width + tx / s.stride);
            }
          }
        }
    Matrix<T> wt(og * k * k, cg);
    for (long c = 0; c < og; ++c)
      for (long i = 0; i < cg; ++i)
        for (long t = 0; t < k * k; ++t) wt(c * k * k + t, i) = w(g * og + c, i * k * k + t);
    const Matrix<T> dxg = gemm(taps, wt);
    for (long n = 0; n < dy.rows(); ++n)
      for (long p = 0; p < plane; ++p)
        for (long i = 0; i < cg; ++i) dx(n, (g * cg + i) * plane + p) = dxg(n * plane + p, i);
  }
  return dx;
}

}  // namespace gradeq::ref
