// losses.h — float64 reference losses. Each returns the SUM of per-item
// losses and dy = scale * d(sum)/d(logits). The caller chooses scale (the
// normalizer 1 / item count, times a loss scale); keeping the normalizer
// explicit is what lets accumulation use the window's global item count.
// No I/O, no harness types.
#pragma once

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "reference/bounded.h"
#include "reference/tensor.h"

namespace gradeq::ref {

inline constexpr int kIgnoreClass = -100;  // PyTorch's ignore_index

template <class T>
struct LossAndGrad {
  T loss_sum;
  Matrix<T> dy;
  std::vector<T> row_losses;  // the terms of loss_sum, one per row (0 for an ignored one)
};

// Mean squared error per item (row): l_i = (1/D) sum_j (p_ij - t_ij)^2.
// The item count of a batch is its number of rows.
template <class T>
LossAndGrad<T> mse_loss(const Matrix<T>& pred, const Matrix<T>& target, const T& scale) {
  const long d = pred.cols();
  const T inv_d(1.0 / static_cast<double>(d));
  LossAndGrad<T> out{T(0.0), Matrix<T>(pred.rows(), d), {}};
  std::vector<T> row_loss(static_cast<std::size_t>(pred.rows()));
  for (long i = 0; i < pred.rows(); ++i) {
    row_loss[i] = reduce<T>(d, [&](long j) {
      const T diff = pred(i, j) - target(i, j);
      return diff * diff;
    }) * inv_d;
    for (long j = 0; j < d; ++j) out.dy(i, j) = scale * (T(2.0) * inv_d * (pred(i, j) - target(i, j)));
  }
  out.loss_sum = reduce<T>(pred.rows(), [&](long i) { return row_loss[i]; });
  out.row_losses = std::move(row_loss);
  return out;
}

// Token-level softmax cross-entropy, summed over rows whose class is not
// kIgnoreClass; ignored rows get dy = 0. The item count is the number of
// rows that are not ignored. Numerically stable form: shift by the row max.
// The softmax's denominator of row i, sum_j exp(z_j - row_max), as a
// chunked head forms it: over chunks of `chunk` columns in order, with an
// online log-sum-exp: each chunk's terms
// taken against the running max m_k (the exact values' max so far, a
// constant as row_max is) and summed, then added to the running sum
// rescaled by exp(m_{k-1} - m_k). In exact arithmetic both are the same
// sum; the online form adds, for each later chunk, the roundings of the
// max's difference, its exp, the product and the add (NUMERICS §3, "The
// chunked head"). A rescale by exp(0) = 1 is counted too: the kernel's
// running max, of rounded logits, may move where the exact one does not.
template <class T>
T online_denominator(const Matrix<T>& logits, long i, long chunk) {
  const long d = logits.cols();
  T s(0.0);
  double m = -std::numeric_limits<double>::infinity();
  for (long c0 = 0; c0 < d; c0 += chunk) {
    const long nc = std::min(chunk, d - c0);
    double chunk_max = m;
    for (long j = c0; j < c0 + nc; ++j) chunk_max = std::max(chunk_max, value_of(logits(i, j)));
    const T running_max(chunk_max);
    const T part = reduce<T>(nc, [&](long k) { return exp(logits(i, c0 + k) - running_max); });
    s = c0 == 0 ? part : s * exp(T(m) - running_max) + part;
    m = chunk_max;
  }
  return s;
}

// 0 < `vocabulary_chunk` < the row's width: the denominator in chunks
// (online_denominator); otherwise one reduction over the row.
template <class T>
LossAndGrad<T> cross_entropy_loss(const Matrix<T>& logits, const std::vector<int>& classes, const T& scale,
                                  long vocabulary_chunk = 0) {
  const long d = logits.cols();
  LossAndGrad<T> out{T(0.0), zeros<T>(logits.rows(), d), {}};
  std::vector<T> row_loss(static_cast<std::size_t>(logits.rows()), T(0.0));
  for (long i = 0; i < logits.rows(); ++i) {
    if (classes[i] == kIgnoreClass) continue;
    // Softmax is invariant to the shift: any constant near the row max
    // gives the same exact result. The kernel subtracts its own (rounded)
    // row max; the reference subtracts the max of the exact values as a
    // constant, so that the shift's error — which cancels in exact
    // arithmetic — is not counted as if it did not.
    double max_value = value_of(logits(i, 0));
    for (long j = 1; j < d; ++j) max_value = std::max(max_value, value_of(logits(i, j)));
    const T row_max(max_value);
    std::vector<T> shifted_exp(static_cast<std::size_t>(d));
    for (long j = 0; j < d; ++j) shifted_exp[j] = exp(logits(i, j) - row_max);
    const bool chunked = vocabulary_chunk > 0 && vocabulary_chunk < d;
    const T denom = shared(chunked ? online_denominator(logits, i, vocabulary_chunk)
                                   : reduce<T>(d, [&](long j) { return shifted_exp[j]; }));
    row_loss[i] = log(denom) - (logits(i, classes[i]) - row_max);
    // 0 <= p <= 1 a priori: the denominator holds the numerator. And the
    // denominator is at least 1, in the kernel too: it holds exp(0) = 1,
    // the row maximum's term.
    const double p_max = a_priori_margin(d);
    for (long j = 0; j < d; ++j) {
      const T p = within_interval(divide_by_positive(shifted_exp[j], denom, 1.0), 0.0, p_max);
      out.dy(i, j) = scale * (j == classes[i] ? p - T(1.0) : p);
    }
  }
  out.loss_sum = reduce<T>(logits.rows(), [&](long i) { return row_loss[i]; });
  out.row_losses = std::move(row_loss);
  return out;
}

// Items a batch contributes to the normalizer.
inline long cross_entropy_items(const std::vector<int>& classes) {
  long n = 0;
  for (int c : classes) n += c != kIgnoreClass;
  return n;
}

// A causal LM's targets from its labels as the loop has them (unshifted:
// the sequence's own token ids, kIgnoreClass at padding): row t of each
// sample of `positions` rows gets label t + 1, and the last row none. A
// window's item count is the number of these that are not ignored: one
// fewer per sequence than its unignored labels (Transformers PR 46204
// counted the unshifted ones).
inline std::vector<int> shifted_labels(const std::vector<int>& labels, long positions) {
  std::vector<int> out(labels.size(), kIgnoreClass);
  for (std::size_t r = 0; r + 1 < labels.size(); ++r)
    if ((static_cast<long>(r) + 1) % positions != 0) out[r] = labels[r + 1];
  return out;
}

}  // namespace gradeq::ref
