// a_priori.h — what an algorithm knows of a value beyond what the
// propagation rules give: that it enters many results (shared), that a
// shift's first-order effect cancels (exact_shift, second_order_shift),
// that it lies in an interval (within_radius, within_interval,
// a_priori_margin). One overload for double (the identity), one for
// Bounded. Part of reference/bounded.h.
#pragma once

#include <algorithm>
#include <cmath>

#include "reference/bounded_arithmetic.h"

namespace gradeq::ref {

// A value that enters many results (a normalizer's mean and 1/sigma, a
// softmax denominator, a clip coefficient): its error is the same in all of
// them, so in their sums it does not average out: it becomes one shared
// term of its own (plus the shared terms it already carried), followed with
// its sign into every result, where it adds or cancels as exact arithmetic
// has it (NUMERICS §3).
inline double shared(double x) { return x; }
inline Bounded shared(const Bounded& x) {
  const double own = combined_bound(x.kernel_parts);
  if (own == 0.0) return x;
  SharedTerms fresh;
  fresh.term[0] = {detail::next_shared_source(), 1.0, own};
  fresh.count = 1;
  ErrorParts overflow;
  const SharedTerms s = detail::combine(x.shared, 1.0, fresh, 1.0, overflow);
  return Bounded::with_shared(x.value, overflow, s, x.reference);
}

// A shift whose first-order effect cancels exactly, used as the exact
// constant it is in exact arithmetic: the mean subtracted inside a sum of
// squared deviations. Sum (x_k - c)^2 is stationary at c = mean(x), so the
// kernel's own mean mu' = mean(x') + rho changes its sum of squares only by
// n rho^2 (an identity: sum (x'_k - mean(x')) = 0); that term is added with
// second_order_shift(). NUMERICS §3.
inline double exact_shift(double x) { return x; }
inline Bounded exact_shift(const Bounded& x) { return Bounded::with_bounds(x.value, 0.0, 0.0); }

// x plus the second-order cost n rho^2 of using `shift` (whose bound is e)
// as an exact constant in a sum of n squared deviations: |rho| <= 2e
// (rho is the kernel mean's distance from the mean of the kernel's own
// inputs; both are within e of the exact mean), so n rho^2 <= 4 n e^2,
// systematic. For T = double: x.
inline double second_order_shift(double x, double, long) { return x; }
inline Bounded second_order_shift(const Bounded& x, const Bounded& shift, long n) {
  ErrorParts e = x.kernel_parts;
  const double nd = static_cast<double>(n);
  e.systematic += 4.0 * nd * shift.kernel_bound * shift.kernel_bound;
  return Bounded::with_shared(x.value, e, x.shared, x.reference + 4.0 * nd * shift.reference * shift.reference);
}

// A quantity known to lie within [-radius, radius] in exact arithmetic and
// in the kernel (an invariant of the algorithm, e.g. Adam's |m| / sqrt(v)):
// its error is at most 2 radius, whatever the propagation rules said.
// Except where the rules gave no bound at all: the kernel may then hold Inf
// or NaN (an overflow upstream, 0 * Inf), which no interval holds.
inline double within_radius(double x, double) { return x; }
inline Bounded within_radius(const Bounded& x, double radius) {
  Bounded out = x;
  if (std::isfinite(x.kernel_bound) && !(x.kernel_bound <= 2.0 * radius))
    out = Bounded::with_parts(x.value, {2.0 * radius, 0.0, 0.0}, x.reference);
  if (!(out.reference <= 2.0 * radius)) out.reference = 2.0 * radius;
  return out;
}

// A quantity known a priori to lie in [lo, hi], in exact arithmetic and in
// the kernel alike (a normalized value within sqrt(n), a probability, an
// rstd within 1/sqrt(eps)): its error is at most the distance from its
// value to the farther end, however large the propagated bound. An
// ill-conditioned group (statistics within their own error) then costs
// that group's looseness and never an unbounded result. A value without a
// bound stays without one: the kernel may hold Inf or NaN there (GELU's
// slope is 0 * Inf where x^2 overflows float32), which no interval holds.
inline double within_interval(double x, double, double) { return x; }
inline Bounded within_interval(const Bounded& x, double lo, double hi) {
  const double reach = std::max(x.value - lo, hi - x.value);
  Bounded out = x;
  if (std::isfinite(x.kernel_bound) && !(x.kernel_bound <= reach))
    out = Bounded::with_parts(x.value, {reach, 0.0, 0.0}, x.reference);
  if (!(out.reference <= reach)) out.reference = reach;
  return out;
}

// The margin a kernel's own float32 rounding may add to an a priori bound
// that holds exactly: a sum of n terms is off by at most gamma_n of its
// magnitude, and each of a few further operations (subtract, multiply,
// divide, a transcendental) by 4 ulps: 1 + 2 gamma_n(u) + 16 u.
double a_priori_margin(long n);

}  // namespace gradeq::ref
