// error_parts.h — a kernel error in parts and how parts combine: systematic,
// random (hard bound) and scale (ErrorParts); the signed errors of values
// shared by many results (SharedTerms); the bound the active form gives;
// and the rules that add, scale, multiply and merge them (NUMERICS §2, §3).
// It knows no Bounded value. Part of reference/bounded.h.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "reference/rounding_model.h"

namespace gradeq::ref {

// The kernel bound has three parts. Systematic errors are shared by many
// elements or not random at all — the float32 rounding of a constant such
// as 1/n, a branch the kernel may take differently — and always add
// linearly. Random errors come from independent roundings of individual
// operations; they are tracked twice: `random` is a hard bound on them
// (adds linearly), `scale` a standard-deviation scale (adds in quadrature
// over the independent terms of a sum). The bound is
//   deterministic form:   systematic + random
//   probabilistic form:   systematic + min(random, lambda * scale)
// (NUMERICS §2).
struct ErrorParts {
  double systematic = 0.0, random = 0.0, scale = 0.0;
};

// Errors shared by many values, kept with their sign. A value made by
// shared() — a normalizer's mean or 1/sigma, a softmax denominator — has
// one error, delta, in every result it enters; a result's error then holds
// coefficient * delta, where the coefficient is the result's derivative
// with respect to that shared value, propagated to first order. Sums then
// combine coefficients before taking magnitudes, so a row-wide scale or
// shift error cancels where exact arithmetic cancels it (a linear layer
// after LayerNorm, softmax after a shift, the next normalizer). |delta| is
// bounded by `bound` (the shared value's combined bound when it was made).
// NUMERICS §3.
// Trivial (no initializers): only the first `count` of a list are read.
struct SharedTerm {
  std::uint64_t source;
  double coefficient;
  double bound;
};

// At most kSharedTerms per value: beyond that the least significant are
// folded into the systematic part (|coefficient| bound). That is always
// sound (systematic parts add linearly) and gives up only their
// cancellation.
inline constexpr int kSharedTerms = 4;
struct SharedTerms {
  std::array<SharedTerm, kSharedTerms> term;
  int count = 0;

  // Copies only the `count` terms in use: most values have none, and a
  // copy of the whole array, just after its parts were written one by one,
  // stalls on store forwarding in the hottest paths of the reference.
  // The loop runs to the constant kSharedTerms (and tests `count` inside)
  // so that it unrolls into a few moves: a loop to `count` compiles to a
  // call to memmove per copy, which would be the largest single cost of
  // the reference.
  // noexcept: Bounded, and so Matrix<Bounded>, must be nothrow movable,
  // or every vector of tensors copies them all when it grows.
  SharedTerms() = default;
  SharedTerms(const SharedTerms& o) noexcept : count(o.count) { copy_terms(o); }
  SharedTerms& operator=(const SharedTerms& o) noexcept {
    count = o.count;
    copy_terms(o);
    return *this;
  }

 private:
  void copy_terms(const SharedTerms& o) {
    for (int i = 0; i < kSharedTerms; ++i)
      if (i < o.count) term[i] = o.term[i];
  }
};

namespace detail {
// c times an error; an exactly zero factor leaves no error, even where a
// part's hard bound is loose (Inf).
inline ErrorParts scaled(const ErrorParts& e, double c) {
  if (c == 0.0) return {};
  return {c * e.systematic, c * e.random, c * e.scale};
}
inline ErrorParts plus(const ErrorParts& a, const ErrorParts& b) {
  return {a.systematic + b.systematic, a.random + b.random, a.scale + b.scale};
}
// One operation's own rounding rho: random, in both of its forms.
inline ErrorParts with_rounding(ErrorParts e, double rho) {
  e.random += rho;
  e.scale += rho;
  return e;
}
}  // namespace detail

// The bound the active form gives for an error.
inline double combined_bound(const ErrorParts& e) {
  const RoundingModel& m = rounding_model();
  if (m.reduction == ReductionBound::deterministic) return e.systematic + e.random;
  const double scaled = m.confidence * e.scale;
  return e.systematic + (scaled < e.random ? scaled : e.random);
}
// The deterministic (hard) bound of the same error, for claims that must
// hold without exception: whether a store may or must overflow.
inline double hard_bound(const ErrorParts& e) { return e.systematic + e.random; }

namespace detail {
// sum |coefficient| bound over the shared terms.
inline double shared_magnitude(const SharedTerms& s) {
  double m = 0.0;
  for (int i = 0; i < s.count; ++i) m += std::abs(s.term[i].coefficient) * s.term[i].bound;
  return m;
}
// The parts with the shared terms folded in (as systematic magnitudes).
inline ErrorParts total_parts(const ErrorParts& e, const SharedTerms& s) {
  ErrorParts t = e;
  t.systematic += shared_magnitude(s);
  return t;
}

// The product of two errors, e_a e_b (a second-order term), in parts, from
// the errors' collapsed parts: systematic S (shared terms included), random
// with hard bound R and scale Q. With e = s + r,
//   e_a e_b = s_a s_b + (s_a r_b + r_a s_b) + r_a r_b:
//   s_a s_b                systematic, S_a S_b;
//   s_a r_b + r_a s_b      random and mean-zero: hard S_a R_b + R_a S_b,
//                          scale S_a Q_b + Q_a S_b;
//   r_a r_b                its mean is at most Q_a Q_b (Cauchy-Schwarz; Q
//                          bounds the random part's root mean square), which
//                          is systematic; the rest is random: hard R_a R_b,
//                          scale lambda Q_a Q_b (a product of two sub-Gaussian
//                          errors is sub-exponential: it passes lambda^2 Q_a
//                          Q_b no more often than a factor passes lambda
//                          times its scale).
// The deterministic form reads no scales: its mean needs no account of its
// own (|r_a r_b| <= R_a R_b is in the hard part), and the sum of the parts is
// (S_a + R_a)(S_b + R_b), the product of the hard bounds. NUMERICS §3.
inline ErrorParts second_order(const ErrorParts& a, const ErrorParts& b) {
  const RoundingModel& m = rounding_model();
  const bool probabilistic = m.reduction == ReductionBound::probabilistic;
  return {a.systematic * b.systematic + (probabilistic ? a.scale * b.scale : 0.0),
          a.systematic * b.random + a.random * (b.systematic + b.random),
          a.systematic * b.scale + a.scale * (b.systematic + m.confidence * b.scale)};
}

// ca a.shared + cb b.shared, merged by source: coefficients of one source
// add with their signs. Terms beyond kSharedTerms (the smallest) are folded
// into `overflow` (systematic).
inline SharedTerms combine(const SharedTerms& a, double ca, const SharedTerms& b, double cb, ErrorParts& overflow) {
  const bool use_a = a.count > 0 && ca != 0.0, use_b = b.count > 0 && cb != 0.0;
  if (!use_a && !use_b) return {};
  if (!use_a || !use_b) {  // one list, scaled: its order (by magnitude) stays
    SharedTerms out = use_a ? a : b;
    const double c = use_a ? ca : cb;
    for (int i = 0; i < out.count; ++i) out.term[i].coefficient *= c;
    return out;
  }
  std::array<SharedTerm, 2 * kSharedTerms> all;
  int n = 0;
  for (int i = 0; i < a.count; ++i) all[n++] = {a.term[i].source, ca * a.term[i].coefficient, a.term[i].bound};
  for (int i = 0; i < b.count; ++i) {
    const SharedTerm& t = b.term[i];
    int j = 0;
    while (j < n && all[j].source != t.source) ++j;
    if (j == n) all[n++] = {t.source, 0.0, t.bound};
    all[j].coefficient += cb * t.coefficient;
  }
  // Most significant first (insertion sort: at most 2 kSharedTerms entries).
  const auto weight = [](const SharedTerm& t) { return std::abs(t.coefficient) * t.bound; };
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && weight(all[j]) > weight(all[j - 1]); --j) std::swap(all[j], all[j - 1]);
  SharedTerms out;
  for (int i = 0; i < n; ++i) {
    if (all[i].coefficient == 0.0 || all[i].bound == 0.0) continue;
    if (out.count < kSharedTerms) {
      out.term[out.count++] = all[i];
    } else {
      overflow.systematic += weight(all[i]);
    }
  }
  return out;
}

inline SharedTerms scaled_terms(const SharedTerms& a, double c, ErrorParts& overflow) {
  return combine(a, c, SharedTerms{}, 0.0, overflow);
}

// A fresh identity for a shared value (per thread: runs do not share values).
std::uint64_t next_shared_source();
}  // namespace detail

}  // namespace gradeq::ref
