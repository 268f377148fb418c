// attention.h — float64 reference of multi-head self-attention's core, as
// the Backend's attention_forward and attention_backward compute it
// (kernels/backend_ops.def): per sample and head, scores c q.k over the
// keys a query sees (causal, key padding), a row softmax, P V; backward
// through D = do.o and ds = p (dp - D). The projections around it are
// linear layers. Written once for T = double and T = Bounded: the sums go
// through matmul() (QK^T, PV, and backward's four products) and reduce();
// a row's max is an exact shift and its denominator and D shared values
// (NUMERICS §3, "Attention").
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "reference/bounded.h"
#include "reference/layers.h"
#include "reference/tensor.h"

namespace gradeq::ref {

struct AttentionShape {
  long heads = 1;
  long positions = 1;
  bool causal = true;
  long padding_token = -1;  // keys whose id is this are not seen (< 0: none)
};

namespace detail {

// One sample and head: its query, key and value rows [T, d].
template <class T>
struct HeadBlock {
  Matrix<T> q, k, v;
};

template <class T>
HeadBlock<T> head_block(const Matrix<T>& qkv, long first, long h, long positions, long d) {
  const long width = qkv.cols() / 3;
  return {qkv.block(first, h * d, positions, d), qkv.block(first, width + h * d, positions, d),
          qkv.block(first, 2 * width + h * d, positions, d)};
}

// Which keys each query of the sample starting at `first` sees.
template <class T>
std::vector<std::vector<bool>> visible(const AttentionShape& s, const Matrix<T>* ids, long first) {
  std::vector<std::vector<bool>> seen(static_cast<std::size_t>(s.positions),
                                      std::vector<bool>(static_cast<std::size_t>(s.positions), false));
  for (long i = 0; i < s.positions; ++i)
    for (long j = 0; j < s.positions; ++j)
      seen[i][j] = (!s.causal || j <= i) &&
                   (!ids || static_cast<long>(value_of((*ids)(first + j, 0))) != s.padding_token);
  return seen;
}

// The softmax of one sample and head: p (float32, unstored) and p' (p
// stored to the compute dtype, as P V reads it); 0 where a key is not seen.
template <class T>
struct Softmax {
  Matrix<T> p, stored_p;
};

template <class T>
Softmax<T> head_softmax(const HeadBlock<T>& b, const std::vector<std::vector<bool>>& seen) {
  const long n = b.q.rows(), d = b.q.cols();
  const T scale(1.0 / std::sqrt(static_cast<double>(d)));
  const Matrix<T> scores = gemm(b.q, transposed(b.k));
  Softmax<T> out{zeros<T>(n, n), zeros<T>(n, n)};
  std::vector<T> e(static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i) {
    std::vector<long> keys;
    for (long j = 0; j < n; ++j)
      if (seen[i][j]) keys.push_back(j);
    if (keys.empty()) continue;  // no key seen: o = 0
    const long count = static_cast<long>(keys.size());
    // The row max is a shift softmax does not see: the max of the exact
    // scores, used as the constant it is (as the loss's row max, losses.h).
    double max_value = -std::numeric_limits<double>::infinity();
    for (long j : keys) {
      e[j] = scores(i, j) * scale;
      max_value = std::max(max_value, value_of(e[j]));
    }
    const T row_max(max_value);
    for (long j : keys) e[j] = exp(e[j] - row_max);
    // The denominator enters every probability of the row: shared. It
    // holds exp(0) = 1, the max's term, so it is at least 1.
    const T denominator = shared(reduce<T>(count, [&](long k) { return e[keys[k]]; }));
    const double p_max = a_priori_margin(count);
    for (long j : keys) {
      out.p(i, j) = within_interval(divide_by_positive(e[j], denominator, 1.0), 0.0, p_max);
      out.stored_p(i, j) = store(out.p(i, j), Storage::compute);
    }
  }
  return out;
}

// A value zero in exact arithmetic, with its kernel error kept: dS on a row
// that sees one key, where p = 1 and o = v, so dP - D = 0 exactly. float64
// computes dP and D as two sums in their own orders (the GEMM's, the
// row's), which leave it at 0 or +-1e-19 as the orders fall; a kernel that
// orders them alike gets 0 and one that does not a rounding, which the
// kernel error covers.
template <class T>
T exactly_zero(T x) {
  if constexpr (std::is_same_v<T, Bounded>) {
    x.value = 0.0;
    x.reference = 0.0;
    return x;
  } else {
    return T(0.0);
  }
}

template <class T>
Matrix<T> scaled(Matrix<T>&& m, const T& c) {
  for (long i = 0; i < m.size(); ++i) m.data()[i] = m.data()[i] * c;
  return std::move(m);
}

}  // namespace detail

// o [rows, D] from qkv [rows, 3D]; ids: the token ids [rows, 1] whose
// padding keys are not seen, or nullptr.
template <class T>
Matrix<T> attention_forward(const AttentionShape& s, const Matrix<T>& qkv, const Matrix<T>* ids) {
  const long width = qkv.cols() / 3, d = width / s.heads;
  Matrix<T> o(qkv.rows(), width);
  for (long first = 0; first < qkv.rows(); first += s.positions) {
    const auto seen = detail::visible(s, ids, first);
    for (long h = 0; h < s.heads; ++h) {
      const detail::HeadBlock<T> b = detail::head_block(qkv, first, h, s.positions, d);
      o.block(first, h * d, s.positions, d) = gemm(detail::head_softmax(b, seen).stored_p, b.v);
    }
  }
  return o;
}

// dqkv [rows, 3D] from dout [rows, D], each part stored to the compute
// dtype. Forward's softmax and output are recomputed as forward made them.
template <class T>
Matrix<T> attention_backward(const AttentionShape& s, const Matrix<T>& qkv, const Matrix<T>* ids,
                             const Matrix<T>& dout) {
  const long width = qkv.cols() / 3, d = width / s.heads, n = s.positions;
  const T scale(1.0 / std::sqrt(static_cast<double>(d)));
  Matrix<T> dqkv(qkv.rows(), qkv.cols());
  for (long first = 0; first < qkv.rows(); first += n) {
    const auto seen = detail::visible(s, ids, first);
    for (long h = 0; h < s.heads; ++h) {
      const detail::HeadBlock<T> b = detail::head_block(qkv, first, h, n, d);
      const detail::Softmax<T> sm = detail::head_softmax(b, seen);
      const Matrix<T> o = stored(gemm(sm.stored_p, b.v), Storage::compute);
      const Matrix<T> g = dout.block(first, h * d, n, d);
      const Matrix<T> dp = gemm(g, transposed(b.v));
      Matrix<T> ds = zeros<T>(n, n);
      for (long i = 0; i < n; ++i) {
        // D = do . o enters every ds of the row: shared. Its o is the
        // stored output, so that o's own error is carried into D.
        const T big_d = shared(reduce<T>(d, [&](long e) { return g(i, e) * o(i, e); }));
        const long keys = std::count(seen[i].begin(), seen[i].end(), true);
        for (long j = 0; j < n; ++j)
          if (seen[i][j]) {
            ds(i, j) = store(sm.p(i, j) * (dp(i, j) - big_d), Storage::compute);
            if (keys == 1) ds(i, j) = detail::exactly_zero(ds(i, j));
          }
      }
      dqkv.block(first, h * d, n, d) = stored(detail::scaled(gemm(ds, b.k), scale), Storage::compute);
      dqkv.block(first, width + h * d, n, d) =
          stored(detail::scaled(gemm(transposed(ds), b.q), scale), Storage::compute);
      dqkv.block(first, 2 * width + h * d, n, d) = stored(gemm(transposed(sm.stored_p), g), Storage::compute);
    }
  }
  return dqkv;
}

}  // namespace gradeq::ref
