// bounded_functions.h — the scalar functions the reference's templates call,
// one overload for double and one for Bounded: abs, max, min, ReLU's step,
// sqrt, exp, log, tanh, erf, and a tensor's store to (or rounding into) a
// narrower dtype. Part of reference/bounded.h.
#pragma once

#include <algorithm>
#include <cmath>

#include "reference/a_priori.h"
#include "reference/bounded_arithmetic.h"

namespace gradeq::ref {

// ---- generic scalar functions: one overload for double, one for Bounded ----

inline double value_of(double x) { return x; }
inline double value_of(const Bounded& x) { return x.value; }

inline double abs(double x) { return std::abs(x); }
// Away from 0 the sign is certain and abs is linear (the shared terms keep
// their signs, flipped with x's); near 0 it is only 1-Lipschitz.
inline Bounded abs(const Bounded& x) {
  if (std::abs(x.value) > x.kernel_bound) return x.value < 0.0 ? -x : x;
  return Bounded::with_parts(std::abs(x.value), detail::collapsed_parts(x), x.reference);
}

inline double max(double a, double b) { return std::max(a, b); }
inline double min(double a, double b) { return std::min(a, b); }
// max and min are 1-Lipschitz in each argument: the larger error, part by part.
namespace detail {
inline ErrorParts larger(const ErrorParts& a, const ErrorParts& b) {
  return {std::max(a.systematic, b.systematic), std::max(a.random, b.random), std::max(a.scale, b.scale)};
}
}  // namespace detail
inline Bounded max(const Bounded& a, const Bounded& b) {
  return Bounded::with_parts(std::max(a.value, b.value), detail::larger(detail::collapsed_parts(a), detail::collapsed_parts(b)),
                             std::max(a.reference, b.reference));
}
inline Bounded min(const Bounded& a, const Bounded& b) {
  return Bounded::with_parts(std::min(a.value, b.value), detail::larger(detail::collapsed_parts(a), detail::collapsed_parts(b)),
                             std::max(a.reference, b.reference));
}

// 1 where x > 0, else 0 (ReLU's mask). Where |x| is within a non-zero
// error the kernel may take the other branch: the result is then uncertain
// by 1 — systematically, since elements near one kink flip together. An
// exact x (error 0) decides the branch exactly.
inline double positive_step(double x) { return x > 0.0 ? 1.0 : 0.0; }
inline Bounded positive_step(const Bounded& x) {
  const double v = x.value > 0.0 ? 1.0 : 0.0;
  const auto uncertain = [&](double e) { return e > 0.0 && std::abs(x.value) <= e ? 1.0 : 0.0; };
  return Bounded::with_bounds(v, uncertain(x.kernel_bound), uncertain(x.reference));
}

namespace detail {
inline double transcendental_rounding(double v, double k) {
  const RoundingModel& m = rounding_model();
  return m.transcendental_ulps * m.arithmetic_u * (std::abs(v) + k) + m.arithmetic_floor;
}
inline double reference_transcendental_rounding(double v) {
  return rounding_model().transcendental_ulps * kFloat64Roundoff * std::abs(v);
}
// |sqrt(x') - sqrt(x)| for |x' - x| <= e, x' >= 0: e / sqrt(x) and sqrt(e).
inline double sqrt_error(double x, double e) {
  const double via_root = std::sqrt(e);
  return x > 0.0 ? std::min(via_root, e / std::sqrt(x)) : via_root;
}
// |exp(x') - exp(x)| <= exp(x) (exp(e) - 1), which is below exp(x + e);
// the second form avoids 0 * Inf when exp(x) underflows and e is huge.
inline double exp_error(double x, double e) {
  if (e == 0.0) return 0.0;
  return e < 700.0 ? std::exp(x) * std::expm1(e) : std::exp(x + e);
}
// |log(x') - log(x)| <= -log(1 - e/x) for e < x.
inline double log_error(double x, double e) { return e < x ? -std::log1p(-e / x) : kInf; }
// erf' = (2 / sqrt pi) exp(-x^2) is decreasing in |x|: sup over the
// interval is at |x| - e.
inline double erf_error(double x, double e) {
  const double nearest = std::max(0.0, std::abs(x) - e);
  return e * 1.1283791670955126 * std::exp(-nearest * nearest);
}
// tanh' = sech^2 is decreasing in |x|: sup over the interval is at |x| - e.
inline double tanh_error(double x, double e) {
  const double nearest = std::max(0.0, std::abs(x) - e);
  const double c = std::cosh(nearest);
  return e / (c * c);
}
}  // namespace detail

inline double sqrt(double x) { return std::sqrt(x); }
namespace detail {
// A unary function with propagation rule err(x, e), applied part by part,
// plus the library function's own error.
//
// Or to first order, where that is the smaller bound: f(x + E) = f(x) +
// f'(x) E + R with |R| <= curvature E^2 / 2, curvature = max |f''| over
// [x - K, x + K] (Taylor's theorem with the Lagrange remainder): the
// operand's parts and shared terms scaled by f'(x), the remainder E^2 in
// parts (second_order). A curvature that is not finite leaves the rule
// alone.
template <class Error>
Bounded unary(const Bounded& x, double v, Error&& err, double slope = 0.0, double curvature = kInf) {
  const double r = err(x.value, x.reference) + reference_transcendental_rounding(v);
  const ErrorParts e_rule = through(collapsed_parts(x), [&](double part) { return err(x.value, part); });
  ErrorParts e = e_rule;
  SharedTerms s;
  if (std::isfinite(curvature) && x.shared.count > 0) {
    ErrorParts e_first = scaled(x.kernel_parts, std::abs(slope));
    const SharedTerms s_first = scaled_terms(x.shared, slope, e_first);
    const ErrorParts p = collapsed_parts(x);
    e_first = plus(e_first, scaled(second_order(p, p), 0.5 * curvature));
    if (combined_bound(total_parts(e_first, s_first)) <= kPreferFirstOrder * combined_bound(e_rule)) {
      e = e_first;
      s = s_first;
    }
  }
  const double rho = transcendental_rounding(v, combined_bound(total_parts(e, s)));
  return Bounded::with_shared(v, unless_overflow(v, with_rounding(e, rho), s), s, r);
}
}  // namespace detail

// IEEE sqrt is correctly rounded, but CUDA's approximate forms are not:
// counted as a transcendental.
// sqrt'' = -1 / (4 x^1.5), largest at the interval's lower end.
inline Bounded sqrt(const Bounded& x) {
  const double low = x.value - x.kernel_bound;
  return detail::unary(x, std::sqrt(x.value), detail::sqrt_error, x.value > 0.0 ? 0.5 / std::sqrt(x.value) : 0.0,
                       low > 0.0 ? 0.25 / (low * std::sqrt(low)) : kInf);
}

inline double exp(double x) { return std::exp(x); }
// exp'' = exp, largest at the interval's upper end.
inline Bounded exp(const Bounded& x) {
  const double high = x.value + x.kernel_bound;
  return detail::unary(x, std::exp(x.value), detail::exp_error, std::exp(x.value), high < 700.0 ? std::exp(high) : kInf);
}

inline double log(double x) { return std::log(x); }
// log'' = -1 / x^2, largest at the interval's lower end.
inline Bounded log(const Bounded& x) {
  const double low = x.value - x.kernel_bound;
  return detail::unary(x, std::log(x.value), detail::log_error, 1.0 / x.value, low > 0.0 ? 1.0 / (low * low) : kInf);
}

inline double tanh(double x) { return std::tanh(x); }
// |tanh''| = 2 |tanh| sech^2 <= 4 / (3 sqrt 3) everywhere.
// And |tanh| <= 1 a priori (the kernel's within its transcendental error).
inline Bounded tanh(const Bounded& x) {
  const double t = std::tanh(x.value);
  const Bounded out = detail::unary(x, t, detail::tanh_error, 1.0 - t * t, 4.0 / (3.0 * std::sqrt(3.0)));
  const double reach = 1.0 + 2.0 * rounding_model().transcendental_ulps * rounding_model().arithmetic_u;
  return within_interval(out, -reach, reach);
}

inline double erf(double x) { return std::erf(x); }
// |erf''| = (4 / sqrt pi) |x| exp(-x^2) <= 2 sqrt(2 / pi) exp(-1/2) everywhere
// (at |x| = 1 / sqrt 2). And |erf| <= 1 a priori (the kernel's within its
// transcendental error).
inline Bounded erf(const Bounded& x) {
  const double v = std::erf(x.value);
  const Bounded out = detail::unary(x, v, detail::erf_error, 1.1283791670955126 * std::exp(-x.value * x.value),
                                    2.0 * std::sqrt(2.0 / M_PI) * std::exp(-0.5));
  const double reach = 1.0 + 2.0 * rounding_model().transcendental_ulps * rounding_model().arithmetic_u;
  return within_interval(out, -reach, reach);
}

// A tensor stored by the kernel in the dtype of `where`: one more rounding.
// The float64 reference stores nothing, so T = double is the identity.
// Round-to-nearest-even of v to p significand bits, exponent range from
// e_min (subnormals below): the value a store of an exactly known v holds.
double round_to_format(double v, int significand_bits, int min_exponent);

inline double store(double x, Storage) { return x; }
inline Bounded store(const Bounded& x, Storage where) {
  const StorageFormat& f = rounding_model().format(where);
  // A store that may overflow may hold Inf: counted (the loss scaler's
  // business) and unbounded, unless the kernel is known to have stored
  // finite values only.
  // The loss scaler's decisions need rigor: whether overflow may or must
  // happen is judged with the hard bound. The value is unbounded only where
  // the active bound reaches the threshold.
  if (std::isfinite(f.overflow_threshold)) {
    const double hard = hard_bound(detail::collapsed_parts(x));
    if (!(std::abs(x.value) + hard < f.overflow_threshold))
      count_overflow(true, std::abs(x.value) - hard >= f.overflow_threshold);
    if (!(std::abs(x.value) + x.kernel_bound < f.overflow_threshold) && !stores_known_finite()) {
      ErrorParts e = x.kernel_parts;
      e.systematic = kInf;
      return Bounded::with_parts(x.value, e, x.reference);
    }
  }
  if (f.unit_roundoff == 0.0) return x;  // same format as the registers
  if (x.kernel_bound == 0.0 && representable(x.value, f.significand_bits, f.min_exponent)) return x;
  const double rho = f.unit_roundoff * (std::abs(x.value) + x.kernel_bound) + f.underflow_floor;
  return Bounded::with_shared(x.value, detail::with_rounding(x.kernel_parts, rho), x.shared, x.reference);
}

// An input of the computation (data, the compute copy of the weights)
// stored to a narrower dtype: every run rounds its value the same way, so
// the reference rounds its value too and computes the model the kernel
// computes. The rounded value is exact unless the value's uncertainty
// straddles a rounding boundary: then it may be off by the distance to the
// other candidate. Applied to both bounds, which keeps runs whose values
// agree within float64 rounding on the same rounded model.
// T = double: the identity.
inline double quantize(double x, Storage) { return x; }
inline Bounded quantize(const Bounded& x, Storage where) {
  const StorageFormat& f = rounding_model().format(where);
  if (f.unit_roundoff == 0.0) return x;
  // The value is always rounded (values never depend on bounds); a bound
  // that reaches the overflow threshold, or none at all, stays unbounded.
  const auto rounded_value = [&](double v) { return round_to_format(v, f.significand_bits, f.min_exponent); };
  const double v = rounded_value(x.value);
  const auto spread = [&](double e) {
    if (e == 0.0) return 0.0;
    if (!(std::abs(x.value) + e < f.overflow_threshold)) return kInf;
    return std::max(std::abs(rounded_value(x.value - e) - v), std::abs(rounded_value(x.value + e) - v));
  };
  return Bounded::with_parts(v, {spread(x.kernel_bound), 0.0, 0.0}, spread(x.reference));
}

}  // namespace gradeq::ref
