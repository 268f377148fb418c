// bounded_arithmetic.h — the Bounded value and its arithmetic: a float64
// value with its kernel error (in parts, with shared terms) and the bound on
// its own float64 error; the rounding of one float32 register operation;
// +, -, *, / and division by a denominator known to be positive; and
// Eigen's traits for Matrix<Bounded>. Part of reference/bounded.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <Eigen/Core>

#include "reference/error_parts.h"

namespace gradeq::ref {

struct Bounded {
  double value = 0.0;
  double kernel_bound = 0.0;  // bound on |kernel − exact|: the parts combined by the active form, plus the shared terms
  ErrorParts kernel_parts;    // the kernel error in parts: systematic, random hard bound, random scale
  SharedTerms shared;         // the kernel error's shared, signed terms
  double reference = 0.0;     // bound on |value − exact| of this float64 value

  Bounded() = default;
  // A constant (or input) that enters the kernel as a float32: its kernel
  // error is exactly the float32 rounding of c (systematic: every use of
  // the constant shares it), zero for data generated as float32 values.
  explicit Bounded(double c) : value(c) {
    kernel_parts.systematic = std::abs(static_cast<double>(static_cast<float>(c)) - c);
    kernel_bound = kernel_parts.systematic;
  }
  // A value with a systematic kernel bound k.
  static Bounded with_bounds(double v, double k, double r) { return with_parts(v, {k, 0.0, 0.0}, r); }
  static Bounded with_parts(double v, const ErrorParts& e, double r) { return with_shared(v, e, SharedTerms{}, r); }
  static Bounded with_shared(double v, const ErrorParts& e, const SharedTerms& s, double r);
};
static_assert(std::is_nothrow_move_constructible_v<Bounded> && std::is_nothrow_copy_assignable_v<Bounded>);

inline Bounded Bounded::with_shared(double v, const ErrorParts& e, const SharedTerms& s, double r) {
  Bounded b;
  b.value = v;
  b.kernel_parts = e;
  b.shared = s;
  for (double* part : {&b.kernel_parts.systematic, &b.kernel_parts.random, &b.kernel_parts.scale})
    if (std::isnan(*part)) *part = kInf;
  b.kernel_bound = combined_bound(detail::total_parts(b.kernel_parts, s));
  if (std::isnan(b.kernel_bound) || std::isinf(b.kernel_bound)) {
    // No finite bound: nothing is left to follow.
    b.kernel_bound = kInf;
    b.kernel_parts.systematic = kInf;
    b.shared = SharedTerms{};
  }
  b.reference = std::isnan(r) ? kInf : r;
  return b;
}

namespace detail {
// x's error with its shared terms folded into the systematic part.
inline ErrorParts collapsed_parts(const Bounded& x) { return total_parts(x.kernel_parts, x.shared); }

// Rounding of one float32 register operation whose exact result is v and
// whose inputs already carry kernel error k: |fl(x) - x| <= u |x| + floor.
// IEEE +, -, *, / are correctly rounded, so an operation on exact inputs
// whose exact result is a float32 value makes no error at all: this is what
// lets dyadic data be compared exactly (NUMERICS §5). `exact` says whether
// the float64 evaluation of v was itself exact (checked by an error-free
// transformation), so that v is the exact result.
inline double arithmetic_rounding(double v, double k, bool exact) {
  if (k == 0.0 && exact && representable(v, 24, -126)) return 0.0;
  const RoundingModel& m = rounding_model();
  return m.arithmetic_u * (std::abs(v) + k) + m.arithmetic_floor;
}
inline double reference_rounding(double v, double r, bool exact) {
  if (r == 0.0 && exact) return 0.0;
  return kFloat64Roundoff * std::abs(v);
}
// Error-free checks: was the float64 operation that produced v exact?
inline bool sum_exact(double a, double b, double v) {  // TwoSum (Knuth)
  const double bb = v - a;
  return (a - (v - bb)) + (b - bb) == 0.0;
}
inline bool product_exact(double a, double b, double v) { return std::fma(a, b, -v) == 0.0; }
inline bool quotient_exact(double a, double b, double v) { return std::fma(-v, b, a) == 0.0; }

// A float32 register overflows at the midpoint above FLT_MAX: where the
// exact result may reach it, the kernel may hold Inf and no bound exists.
inline constexpr double kFloat32OverflowThreshold = 0x1.ffffffp127;
// A NaN bound can only come from 0 * Inf or Inf - Inf, i.e. from an
// operand without a bound: the result has none either.
inline double unless_overflow(double v, double k) {
  return std::isnan(k) || std::abs(v) + k >= kFloat32OverflowThreshold ? kInf : k;
}
inline ErrorParts unless_overflow(double v, ErrorParts e, const SharedTerms& s = {}) {
  if (std::isinf(unless_overflow(v, combined_bound(total_parts(e, s))))) e.systematic = kInf;
  return e;
}

// The result of one operation: propagated error e and shared terms s, plus
// its own rounding.
inline Bounded rounded(double v, const ErrorParts& e, const SharedTerms& s, double r, bool exact) {
  const double shared = shared_magnitude(s);
  const double rho = arithmetic_rounding(v, combined_bound({e.systematic + shared, e.random, e.scale}), exact);
  const ErrorParts out = with_rounding(e, rho);
  const double k = combined_bound({out.systematic + shared, out.random, out.scale});
  const double reference = r + reference_rounding(v, r, exact);
  // The common case, computed once: finite parts and no possible overflow.
  // Otherwise with_shared and unless_overflow decide (the same bound).
  if (std::isnan(out.systematic) || std::isnan(out.random) || std::isnan(out.scale) ||
      !(std::abs(v) + k < kFloat32OverflowThreshold) || std::isnan(reference))
    return Bounded::with_shared(v, unless_overflow(v, out, s), s, reference);
  Bounded b;
  b.value = v;
  b.kernel_bound = k;
  b.kernel_parts = out;
  b.shared = s;
  b.reference = reference;
  return b;
}
inline Bounded rounded(double v, const ErrorParts& e, double r, bool exact) { return rounded(v, e, SharedTerms{}, r, exact); }

// A nonlinear rule err(x, e) — the largest change of the result when the
// operand moves by e — applied to each part. Where the rule grows faster
// than linearly, err(total) exceeds the parts' sum: the excess is counted
// as systematic, so the bound never falls below err(total).
template <class Rule>
ErrorParts through(const ErrorParts& e, Rule&& err) {
  ErrorParts out{err(e.systematic), err(e.random), err(e.scale)};
  const double total = err(combined_bound(e));
  const double parts = combined_bound(out);
  if (!(parts >= total)) out.systematic += total - parts;
  return out;
}
}  // namespace detail

inline Bounded operator-(const Bounded& a) {
  Bounded out = a;
  out.value = -a.value;
  for (int i = 0; i < out.shared.count; ++i) out.shared.term[i].coefficient = -out.shared.term[i].coefficient;
  return out;
}

inline Bounded operator+(const Bounded& a, const Bounded& b) {
  const double v = a.value + b.value;
  ErrorParts e = detail::plus(a.kernel_parts, b.kernel_parts);
  const SharedTerms s = detail::combine(a.shared, 1.0, b.shared, 1.0, e);
  return detail::rounded(v, e, s, a.reference + b.reference, detail::sum_exact(a.value, b.value, v));
}

inline Bounded operator-(const Bounded& a, const Bounded& b) { return a + (-b); }

// |xy - x'y'| <= |x| e_y + |y| e_x + e_x e_y: exact, not only first order.
// The second-order term e_x e_y in parts (second_order above).
// Shared terms to first order (the product rule); their second-order part
// is within the e_x e_y term.
inline Bounded operator*(const Bounded& a, const Bounded& b) {
  const double v = a.value * b.value;
  ErrorParts e = detail::plus(detail::scaled(b.kernel_parts, std::abs(a.value)), detail::scaled(a.kernel_parts, std::abs(b.value)));
  e = detail::plus(e, detail::second_order(detail::collapsed_parts(a), detail::collapsed_parts(b)));
  const SharedTerms s = detail::combine(b.shared, a.value, a.shared, b.value, e);
  const double r = std::abs(a.value) * b.reference + std::abs(b.value) * a.reference + a.reference * b.reference;
  return detail::rounded(v, e, s, r, detail::product_exact(a.value, b.value, v));
}

namespace detail {
// |x/y - x'/y'| <= (e_x |y| + |x| e_y) / (|y| (|y| - e_y)) when e_y < |y|;
// otherwise the perturbed denominator may vanish and no bound exists.
inline double quotient_error(double x, double ex, double y, double ey) {
  if (ex == 0.0 && ey == 0.0) return 0.0;
  const double ay = std::abs(y);
  if (!(ey < ay)) return kInf;
  return (ex * ay + std::abs(x) * ey) / (ay * (ay - ey));
}

// x / y with both operands uncertain: the numerator's parts scale by 1/|y|;
// the denominator's error enters through the nonlinear rule.
inline ErrorParts quotient_parts(const Bounded& a, const Bounded& b,
                                  double (*denominator_rule)(double x, double y, double ey, double floor), double floor) {
  const double ay = std::abs(b.value);
  ErrorParts e = through(b.kernel_parts, [&](double ey) { return denominator_rule(a.value, b.value, ey, floor); });
  const double k_total = denominator_rule(a.value, b.value, b.kernel_bound, floor);
  if (std::isinf(k_total) || ay == 0.0) {
    e.systematic = kInf;
    return e;
  }
  // Numerator error over the smallest the denominator can be.
  const double lowest = ay - (floor > 0.0 ? std::min(b.kernel_bound, ay - std::max(floor * (1.0 - 0x1p-22), 0.0)) : b.kernel_bound);
  return plus(e, scaled(a.kernel_parts, 1.0 / lowest));
}

// |x| |1/y' - 1/y| for |y' - y| <= ey: the denominator's part of a quotient.
inline double reciprocal_error(double x, double y, double ey, double /*floor*/) {
  const double ay = std::abs(y);
  if (ey == 0.0) return 0.0;
  if (!(ey < ay)) return kInf;
  return std::abs(x) * ey / (ay * (ay - ey));
}

// The same when the denominator is known to be at least floor > 0 (Adam's
// sqrt(v) + eps): never unbounded. The kernel's d is a rounded value of a
// quantity >= floor: allowed one rounding below it.
inline double positive_reciprocal_error(double x, double d, double ed, double floor) {
  if (ed == 0.0) return 0.0;
  const double lowest = std::max(floor * (1.0 - 0x1p-22), d - ed);
  return std::abs(x) * (1.0 / lowest - 1.0 / d);
}
}  // namespace detail

namespace detail {
inline Bounded collapsed(const Bounded& x) { return Bounded::with_parts(x.value, collapsed_parts(x), x.reference); }

// a / b to first order with its remainder. With L = E_a / b - a E_b / b^2,
// the exact change is a'/b' - a/b = L b / b' = L - L E_b / b', so
//   |a'/b' - a/b - L| <= (K_a / |b| + |a| K_b / b^2) K_b / lowest
// where lowest <= |b'| (|b| - K_b, or a known floor). The linear part keeps
// the operands' parts and shared terms; the remainder is systematic. False
// where no positive `lowest` exists.
inline bool quotient_first_order(const Bounded& a, const Bounded& b, double lowest, ErrorParts& e, SharedTerms& s) {
  const double ab = std::abs(b.value);
  if (!(lowest > 0.0) || ab == 0.0) return false;
  e = plus(scaled(a.kernel_parts, 1.0 / ab), scaled(b.kernel_parts, std::abs(a.value) / (ab * ab)));
  s = combine(a.shared, 1.0 / b.value, b.shared, -a.value / (b.value * b.value), e);
  const double linear = a.kernel_bound / ab + std::abs(a.value) * b.kernel_bound / (ab * ab);
  e.systematic += linear * b.kernel_bound / lowest;
  return true;
}

// How much larger the first-order form's bound may be than the nonlinear
// rule's and still be taken. Where errors are small the two differ only by
// the first-order remainder, a relative 1e-10 or so: a choice of the
// strictly smaller one would turn on float64 noise, and the shared terms
// kept or folded with it would move bounds downstream (by up to 23 %). The
// first-order form keeps the shared terms (later cancellation); the rule
// wins where it is at least twice smaller, the nonlinear regime (NUMERICS
// §3).
inline constexpr double kPreferFirstOrder = 2.0;

// The result from one of two sound propagations: the first-order form with
// shared terms (e_first, s_first), where it exists, unless the nonlinear
// rule on collapsed errors (e_rule) is kPreferFirstOrder times smaller.
inline Bounded smaller_of(double v, const ErrorParts& e_rule, bool first, const ErrorParts& e_first,
                          const SharedTerms& s_first, double r, bool exact) {
  if (first && combined_bound(total_parts(e_first, s_first)) <= kPreferFirstOrder * combined_bound(e_rule))
    return rounded(v, e_first, s_first, r, exact);
  return rounded(v, e_rule, r, exact);
}
}  // namespace detail

// Nonlinear rules give each part of the error the same rule.
inline Bounded operator/(const Bounded& a, const Bounded& b) {
  const double v = a.value / b.value;
  const double r = detail::quotient_error(a.value, a.reference, b.value, b.reference);
  ErrorParts e_first;
  SharedTerms s_first;
  const bool first = a.shared.count + b.shared.count > 0 &&
                     detail::quotient_first_order(a, b, std::abs(b.value) - b.kernel_bound, e_first, s_first);
  return detail::smaller_of(v, detail::quotient_parts(detail::collapsed(a), detail::collapsed(b), detail::reciprocal_error, 0.0),
                            first, e_first, s_first, r, detail::quotient_exact(a.value, b.value, v));
}

// a / d where d is known to be at least `floor` > 0 in exact arithmetic and
// in the kernel (Adam's sqrt(v) + eps, a normalizer's sigma, a softmax
// denominator). Unlike a / d in general this never becomes unbounded for
// bounded operands: with d_lo = max(floor, d - e_d),
//   |a'/d' - a/d| <= e_a / d_lo + |a| (1/d_lo - 1/d).
// A denominator without a bound may be Inf or NaN in the kernel (an
// overflow upstream), and so may the quotient, whatever the floor.
inline double divide_by_positive(double a, double d, double /*floor*/) { return a / d; }
inline Bounded divide_by_positive(const Bounded& a, const Bounded& d, double floor) {
  const double v = a.value / d.value;
  const double lowest_r = std::max(floor, d.value - d.reference);
  const double r = a.reference / lowest_r + std::abs(a.value) * (1.0 / lowest_r - 1.0 / d.value);
  if (!std::isfinite(d.kernel_bound)) return Bounded::with_parts(v, {kInf, 0.0, 0.0}, std::isnan(r) ? 0.0 : r);
  ErrorParts e_first;
  SharedTerms s_first;
  const double lowest = std::max(floor * (1.0 - 0x1p-22), d.value - d.kernel_bound);
  const bool first = a.shared.count + d.shared.count > 0 && detail::quotient_first_order(a, d, lowest, e_first, s_first);
  return detail::smaller_of(v,
                            detail::quotient_parts(detail::collapsed(a), detail::collapsed(d),
                                                   detail::positive_reciprocal_error, floor),
                            first, e_first, s_first, std::isnan(r) ? 0.0 : r, detail::quotient_exact(a.value, d.value, v));
}

inline Bounded& operator+=(Bounded& a, const Bounded& b) { return a = a + b; }
inline Bounded& operator-=(Bounded& a, const Bounded& b) { return a = a - b; }
inline Bounded& operator*=(Bounded& a, const Bounded& b) { return a = a * b; }
inline Bounded& operator/=(Bounded& a, const Bounded& b) { return a = a / b; }

}  // namespace gradeq::ref

namespace Eigen {
template <>
struct NumTraits<gradeq::ref::Bounded> : GenericNumTraits<double> {
  using Real = gradeq::ref::Bounded;
  using NonInteger = gradeq::ref::Bounded;
  using Nested = gradeq::ref::Bounded;
  using Literal = gradeq::ref::Bounded;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 3,
    AddCost = 6,
    MulCost = 8,
  };
};
}  // namespace Eigen
