// reductions.h — sums of n terms, one overload for double and one for
// Bounded: in whatever order the kernel chooses (reduce_sum, fed one term at
// a time: SumOfTerms), into a Kahan-compensated buffer (compensated_sum,
// CompensatedBuffer) and into a plain accumulation buffer (accumulated_sum,
// AccumulationBuffer); reduce<T>, compensated<T> and accumulated<T> are the
// generic entry points (NUMERICS §2, §3). Part of reference/bounded.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "reference/bounded_arithmetic.h"

namespace gradeq::ref {

// Sum of n terms term(0..n-1), in whatever order the kernel chooses.
template <class F>
double reduce_sum(long n, F&& term, double /*tag*/) {
  double s = 0.0;
  for (long i = 0; i < n; ++i) s += term(i);
  return s;
}

// A sum of exact terms that are all multiples of 2^q is exact in every
// order when sum |t_i| < 2^(p + q): every partial sum is then a p-bit
// multiple of 2^q. granularity_exponent(x) is the exponent of x's lowest
// set bit.
int granularity_exponent(double x);

// The parts of a sum's error: systematic parts and hard random bounds add
// up; standard-deviation scales of independent terms add in quadrature.
// Then the sum's own rounding: hard gamma_n sum |t|, scale sqrt(n) u sum |t|
// for n independent roundings (each at most u times a partial sum), more
// where terms round alike (rounding_groups).
namespace detail {
struct SumOfErrors {
  double systematic = 0.0, random = 0.0, scale_squares = 0.0;
  void add(const ErrorParts& e) {
    systematic += e.systematic;
    random += e.random;
    scale_squares += e.scale * e.scale;
  }
  // Terms of equal value come from the same computation on the same
  // numbers (a constant row, a repeated sample): the kernel rounds them
  // alike, so their scales add linearly before the quadrature.
  // NaN values (a run that diverged) order after every number and group
  // with nothing: the order stays a strict weak one and every group holds
  // at least its first term, so the loop always advances.
  void add_grouped(std::vector<std::pair<double, ErrorParts>>& terms) {
    std::sort(terms.begin(), terms.end(), [](const auto& a, const auto& b) {
      return std::isnan(b.first) ? !std::isnan(a.first) : a.first < b.first;
    });
    for (std::size_t i = 0; i < terms.size();) {
      double scale = 0.0;
      std::size_t j = i;
      for (; j < terms.size() && (j == i || terms[j].first == terms[i].first); ++j) {
        systematic += terms[j].second.systematic;
        random += terms[j].second.random;
        scale += terms[j].second.scale;
      }
      scale_squares += scale * scale;
      i = j;
    }
  }
  // rounding_squares: the sum of squared sizes of the groups of roundings
  // that move together (n for n independent ones; rounding_groups below).
  ErrorParts with_rounding(double rounding_squares, double u, double magnitude, double rounding_hard) const {
    return {systematic, random + rounding_hard, std::sqrt(scale_squares) + std::sqrt(rounding_squares) * u * magnitude};
  }
};

// The sum's own roundings are independent only where the terms differ at
// the grid of the partial sums. Adding c to a partial sum in a binade whose
// spacing is ulp rounds c's residue modulo ulp: the same error for the same
// c, whatever was added before, and nearly the same for terms closer than
// one ulp. So terms whose values lie within `width` (2u times the largest
// partial sum: one ulp of it) form one group, whose m roundings count as
// one error m times over; groups combine in quadrature: the scale of the
// sum's own rounding is sqrt(sum m_g^2) u M, not sqrt(n) u M. Distinct
// terms give n (the usual rule); n equal terms give n^2, and the bound
// min(h, lambda sigma) falls back to the deterministic gamma_n M (NUMERICS
// §2, "Equal values round alike"). Exact zeros round nothing: each counts
// as one term, as before. `terms` sorted by value (add_grouped).
inline double rounding_groups(const std::vector<std::pair<double, ErrorParts>>& terms, double width) {
  double squares = 0.0;
  for (std::size_t i = 0; i < terms.size();) {
    std::size_t j = i + 1;
    const bool exact_zero = terms[i].first == 0.0 && terms[i].second.systematic == 0.0 &&
                            terms[i].second.random == 0.0 && terms[i].second.scale == 0.0;
    if (!exact_zero && std::isfinite(terms[i].first))
      while (j < terms.size() && terms[j].first - terms[i].first <= width && terms[j].first != 0.0) ++j;
    const double m = static_cast<double>(j - i);
    squares += m * m;
    i = j;
  }
  return squares;
}
}  // namespace detail


// The rule of a sum fed one term at a time: reduce_sum over n terms, and a
// sum whose terms arrive in slices (a weight gradient's bias over row
// chunks), are the same computation, bit for bit. What the rule decides
// from all terms at once is kept per term until it is known: a term's
// value and error parts (the sum groups equal values), and, while no more
// than 16 distinct shared sources have been met, the shared terms of the
// terms that carry them (a source in one term only is folded into it).
class SumOfTerms {
 public:
  void add(const Bounded& t) {
    ++n_;
    v_ += t.value;
    exact_terms_ = exact_terms_ && t.kernel_bound == 0.0;
    r_ += t.reference;
    magnitude_ += std::abs(t.value);
    kernel_magnitude_ += std::abs(t.value) + t.kernel_bound;
    if (t.value != 0.0) granularity_ = std::min(granularity_, granularity_exponent(t.value));
    term_errors_.emplace_back(t.value, t.kernel_parts);
    if (t.shared.count == 0) return;
    if (many_) {
      term_errors_.back().second.systematic += detail::shared_magnitude(t.shared);
      return;
    }
    for (int i = 0; i < t.shared.count && !many_; ++i) {
      const SharedTerm& st = t.shared.term[i];
      auto it = std::find_if(sources_.begin(), sources_.end(),
                             [&](const Source& a) { return a.merged.source == st.source; });
      if (it == sources_.end()) {
        if (sources_.size() == kFewSources) {
          many_ = true;
          break;
        }
        it = sources_.insert(sources_.end(), Source{{st.source, 0.0, st.bound}, 0});
      }
      it->merged.coefficient += st.coefficient;
      ++it->terms;
    }
    pending_.emplace_back(term_errors_.size() - 1, t.shared);
    if (!many_) return;
    // Folding a shared term into its own term's systematic part is always
    // sound (systematic parts add linearly: the triangle inequality); it
    // gives up only the cancellation of one source between terms, which a
    // reduction over many rows' distinct statistics rarely has.
    for (const auto& [k, shared] : pending_) term_errors_[k].second.systematic += detail::shared_magnitude(shared);
    pending_.clear();
    sources_.clear();
  }

  long terms() const { return n_; }

  // The sum of the terms so far. Consumes what it kept.
  Bounded result() && {
    // The shared terms, merged: a source that appears in one term only
    // cannot cancel and is folded into that term's parts (systematic).
    // Sources in several terms keep one coefficient, the signed sum of
    // theirs; beyond kSharedTerms the least significant are folded into
    // `overflow`.
    ErrorParts overflow;
    SharedTerms shared;
    if (!many_ && !sources_.empty()) {
      const auto find = [&](std::uint64_t id) -> const Source& {
        return *std::find_if(sources_.begin(), sources_.end(), [&](const Source& a) { return a.merged.source == id; });
      };
      for (const auto& [k, terms] : pending_)
        for (int i = 0; i < terms.count; ++i) {
          const SharedTerm& t = terms.term[i];
          if (find(t.source).terms == 1) term_errors_[k].second.systematic += std::abs(t.coefficient) * t.bound;
        }
      std::vector<SharedTerm> merged;
      for (const Source& src : sources_)
        if (src.terms > 1 && src.merged.coefficient != 0.0) merged.push_back(src.merged);
      std::sort(merged.begin(), merged.end(), [](const SharedTerm& a, const SharedTerm& b) {
        return std::abs(a.coefficient) * a.bound > std::abs(b.coefficient) * b.bound;
      });
      for (const SharedTerm& m : merged) {
        if (shared.count < kSharedTerms) {
          shared.term[shared.count++] = m;
        } else {
          overflow.systematic += std::abs(m.coefficient) * m.bound;
        }
      }
    }
    const auto exact_in = [&](int bits, bool exact) {
      return exact && (magnitude_ == 0.0 || magnitude_ < std::ldexp(1.0, bits + granularity_));
    };
    detail::SumOfErrors errors;
    errors.add_grouped(term_errors_);
    const RoundingModel& m = rounding_model();
    const bool exact = exact_in(24, exact_terms_);
    const double rounding_squares =
        exact ? 0.0 : detail::rounding_groups(term_errors_, 2.0 * m.reduction_u * kernel_magnitude_);
    ErrorParts e = errors.with_rounding(rounding_squares, exact ? 0.0 : m.reduction_u, kernel_magnitude_,
                                        exact ? 0.0 : reduction_gamma(n_, m.reduction_u) * kernel_magnitude_);
    e = detail::plus(e, overflow);
    double r = r_;
    if (!exact_in(53, r == 0.0)) r += reference_gamma(n_) * magnitude_;
    return Bounded::with_shared(v_, detail::unless_overflow(kernel_magnitude_, e, shared), shared, r);
  }

 private:
  // Few distinct sources are usual (a row's statistics shared by all of a
  // reduction's terms): a flat list, searched linearly.
  static constexpr std::size_t kFewSources = 16;
  struct Source {
    SharedTerm merged;  // coefficient: the signed sum over terms
    long terms = 0;
  };
  long n_ = 0;
  double v_ = 0.0, r_ = 0.0, magnitude_ = 0.0, kernel_magnitude_ = 0.0;
  bool exact_terms_ = true;
  int granularity_ = 1 << 20;
  std::vector<std::pair<double, ErrorParts>> term_errors_;
  std::vector<Source> sources_;
  std::vector<std::pair<std::size_t, SharedTerms>> pending_;  // terms with shared terms, while not many_
  bool many_ = false;  // more than kFewSources distinct sources: every shared term is folded
};

template <class F>
Bounded reduce_sum(long n, F&& term, const Bounded& /*tag*/) {
  SumOfTerms sum;
  for (long i = 0; i < n; ++i) sum.add(term(i));
  return std::move(sum).result();
}

namespace detail {
// A buffer whose values reach `reach` in magnitude (exact value `value`)
// under error e: it may overflow when reach plus the hard bound gets to the
// threshold (counted, for the loss scaler) and must when |value| minus it
// does; where the active bound gets there, the error is unbounded unless
// the kernel is known to have stored finite values.
inline void buffer_overflow(double reach, double value, const StorageFormat& f, ErrorParts& e) {
  if (!std::isfinite(f.overflow_threshold)) return;
  if (!(reach + hard_bound(e) < f.overflow_threshold))
    count_overflow(true, std::abs(value) - hard_bound(e) >= f.overflow_threshold);
  if (!(reach + combined_bound(e) < f.overflow_threshold) && !stores_known_finite()) e.systematic = kInf;
}
}  // namespace detail

// Kahan-compensated sum of n terms into a buffer stored in `where`, by
// element::kahan_add: y = fl(t_k - c), s' = fl(s + y), c' = fl(fl(s' - s) - y),
// every result rounded to the buffer's format (u; float32 arithmetic first
// for a 16-bit buffer, so u = u_buffer + u_32 (1 + u_buffer)), the buffer's
// s returned. With A = sum |t_i|:
//   |error| <= kappa A,  kappa = (3u + 8 n u^2) / (1 - u - 6 n u^2).
// The textbook (2u + O(nu^2)) A (Knuth; Higham (4.10)) does not hold here:
// the terms are float32 values, not values of the buffer's format, and the
// rounding of y is then not recovered; bfloat16 reaches 2.76 u at n = 4.
// Derivation in docs/NUMERICS.md §3. Terms arrive in order 0..n-1.
template <class F>
double compensated_sum(long n, F&& term, Storage, double /*tag*/) {
  double s = 0.0;
  for (long i = 0; i < n; ++i) s += term(i);
  return s;
}

// The Kahan-compensated buffer as it receives its terms one at a time;
// result() is the buffer after the last one (the rule above).
class CompensatedBuffer {
 public:
  explicit CompensatedBuffer(Storage where) : where_(where) {}
  void add(const Bounded& t) {
    ++n_;
    v_ += t.value;
    errors_.add(detail::collapsed_parts(t));
    r_ += t.reference;
    magnitude_ += std::abs(t.value);
    kernel_magnitude_ += std::abs(t.value) + t.kernel_bound;
  }
  Bounded result() const {
    const RoundingModel& m = rounding_model();
    const StorageFormat& f = m.format(where_);
    const double u = f.unit_roundoff + m.arithmetic_u * (1.0 + f.unit_roundoff);
    const double nd = static_cast<double>(n_);
    const double denominator = 1.0 - u - 6.0 * nd * u * u;
    // Four rounded operations per term, each may underflow.
    const double kahan = denominator > 0.0 ? (3.0 * u + 8.0 * nd * u * u) / denominator * kernel_magnitude_ +
                                                 4.0 * nd * (f.underflow_floor + m.arithmetic_floor)
                                           : kInf;
    ErrorParts e = errors_.with_rounding(static_cast<double>(n_), 0.0, 0.0, kahan);
    e.scale += kahan;
    const double r = r_ + reference_gamma(n_) * magnitude_;
    // Every partial sum is at most sum |t_i| (+ errors).
    detail::buffer_overflow(kernel_magnitude_, v_, f, e);
    return Bounded::with_parts(v_, detail::unless_overflow(v_, e), r);
  }

 private:
  Storage where_;
  long n_ = 0;
  double v_ = 0.0, r_ = 0.0, magnitude_ = 0.0, kernel_magnitude_ = 0.0;
  detail::SumOfErrors errors_;
};

template <class F>
Bounded compensated_sum(long n, F&& term, Storage where, const Bounded& /*tag*/) {
  CompensatedBuffer buffer(where);
  for (long i = 0; i < n; ++i) buffer.add(term(i));
  return buffer.result();
}

// The accumulation buffer receiving n terms one after another: partial sum
// b is G_b = fl(G_{b-1} + t_b) in float32, stored in the buffer's dtype.
// Each add's rounding (float32 register, then the store) is random and
// independent of the others — unless the term is below half an ulp of the
// partial sum, where the buffer stagnates (256 + 1 = 256 in bfloat16) and
// the error is the lost term itself, which counts as systematic. Exact
// terms whose partial sums all fit the buffer accumulate exactly.
template <class F>
double accumulated_sum(long n, F&& term, Storage, double /*tag*/) {
  double s = 0.0;
  for (long i = 0; i < n; ++i) s += term(i);
  return s;
}

// The plain buffer as it receives its terms one at a time (the rule
// above); result() is the buffer after the last one.
class AccumulationBuffer {
 public:
  explicit AccumulationBuffer(Storage where) : where_(where) {}
  void add(const Bounded& t) {
    const RoundingModel& m = rounding_model();
    const StorageFormat& f = m.format(where_);
    const int p = f.unit_roundoff == 0.0 ? 24 : f.significand_bits;
    const int e_min = f.unit_roundoff == 0.0 ? -126 : f.min_exponent;
    const double u = std::max(f.unit_roundoff, m.arithmetic_u);
    const long b = n_++;
    const double before = v_;
    v_ += t.value;
    r_ += t.reference;
    magnitude_ += std::abs(t.value);
    // Micro-batches may share error sources (the same rows computed alike):
    // their own errors add linearly; only the buffer's roundings below are
    // independent of each other.
    const ErrorParts te = detail::collapsed_parts(t);  // micro-batch sums share no cancellation the model follows
    e_.systematic += te.systematic;
    e_.random += te.random;
    term_scales_ += te.scale;
    exact_ = exact_ && t.kernel_bound == 0.0 && representable(v_, p, e_min) && representable(v_, 24, -126);
    if (exact_) return;
    const double k = combined_bound(e_);
    if (b == 0 && f.unit_roundoff == 0.0) return;  // the first term lands in float32 exactly
    const double rho = (b == 0 ? f.unit_roundoff : u + f.unit_roundoff) * (std::abs(v_) + k) + f.underflow_floor;
    if (b > 0 && std::abs(t.value) + t.kernel_bound < u * std::abs(before)) {
      e_.systematic += rho;  // stagnation: the rounding takes the term, always in its direction
    } else {
      e_.random += rho;
      scale_squares_ += rho * rho;
    }
    detail::buffer_overflow(std::abs(v_), v_, f, e_);
  }
  Bounded result() const {
    ErrorParts e = e_;
    e.scale = term_scales_ + std::sqrt(scale_squares_);
    const double r = !exact_ && n_ > 1 ? r_ + reference_gamma(n_) * magnitude_ : r_;
    return Bounded::with_parts(v_, detail::unless_overflow(v_, e), r);
  }

 private:
  Storage where_;
  long n_ = 0;
  double v_ = 0.0, r_ = 0.0, magnitude_ = 0.0, scale_squares_ = 0.0, term_scales_ = 0.0;
  ErrorParts e_;
  bool exact_ = true;
};

template <class F>
Bounded accumulated_sum(long n, F&& term, Storage where, const Bounded& /*tag*/) {
  AccumulationBuffer buffer(where);
  for (long b = 0; b < n; ++b) buffer.add(term(b));
  return buffer.result();
}

// reduce<T>(n, term), accumulated<T>, compensated<T>: the generic entry points.
template <class T, class F>
T reduce(long n, F&& term) {
  return reduce_sum(n, std::forward<F>(term), T{});
}

template <class T, class F>
T compensated(long n, F&& term, Storage where) {
  return compensated_sum(n, std::forward<F>(term), where, T{});
}

template <class T, class F>
T accumulated(long n, F&& term, Storage where) {
  return accumulated_sum(n, std::forward<F>(term), where, T{});
}

}  // namespace gradeq::ref
