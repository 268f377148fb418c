// layers.h — float64 reference layers: one plain function per op, forward
// and backward, with the kernel's argument shapes.
//
// x is [rows, features] with row-major storage; a sample is `positions`
// consecutive rows (a sequence or an image's spatial positions). Weights are
// [out, in] and y = x W^T + b, as in PyTorch. Backward functions return
// fresh gradients; accumulating them is the procedure's job. Every sum goes
// through reduce<T>(), matmul() or a RowSum so that T = Bounded bounds it.
// No I/O, no harness types.
#pragma once

#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "reference/bounded.h"
#include "reference/kinds.h"
#include "reference/matmul.h"
#include "reference/tensor.h"

namespace gradeq::ref {

// ---------------------------------------------------------------- Linear

// f(a, b) on the operands as the kernel's GEMM reads them: with TF32 (an
// external run's declaration) each element rounded once more on the way
// in, bounded as a store (values unchanged); otherwise as they are.
template <class T, class F>
decltype(auto) with_gemm_operands(const Matrix<T>& a, const Matrix<T>& b, F&& f) {
  if constexpr (std::is_same_v<T, Bounded>) {
    if (rounding_model().gemm_operand.unit_roundoff > 0.0)
      return f(stored(a, Storage::gemm_operand), stored(b, Storage::gemm_operand));
  }
  return f(a, b);
}

// A product as the kernel's GEMM computes it: by the dot-product rule, on
// operands read at the GEMM's input precision.
template <class T>
Matrix<T> gemm(const Matrix<T>& a, const Matrix<T>& b) {
  return with_gemm_operands(a, b, [](const Matrix<T>& x, const Matrix<T>& y) { return matmul(x, y); });
}

// y = x W^T + b: the product by the dot-product rule (reference/dot.h),
// then the bias added element by element.
template <class T>
Matrix<T> linear_forward(const Matrix<T>& x, const Matrix<T>& w, const Matrix<T>& b) {
  Matrix<T> y = gemm(x, transposed(w));
  for (long i = 0; i < y.rows(); ++i)
    for (long o = 0; o < y.cols(); ++o) y(i, o) = y(i, o) + b(0, o);
  return y;
}

// A parameter's gradient as a sum over the batch's rows: dW = dy^T x, and
// the column sums that make db, dgamma and dbeta. The rows may arrive in
// slices, one pass over each (ProcedureConfig::slice_samples): the sums go
// on, and result() decides the rule once, over every row (ProductSums,
// SumOfTerms). One slice is the whole batch's product and sums, bit for bit.
template <class T>
class RowSum {
 public:
  // += a b over the rows: a [m, rows] (dy^T), b [rows, p], read as gemm()
  // reads them.
  void add_product(const Matrix<T>& a, const Matrix<T>& b) {
    with_gemm_operands(a, b, [this](const Matrix<T>& x, const Matrix<T>& y) { add_operands(product_, x, y); });
  }
  // += a b into block g of `groups` row blocks, each a product of its own
  // (a grouped convolution's weight gradient). One group is add_product.
  void add_product_block(long g, long groups, const Matrix<T>& a, const Matrix<T>& b) {
    if (groups == 1) return add_product(a, b);
    if (blocks_.empty()) blocks_.resize(static_cast<std::size_t>(groups));
    with_gemm_operands(a, b, [&](const Matrix<T>& x, const Matrix<T>& y) {
      add_operands(blocks_.at(static_cast<std::size_t>(g)), x, y);
    });
  }
  // += term(r, c) over rows r, for each column c.
  template <class F>
  void add_columns(long rows, long cols, F&& term) {
    if (columns_.empty()) columns_.resize(static_cast<std::size_t>(cols));
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < cols; ++c) add_term(columns_[static_cast<std::size_t>(c)], term(r, c));
  }
  // += dy's row r into row key(r) of a [keys, cols] sum, for every row
  // whose key is >= 0 (an embedding's dW: each token's rows summed, a
  // reduction as long as the token's count). A row no key reaches is 0.
  template <class K>
  void add_rows_by_key(long keys, const Matrix<T>& dy, K&& key) {
    if (keyed_.empty()) {
      keys_ = keys;
      keyed_.resize(static_cast<std::size_t>(keys * dy.cols()));
    }
    for (long r = 0; r < dy.rows(); ++r) {
      const long k = key(r);
      if (k < 0) continue;
      for (long c = 0; c < dy.cols(); ++c) add_term(keyed_[static_cast<std::size_t>(k * dy.cols() + c)], dy(r, c));
    }
  }
  Matrix<T> result() && {
    if (!keyed_.empty()) {
      const long cols = static_cast<long>(keyed_.size()) / keys_;
      Matrix<T> out(keys_, cols);
      for (long i = 0; i < out.size(); ++i) {
        if constexpr (std::is_same_v<T, Bounded>) {
          out.data()[i] = std::move(keyed_[static_cast<std::size_t>(i)]).result();
        } else {
          out.data()[i] = keyed_[static_cast<std::size_t>(i)];
        }
      }
      return out;
    }
    if (!blocks_.empty()) {
      std::vector<Matrix<T>> parts;
      long rows = 0;
      for (Product& p : blocks_) {
        if constexpr (std::is_same_v<T, Bounded>) {
          parts.push_back(p->decide());
        } else {
          parts.push_back(std::move(p));
        }
        rows += parts.back().rows();
      }
      Matrix<T> out(rows, parts[0].cols());
      long at = 0;
      for (const Matrix<T>& p : parts) {
        out.middleRows(at, p.rows()) = p;
        at += p.rows();
      }
      return out;
    }
    if constexpr (std::is_same_v<T, Bounded>) {
      if (product_) return product_->decide();
    } else {
      if (product_.size() > 0) return std::move(product_);
    }
    Matrix<T> out(1, static_cast<long>(columns_.size()));
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      if constexpr (std::is_same_v<T, Bounded>) {
        out(0, static_cast<long>(c)) = std::move(columns_[c]).result();
      } else {
        out(0, static_cast<long>(c)) = columns_[c];
      }
    }
    return out;
  }

 private:
  using Column = std::conditional_t<std::is_same_v<T, Bounded>, SumOfTerms, double>;
  using Product = std::conditional_t<std::is_same_v<T, Bounded>, std::optional<ProductSums>, Matrix<double>>;

  static void add_operands(Product& product, const Matrix<T>& a, const Matrix<T>& b) {
    if constexpr (std::is_same_v<T, Bounded>) {
      if (product) {
        product->add(a, b);
      } else {
        product.emplace(a, b);
      }
    } else {
      if (product.size() > 0) {
        product += matmul(a, b);
      } else {
        product = matmul(a, b);
      }
    }
  }
  static void add_term(Column& sum, const T& t) {
    if constexpr (std::is_same_v<T, Bounded>) {
      sum.add(t);
    } else {
      sum += t;
    }
  }

  Product product_;
  std::vector<Product> blocks_;
  std::vector<Column> columns_;
  long keys_ = 0;
  std::vector<Column> keyed_;
};

template <class T>
struct LinearGrads {
  Matrix<T> dx, dw, db;
};

// dW = dy^T x by the dot-product rule and db = column sums of dy, added
// into their row sums.
template <class T>
void linear_backward_weight(const Matrix<T>& x, const Matrix<T>& dy, RowSum<T>& dw, RowSum<T>& db) {
  dw.add_product(transposed(dy), x);
  db.add_columns(dy.rows(), dy.cols(), [&](long i, long o) -> const T& { return dy(i, o); });
}

// dx = dy W by the dot-product rule.
template <class T>
Matrix<T> linear_backward_data(const Matrix<T>& w, const Matrix<T>& dy) {
  return gemm(dy, w);
}

// Both: dW and db added into their row sums; dx returned.
template <class T>
Matrix<T> linear_backward(const Matrix<T>& x, const Matrix<T>& w, const Matrix<T>& dy, RowSum<T>& dw, RowSum<T>& db) {
  linear_backward_weight(x, dy, dw, db);
  return linear_backward_data(w, dy);
}

template <class T>
LinearGrads<T> linear_backward(const Matrix<T>& x, const Matrix<T>& w, const Matrix<T>& dy) {
  RowSum<T> dw, db;
  Matrix<T> dx = linear_backward(x, w, dy, dw, db);
  return {std::move(dx), std::move(dw).result(), std::move(db).result()};
}

// ---------------------------------------------------------------- Embedding

// y[r, :] = w[ids[r], :]: a gather, exact. ids is [rows, 1], whole numbers
// in [0, w.rows()).
template <class T>
Matrix<T> embedding_forward(const Matrix<double>& ids, const Matrix<T>& w) {
  Matrix<T> y(ids.rows(), w.cols());
  for (long r = 0; r < ids.rows(); ++r) y.row(r) = w.row(static_cast<long>(ids(r, 0)));
  return y;
}

// dw[v, :] = into[v, :] + the sum of dy[r, :] over the rows r whose id is v,
// for every v but padding_idx (< 0: none), whose row stays into's. Each
// element is one reduction whose terms are into's element and the token's
// rows of dy, as many as the token occurs, in any order (NUMERICS: the
// embedding backward). A row of a token that does not occur is into's,
// unrounded.
template <class T>
Matrix<T> embedding_backward(const Matrix<double>& ids, const Matrix<T>& dy, long padding_idx, const Matrix<T>& into) {
  std::vector<std::vector<long>> rows_of(static_cast<std::size_t>(into.rows()));
  for (long r = 0; r < ids.rows(); ++r) {
    const long v = static_cast<long>(ids(r, 0));
    if (v != padding_idx) rows_of[static_cast<std::size_t>(v)].push_back(r);
  }
  Matrix<T> dw = into;
  for (long v = 0; v < into.rows(); ++v) {
    const std::vector<long>& rows = rows_of[static_cast<std::size_t>(v)];
    if (rows.empty()) continue;
    for (long c = 0; c < into.cols(); ++c)
      dw(v, c) = reduce<T>(static_cast<long>(rows.size()) + 1, [&](long i) {
        return i == 0 ? into(v, c) : dy(rows[static_cast<std::size_t>(i - 1)], c);
      });
  }
  return dw;
}

// ----------------------------------------------------------- activations

template <class T>
Matrix<T> relu_forward(const Matrix<T>& x) {
  Matrix<T> y(x.rows(), x.cols());
  for (long i = 0; i < x.size(); ++i) y.data()[i] = x.data()[i] * positive_step(x.data()[i]);
  return y;
}

template <class T>
Matrix<T> relu_backward(const Matrix<T>& x, const Matrix<T>& dy) {
  Matrix<T> dx(x.rows(), x.cols());
  for (long i = 0; i < x.size(); ++i) dx.data()[i] = dy.data()[i] * positive_step(x.data()[i]);
  return dx;
}

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline constexpr double kGeluSqrt2OverPi = 0.7978845608028654;
inline constexpr double kGeluCubic = 0.044715;
// -min gelu'(x) = max gelu'(x) - 1 = 0.128993..., rounded up.
inline constexpr double kGeluSlopeReach = 0.12900;

template <class T>
T gelu_inner(const T& x) {
  return T(kGeluSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
}

template <class T>
Matrix<T> gelu_forward(const Matrix<T>& x) {
  Matrix<T> y(x.rows(), x.cols());
  for (long i = 0; i < x.size(); ++i) {
    const T& v = x.data()[i];
    y.data()[i] = T(0.5) * v * (T(1.0) + tanh(gelu_inner(v)));
  }
  return y;
}

// d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
template <class T>
Matrix<T> gelu_backward(const Matrix<T>& x, const Matrix<T>& dy) {
  Matrix<T> dx(x.rows(), x.cols());
  for (long i = 0; i < x.size(); ++i) {
    const T& v = x.data()[i];
    const T t = tanh(gelu_inner(v));
    const T inner_grad = T(kGeluSqrt2OverPi) * (T(1.0) + T(3.0 * kGeluCubic) * v * v);
    // gelu' lies within [-0.12899, 1.12899] for every x (its extremes at
    // x = -+1.4185), so its error is bounded whatever x's is.
    const T grad = within_interval(T(0.5) * (T(1.0) + t) + T(0.5) * v * (T(1.0) - t * t) * inner_grad,
                                   -kGeluSlopeReach * a_priori_margin(1), (1.0 + kGeluSlopeReach) * a_priori_margin(1));
    dx.data()[i] = dy.data()[i] * grad;
  }
  return dx;
}

// GELU, exact (erf) form: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
inline constexpr double kSqrtHalf = 0.7071067811865476;
inline constexpr double kInvSqrt2Pi = 0.3989422804014327;
// -min gelu'(x) = max gelu'(x) - 1 = Phi(-sqrt 2) - sqrt(2) phi(sqrt 2)
// = 0.1289041..., rounded up.
inline constexpr double kGeluErfSlopeReach = 0.12891;

template <class T>
Matrix<T> gelu_erf_forward(const Matrix<T>& x) {
  Matrix<T> y(x.rows(), x.cols());
  for (long i = 0; i < x.size(); ++i) {
    const T& v = x.data()[i];
    y.data()[i] = T(0.5) * v * (T(1.0) + erf(v * T(kSqrtHalf)));
  }
  return y;
}

// d/dx = Phi(x) + x phi(x) = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi)
template <class T>
Matrix<T> gelu_erf_backward(const Matrix<T>& x, const Matrix<T>& dy) {
  Matrix<T> dx(x.rows(), x.cols());
  for (long i = 0; i < x.size(); ++i) {
    const T& v = x.data()[i];
    const T cdf = T(0.5) * (T(1.0) + erf(v * T(kSqrtHalf)));
    const T pdf = T(kInvSqrt2Pi) * exp(T(-0.5) * v * v);
    // gelu' lies within [-0.12891, 1.12891] for every x (its extremes at
    // x = -+sqrt 2), so its error is bounded whatever x's is.
    const T grad = within_interval(cdf + v * pdf, -kGeluErfSlopeReach * a_priori_margin(1),
                                   (1.0 + kGeluErfSlopeReach) * a_priori_margin(1));
    dx.data()[i] = dy.data()[i] * grad;
  }
  return dx;
}

// ------------------------------------------------------------ normalizers
//
// All four normalizers share one shape: statistics over a set of elements,
// x_hat = (x - mean) * rstd (RMSNorm: x * rstd, no mean), y = gamma x_hat + beta.
// They differ only in which elements share statistics:
//   LayerNorm  one row (all features of one token)
//   RMSNorm    one row, mean fixed at 0
//   GroupNorm  one sample's rows x one group's channels
//   BatchNorm  one channel over all rows of the batch
// NormGroups lists, for each statistics group, the (row, feature) elements.

struct NormShape {
  NormKind kind = NormKind::layer;
  long groups = 1;      // GroupNorm: channel groups (must divide features)
  long positions = 1;   // rows per sample (GroupNorm statistics span them)
  double eps = 1e-5;
  // BatchNorm and GroupNorm over images: the columns of one channel (H W,
  // NCHW), which share its gamma and beta (and BatchNorm's statistics); 1
  // otherwise (LayerNorm and RMSNorm: an affine per column).
  long spatial = 1;

  long channel(long col) const { return col / spatial; }
};

// Calls visit(group_index, element_count, element(i) -> (row, col)) for every
// statistics group of an x with the given rows and features.
template <class Visit>
void for_each_norm_group(const NormShape& s, long rows, long features, Visit&& visit) {
  switch (s.kind) {
    case NormKind::layer:
    case NormKind::rms:
      for (long r = 0; r < rows; ++r)
        visit(features, [r](long i) { return std::pair<long, long>(r, i); });
      break;
    case NormKind::batch: {
      const long spatial = s.spatial;
      for (long c = 0; c < features / spatial; ++c)
        visit(rows * spatial, [c, spatial](long i) { return std::pair<long, long>(i / spatial, c * spatial + i % spatial); });
      break;
    }
    case NormKind::group: {
      const long per_group = features / s.groups;
      for (long sample = 0; sample < rows / s.positions; ++sample)
        for (long g = 0; g < s.groups; ++g)
          visit(s.positions * per_group, [=](long i) {
            return std::pair<long, long>(sample * s.positions + i / per_group, g * per_group + i % per_group);
          });
      break;
    }
  }
}

template <class T>
struct NormStatistics {
  std::vector<T> mean;            // per statistics group (0 for RMSNorm)
  std::vector<T> rstd;            // 1 / sqrt(biased var + eps), or 1 / sqrt(mean(x^2) + eps)
  std::vector<T> unbiased_var;    // BatchNorm's running-variance input
};

// Per-group moments: element count, mean and sum of squared deviations.
template <class T>
struct NormMoments {
  std::vector<long> count;
  std::vector<T> mean, m2;
};

// Two-pass moments: mean first, then the squared deviations from it. The
// error model assumes two-pass or Welford kernels (NUMERICS §1), not
// E[x^2] - E[x]^2.
template <class T>
NormMoments<T> norm_moments(const NormShape& s, const Matrix<T>& x) {
  NormMoments<T> m;
  for_each_norm_group(s, x.rows(), x.cols(), [&](long n, auto element) {
    T mean(0.0);
    if (s.kind != NormKind::rms)
      mean = reduce<T>(n, [&](long i) { auto [r, c] = element(i); return x(r, c); }) / T(static_cast<double>(n));
    m.count.push_back(n);
    m.mean.push_back(mean);
    // The mean enters the squared deviations as the exact constant it is
    // to first order (exact_shift), its error only at second order.
    const T shift = exact_shift(mean);
    m.m2.push_back(second_order_shift(reduce<T>(n, [&](long i) {
      auto [r, c] = element(i);
      const T d = x(r, c) - shift;
      return d * d;
    }), mean, n));
  });
  return m;
}

// Moments of the union of two sets from the moments of each (Chan, Golub,
// LeVeque 1979): how statistics over a whole window are built one
// micro-batch at a time.
template <class T>
NormMoments<T> combine_moments(const NormMoments<T>& a, const NormMoments<T>& b) {
  if (a.count.empty()) return b;
  NormMoments<T> out;
  for (std::size_t g = 0; g < a.count.size(); ++g) {
    const long n = a.count[g] + b.count[g];
    const T na(static_cast<double>(a.count[g])), nb(static_cast<double>(b.count[g])), nn(static_cast<double>(n));
    const T delta = b.mean[g] - a.mean[g];
    out.count.push_back(n);
    out.mean.push_back(a.mean[g] + delta * nb / nn);
    out.m2.push_back(a.m2[g] + b.m2[g] + delta * delta * na * nb / nn);
  }
  return out;
}

template <class T>
NormStatistics<T> statistics_from(const NormShape& s, const NormMoments<T>& m) {
  NormStatistics<T> st;
  for (std::size_t g = 0; g < m.count.size(); ++g) {
    const long n = m.count[g];
    // Every element of the group uses the same mean and 1/sigma: shared
    // values, whose errors are followed with their signs (bounded.h).
    st.mean.push_back(shared(m.mean[g]));
    // 0 < rstd <= 1 / sqrt(eps), whatever the variance: sigma is at least
    // sqrt(eps) in exact arithmetic, and in the kernel within a few roundings
    // of it: eps to float32 (2^-24 relative, halved by the root), the sum
    // (>= float32 eps: the variance is >= 0), the square root (4 ulps as a
    // transcendental, 2^-22): below 2^-21 in all, so 2^-20 holds it.
    const double rstd_max = a_priori_margin(n) / std::sqrt(s.eps);
    const double sigma_floor = std::sqrt(s.eps) * (1.0 - 0x1p-20);
    st.rstd.push_back(shared(within_interval(
        divide_by_positive(T(1.0), sqrt(m.m2[g] / T(static_cast<double>(n)) + T(s.eps)), sigma_floor), 0.0, rstd_max)));
    st.unbiased_var.push_back(n > 1 ? m.m2[g] / T(static_cast<double>(n - 1)) : T(0.0));
  }
  return st;
}

template <class T>
NormStatistics<T> norm_statistics(const NormShape& s, const Matrix<T>& x) {
  return statistics_from(s, norm_moments(s, x));
}

// x_hat of one element of a statistics group of n elements. A mean-centred
// group of one element is degenerate: its mean is the element itself
// (x / 1, exact), so x - mean is exactly 0 in every implementation, and so
// is every x_hat and every dx of that group. Written out, so that the
// error bounds do not treat x and its own mean as independent.
//
// |x_hat| < sqrt(n) a priori: sum x_hat^2 = n var / (var + eps) < n over a
// group (n mean(x^2) / (mean(x^2) + eps) for RMSNorm).
template <class T>
T normalized(const NormShape& s, long n, const T& x, const NormStatistics<T>& st, long g) {
  if (n == 1 && s.kind != NormKind::rms) return T(0.0);
  const double reach = std::sqrt(static_cast<double>(n)) * a_priori_margin(n);
  return within_interval((x - st.mean[g]) * st.rstd[g], -reach, reach);
}

template <class T>
Matrix<T> norm_forward(const NormShape& s, const Matrix<T>& x, const Matrix<T>& gamma, const Matrix<T>& beta,
                       const NormStatistics<T>& st) {
  Matrix<T> y(x.rows(), x.cols());
  long g = 0;
  for_each_norm_group(s, x.rows(), x.cols(), [&](long n, auto element) {
    for (long i = 0; i < n; ++i) {
      auto [r, c] = element(i);
      const T x_hat = normalized(s, n, x(r, c), st, g);
      const long ch = s.channel(c);
      y(r, c) = s.kind == NormKind::rms ? gamma(0, ch) * x_hat : gamma(0, ch) * x_hat + beta(0, ch);
    }
    ++g;
  });
  return y;
}

// The coupling terms of a normalizer's backward, per statistics group:
// sums of g = gamma * dy and of g * x_hat, and the element count. Their
// means enter every element's dx; BatchNorm's span the whole batch.
template <class T>
struct NormCoupling {
  std::vector<long> count;
  std::vector<T> sum_g, sum_gx;
};

template <class T>
NormCoupling<T> norm_coupling(const NormShape& s, const Matrix<T>& x, const Matrix<T>& gamma, const Matrix<T>& dy,
                              const NormStatistics<T>& st) {
  NormCoupling<T> c;
  long g = 0;
  for_each_norm_group(s, x.rows(), x.cols(), [&](long n, auto element) {
    c.count.push_back(n);
    c.sum_g.push_back(s.kind == NormKind::rms
                          ? T(0.0)
                          : reduce<T>(n, [&](long i) { auto [r, col] = element(i); return gamma(0, s.channel(col)) * dy(r, col); }));
    c.sum_gx.push_back(reduce<T>(n, [&](long i) {
      auto [r, col] = element(i);
      return gamma(0, s.channel(col)) * dy(r, col) * normalized(s, n, x(r, col), st, g);
    }));
    ++g;
  });
  return c;
}

// Sums of two disjoint sets of elements (micro-batches of one window).
template <class T>
NormCoupling<T> combine_coupling(const NormCoupling<T>& a, const NormCoupling<T>& b) {
  if (a.count.empty()) return b;
  NormCoupling<T> out;
  for (std::size_t g = 0; g < a.count.size(); ++g) {
    out.count.push_back(a.count[g] + b.count[g]);
    out.sum_g.push_back(a.sum_g[g] + b.sum_g[g]);
    out.sum_gx.push_back(a.sum_gx[g] + b.sum_gx[g]);
  }
  return out;
}

template <class T>
struct NormGrads {
  Matrix<T> dx, dgamma, dbeta;  // dbeta is 1 x 0 for RMSNorm
};

// With g = gamma * dy over one statistics group of n elements:
//   dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))      (mean-centred)
//   dx = rstd * (g - x_hat * mean(g * x_hat))                (RMSNorm)
//   dgamma = sum over rows of dy * x_hat, dbeta = sum over rows of dy.
// The means come from `coupling`, which is this x's own unless the caller
// passes the whole window's (exact BatchNorm under accumulation).
// dgamma and dbeta (nullptr for RMSNorm) are added into their row sums;
// dx is returned.
template <class T>
Matrix<T> norm_backward(const NormShape& s, const Matrix<T>& x, const Matrix<T>& gamma, const Matrix<T>& dy,
                        const NormStatistics<T>& st, const NormCoupling<T>& coupling, RowSum<T>& dgamma,
                        RowSum<T>* dbeta) {
  const long features = x.cols();
  Matrix<T> dx(x.rows(), features), x_hat(x.rows(), features);
  long g = 0;
  for_each_norm_group(s, x.rows(), features, [&](long n, auto element) {
    const T count(static_cast<double>(coupling.count[g]));
    const T mean_g = shared(coupling.sum_g[g] / count), mean_gx = shared(coupling.sum_gx[g] / count);
    for (long i = 0; i < n; ++i) {
      auto [r, c] = element(i);
      x_hat(r, c) = normalized(s, n, x(r, c), st, g);
      dx(r, c) = n == 1 && s.kind != NormKind::rms ? T(0.0)
                                                    : st.rstd[g] * (gamma(0, s.channel(c)) * dy(r, c) - mean_g - x_hat(r, c) * mean_gx);
    }
    ++g;
  });
  // Per channel, over every row and the channel's columns.
  const long spatial = s.spatial;
  const auto at = [&](const Matrix<T>& m, long r, long ch) -> const T& {
    return m(r / spatial, ch * spatial + r % spatial);
  };
  dgamma.add_columns(x.rows() * spatial, features / spatial, [&](long r, long ch) { return at(dy, r, ch) * at(x_hat, r, ch); });
  if (dbeta) dbeta->add_columns(x.rows() * spatial, features / spatial, [&](long r, long ch) -> const T& { return at(dy, r, ch); });
  return dx;
}

template <class T>
NormGrads<T> norm_backward(const NormShape& s, const Matrix<T>& x, const Matrix<T>& gamma, const Matrix<T>& dy,
                           const NormStatistics<T>& st, const NormCoupling<T>& coupling) {
  RowSum<T> dgamma, dbeta;
  const bool rms = s.kind == NormKind::rms;
  Matrix<T> dx = norm_backward(s, x, gamma, dy, st, coupling, dgamma, rms ? nullptr : &dbeta);
  return {std::move(dx), std::move(dgamma).result(), rms ? Matrix<T>(1, 0) : std::move(dbeta).result()};
}

template <class T>
NormGrads<T> norm_backward(const NormShape& s, const Matrix<T>& x, const Matrix<T>& gamma, const Matrix<T>& dy,
                           const NormStatistics<T>& st) {
  return norm_backward(s, x, gamma, dy, st, norm_coupling(s, x, gamma, dy, st));
}

// BatchNorm's running statistics, PyTorch semantics: the variance fed to the
// running estimate is the unbiased one; momentum weights the new batch.
template <class T>
void batchnorm_update_running(Matrix<T>& running_mean, Matrix<T>& running_var, const NormStatistics<T>& st,
                              double momentum) {
  const T m(momentum), keep(1.0 - momentum);
  for (long c = 0; c < running_mean.cols(); ++c) {
    running_mean(0, c) = keep * running_mean(0, c) + m * st.mean[c];
    running_var(0, c) = keep * running_var(0, c) + m * st.unbiased_var[c];
  }
}

}  // namespace gradeq::ref
