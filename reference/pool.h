// pool.h — max pooling (nn.MaxPool2d(k, stride), no padding), average
// pooling (nn.AvgPool2d(k, stride), no padding), global
// average pooling (nn.AdaptiveAvgPool2d(1)) and nearest-neighbour
// up-sampling by 2 (nn.Upsample(scale_factor=2, mode="nearest")) on images
// stored one sample per row in NCHW order (ImageShape).
//
// Their sums, as PyTorch's kernels compute them (docs/NUMERICS.md §3,
// "Pooling and up-sampling"):
//   average pool forward    the window's kh kw values summed, then divided
//                           by their count;
//   average pool backward   each input the sum of dy / count over the
//                           windows that read it (one term where the
//                           windows do not overlap): each term divided,
//                           then summed, which also bounds a kernel that
//                           sums first and divides once;
//   max pool forward        the window's largest value, ties to the first
//                           index (PyTorch's rule); where another value of
//                           the window is within the errors' reach of the
//                           largest, the kernel may pick it: the bound
//                           then covers every such value;
//   max pool backward       dy routed to the window's first largest input,
//                           summed over the windows that route to it;
//                           where the winner is uncertain, every candidate
//                           may get dy or nothing: each is bounded by
//                           |dy| and dy's bound;
//   up-sampling forward     a copy, exact;
//   up-sampling backward    each input the sum of its 4 outputs' dy.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "reference/layers.h"
#include "reference/op.h"

namespace gradeq::ref {

struct PoolShape {
  ImageShape in;
  long kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;

  long out_height() const { return (in.height - kernel_h) / stride_h + 1; }
  long out_width() const { return (in.width - kernel_w) / stride_w + 1; }
  ImageShape out() const { return {in.channels, out_height(), out_width()}; }
  long count() const { return kernel_h * kernel_w; }

  // Throws std::invalid_argument (without a location) where PyTorch would
  // not pool.
  void check() const {
    if (!in.is_image()) throw std::invalid_argument(": its input is not an image (give the scenario an image)");
    if (kernel_h < 1 || kernel_w < 1 || stride_h < 1 || stride_w < 1)
      throw std::invalid_argument(": kernel and stride must be >= 1");
    if (kernel_h > in.height || kernel_w > in.width)
      throw std::invalid_argument(": its " + std::to_string(kernel_h) + "x" + std::to_string(kernel_w) +
                                  " window is larger than the " + describe(in) + " input");
  }
};

// The global average pool's shape: one window over the whole image.
inline PoolShape global_pool(const ImageShape& in) { return {in, in.height, in.width, in.height, in.width}; }

template <class T>
Matrix<T> avgpool_forward(const PoolShape& s, const Matrix<T>& x) {
  const ImageShape o = s.out();
  Matrix<T> y(x.rows(), o.size());
  const T count(static_cast<double>(s.count()));
  for (long n = 0; n < x.rows(); ++n)
    for (long c = 0; c < o.channels; ++c)
      for (long oy = 0; oy < o.height; ++oy)
        for (long ox = 0; ox < o.width; ++ox) {
          const long base = c * s.in.plane() + oy * s.stride_h * s.in.width + ox * s.stride_w;
          y(n, c * o.plane() + oy * o.width + ox) =
              reduce<T>(s.count(), [&](long i) -> const T& {
                return x(n, base + i / s.kernel_w * s.in.width + i % s.kernel_w);
              }) / count;
        }
  return y;
}

template <class T>
Matrix<T> avgpool_backward(const PoolShape& s, const Matrix<T>& dy) {
  const ImageShape o = s.out();
  Matrix<T> dx(dy.rows(), s.in.size());
  const T count(static_cast<double>(s.count()));
  for (long n = 0; n < dy.rows(); ++n)
    for (long c = 0; c < s.in.channels; ++c)
      for (long iy = 0; iy < s.in.height; ++iy)
        for (long ix = 0; ix < s.in.width; ++ix) {
          // The windows that read (iy, ix): oy with oy s <= iy < oy s + k.
          std::vector<long> windows;
          for (long oy = 0; oy < o.height; ++oy) {
            if (iy < oy * s.stride_h || iy >= oy * s.stride_h + s.kernel_h) continue;
            for (long ox = 0; ox < o.width; ++ox)
              if (ix >= ox * s.stride_w && ix < ox * s.stride_w + s.kernel_w)
                windows.push_back(c * o.plane() + oy * o.width + ox);
          }
          dx(n, c * s.in.plane() + iy * s.in.width + ix) =
              windows.empty() ? T(0.0)
                              : reduce<T>(static_cast<long>(windows.size()),
                                          [&](long i) { return dy(n, windows[static_cast<std::size_t>(i)]) / count; });
        }
  return dx;
}

namespace detail {

// The flat columns of window (c, oy, ox) of one sample, row by row.
inline std::vector<long> window_columns(const PoolShape& s, long c, long oy, long ox) {
  std::vector<long> cols;
  for (long ky = 0; ky < s.kernel_h; ++ky)
    for (long kx = 0; kx < s.kernel_w; ++kx)
      cols.push_back(c * s.in.plane() + (oy * s.stride_h + ky) * s.in.width + ox * s.stride_w + kx);
  return cols;
}

// A window's winner (the first index of its largest value) and, for a
// bounded x, the others a kernel may pick instead: values within the
// errors' reach of the winner's (exact ties between exact values are not
// ambiguous: the kernel sees them equal and takes the first too).
template <class T>
struct WindowMax {
  std::size_t winner = 0;
  std::vector<std::size_t> rivals;
};

template <class T>
WindowMax<T> window_max(const Matrix<T>& x, long n, const std::vector<long>& cols) {
  const auto value = [&](std::size_t i) -> double {
    if constexpr (std::is_same_v<T, Bounded>) {
      return x(n, cols[i]).value;
    } else {
      return x(n, cols[i]);
    }
  };
  WindowMax<T> m;
  for (std::size_t i = 1; i < cols.size(); ++i)
    if (value(i) > value(m.winner)) m.winner = i;
  if constexpr (std::is_same_v<T, Bounded>) {
    const auto reach = [&](std::size_t i) { return x(n, cols[i]).kernel_bound + x(n, cols[i]).reference; };
    for (std::size_t i = 0; i < cols.size(); ++i) {
      if (i == m.winner) continue;
      const double r = reach(i) + reach(m.winner);
      if (r > 0.0 && value(m.winner) - value(i) <= r) m.rivals.push_back(i);
    }
  }
  return m;
}

}  // namespace detail

template <class T>
Matrix<T> maxpool_forward(const PoolShape& s, const Matrix<T>& x) {
  const ImageShape o = s.out();
  Matrix<T> y(x.rows(), o.size());
  for (long n = 0; n < x.rows(); ++n)
    for (long c = 0; c < o.channels; ++c)
      for (long oy = 0; oy < o.height; ++oy)
        for (long ox = 0; ox < o.width; ++ox) {
          const std::vector<long> cols = detail::window_columns(s, c, oy, ox);
          const detail::WindowMax<T> m = detail::window_max(x, n, cols);
          const T& w = x(n, cols[m.winner]);
          T& out = y(n, c * o.plane() + oy * o.width + ox);
          out = w;
          if constexpr (std::is_same_v<T, Bounded>) {
            if (m.rivals.empty()) continue;
            // The kernel's max lies in [w - K_w, max over rivals of v + K].
            double kernel = w.kernel_bound, reference = w.reference;
            for (std::size_t r : m.rivals) {
              const Bounded& v = x(n, cols[r]);
              kernel = std::max(kernel, v.value - w.value + v.kernel_bound);
              reference = std::max(reference, v.value - w.value + v.reference);
            }
            out = Bounded::with_bounds(w.value, kernel, reference);
          }
        }
  return y;
}

// dx: dy routed to each window's winner, summed over the windows (their
// count at most ceil(k / stride)^2 per input).
template <class T>
Matrix<T> maxpool_backward(const PoolShape& s, const Matrix<T>& x, const Matrix<T>& dy) {
  const ImageShape o = s.out();
  std::vector<std::vector<std::vector<T>>> terms(static_cast<std::size_t>(x.rows()),
                                                 std::vector<std::vector<T>>(static_cast<std::size_t>(s.in.size())));
  for (long n = 0; n < x.rows(); ++n)
    for (long c = 0; c < o.channels; ++c)
      for (long oy = 0; oy < o.height; ++oy)
        for (long ox = 0; ox < o.width; ++ox) {
          const std::vector<long> cols = detail::window_columns(s, c, oy, ox);
          const detail::WindowMax<T> m = detail::window_max(x, n, cols);
          const T& g = dy(n, c * o.plane() + oy * o.width + ox);
          auto& into = terms[static_cast<std::size_t>(n)];
          if constexpr (std::is_same_v<T, Bounded>) {
            if (!m.rivals.empty()) {
              // Each candidate gets dy or nothing, whichever the kernel picks.
              const double k = std::abs(g.value) + g.kernel_bound, r = std::abs(g.value) + g.reference;
              into[static_cast<std::size_t>(cols[m.winner])].push_back(Bounded::with_bounds(g.value, k, r));
              for (std::size_t i : m.rivals) into[static_cast<std::size_t>(cols[i])].push_back(Bounded::with_bounds(0.0, k, r));
              continue;
            }
          }
          into[static_cast<std::size_t>(cols[m.winner])].push_back(g);
        }
  Matrix<T> dx(x.rows(), s.in.size());
  for (long n = 0; n < x.rows(); ++n)
    for (long i = 0; i < s.in.size(); ++i) {
      const std::vector<T>& t = terms[static_cast<std::size_t>(n)][static_cast<std::size_t>(i)];
      dx(n, i) = t.empty() ? T(0.0)
                           : t.size() == 1 ? t[0]
                                           : reduce<T>(static_cast<long>(t.size()),
                                                       [&](long j) -> const T& { return t[static_cast<std::size_t>(j)]; });
    }
  return dx;
}

template <class T>
Matrix<T> upsample_forward(const ImageShape& in, const Matrix<T>& x) {
  const long h = 2 * in.height, w = 2 * in.width;
  Matrix<T> y(x.rows(), in.channels * h * w);
  for (long n = 0; n < x.rows(); ++n)
    for (long c = 0; c < in.channels; ++c)
      for (long oy = 0; oy < h; ++oy)
        for (long ox = 0; ox < w; ++ox)
          y(n, (c * h + oy) * w + ox) = x(n, c * in.plane() + oy / 2 * in.width + ox / 2);
  return y;
}

template <class T>
Matrix<T> upsample_backward(const ImageShape& in, const Matrix<T>& dy) {
  const long w = 2 * in.width;
  Matrix<T> dx(dy.rows(), in.size());
  for (long n = 0; n < dy.rows(); ++n)
    for (long c = 0; c < in.channels; ++c)
      for (long iy = 0; iy < in.height; ++iy)
        for (long ix = 0; ix < in.width; ++ix) {
          const long base = c * 4 * in.plane() + 2 * iy * w + 2 * ix;
          dx(n, c * in.plane() + iy * in.width + ix) =
              reduce<T>(4, [&](long i) -> const T& { return dy(n, base + i / 2 * w + i % 2); });
        }
  return dx;
}

}  // namespace gradeq::ref
