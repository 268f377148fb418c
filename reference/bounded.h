// bounded.h — a float64 value that carries two error bounds with it.
//
// The reference is written once, as templates over a scalar type T. With
// T = double it is plain float64 math (golden and finite-difference tests).
// With T = Bounded every operation also propagates, to first order plus the
// second-order terms that are cheap to keep, an upper bound on
//   kernel:    |result of a float32/bfloat16/float16 kernel − exact result|
//   reference: |this float64 result − exact result|
// for a kernel that evaluates the same expression in float32 registers and
// stores tensors in the dtypes of the active RoundingModel. This is running
// error analysis done by operator overloading; docs/NUMERICS.md derives each
// rule. What this file must not do: know about layers, tensors or kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Core>

namespace gradeq::ref {

// Where a kernel stores a value; each place has its own dtype.
enum class Storage {
  compute,     // activations, their gradients, compute copies of weights
  accumulate,  // the gradient accumulation buffer
  master,      // master weights and optimizer state (float32)
};

// How a reduction of n terms is bounded (docs/NUMERICS.md §2).
enum class ReductionBound {
  deterministic,  // gamma_n = n u / (1 - n u): holds for every summation order
  probabilistic,  // lambda * sqrt(n) * u: holds with high probability
};

struct StorageFormat {
  double unit_roundoff = 0x1p-24;
  double underflow_floor = 0x1p-150;  // absolute error of a store that underflows
  int significand_bits = 24;          // with the hidden bit
  int min_exponent = -126;            // of the smallest normal number
  // Exact values at or above this round to Inf when stored (the midpoint
  // above the largest finite value; 65520 for float16).
  double overflow_threshold = std::numeric_limits<double>::infinity();
};

// Stores that may / must overflow, counted on this thread (float16 under
// loss scaling). A store may overflow when |v| + error reaches the
// threshold and must when |v| - error does.
struct OverflowTally {
  long possible = 0, certain = 0;
};
OverflowTally overflow_tally();
void count_overflow(bool possible, bool certain);

// Within this scope the kernel is known to have stored only finite values
// (its loss scaler found no overflow in the window): a store that might
// have overflowed did not, and is bounded as an ordinary rounding.
bool stores_known_finite();
class ScopedFiniteStores {
 public:
  explicit ScopedFiniteStores(bool known);
  ~ScopedFiniteStores();
  ScopedFiniteStores(const ScopedFiniteStores&) = delete;
  ScopedFiniteStores& operator=(const ScopedFiniteStores&) = delete;

 private:
  bool previous_;
};

// Whether v is a value of a binary format with p significand bits and
// smallest normal exponent e_min (ignoring overflow, bounded separately).
bool representable(double v, int significand_bits, int min_exponent);

// The kernel being bounded, as the error model sees it.
struct RoundingModel {
  double arithmetic_u = 0x1p-24;  // register arithmetic: float32
  double arithmetic_floor = 0x1p-150;
  double reduction_u = 0x1p-24;   // reductions accumulate in float32
  // exp, log, tanh, sqrt, rsqrt: error of the library function, in units of
  // u of the result. CUDA documents <= 2 ulp for expf/logf/tanhf/rsqrtf and
  // glibc < 1 ulp; 4 covers both with margin (NUMERICS §1).
  double transcendental_ulps = 4.0;
  ReductionBound reduction = ReductionBound::deterministic;
  double confidence = 6.0;        // lambda of the probabilistic form
  StorageFormat compute, accumulate, master;

  const StorageFormat& format(Storage s) const {
    switch (s) {
      case Storage::compute: return compute;
      case Storage::accumulate: return accumulate;
      case Storage::master: break;
    }
    return master;
  }
};

// The active model: set for a scope with ScopedRoundingModel. Thread-local so
// that property runs on several threads do not interfere.
const RoundingModel& rounding_model();

class ScopedRoundingModel {
 public:
  explicit ScopedRoundingModel(const RoundingModel& model);
  ~ScopedRoundingModel();
  ScopedRoundingModel(const ScopedRoundingModel&) = delete;
  ScopedRoundingModel& operator=(const ScopedRoundingModel&) = delete;

 private:
  const RoundingModel* previous_;
};

inline constexpr double kFloat64Roundoff = 0x1p-53;
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// gamma for a reduction of n terms under the active model.
double reduction_gamma(long n, double u);
// The float64 reference's own reductions: always the deterministic form.
inline double reference_gamma(long n) {
  const double nu = static_cast<double>(n) * kFloat64Roundoff;
  return nu / (1.0 - nu);
}

// The kernel bound has two parts. The random part comes from rounding
// errors of individual operations, independent from element to element:
// the probabilistic form adds such parts in quadrature over a sum. The rest
// is systematic — shared by many elements or not random at all (the float32
// rounding of a constant such as 1/n, a branch the kernel may take
// differently) — and always adds linearly.
struct Bounded {
  double value = 0.0;
  double kernel = 0.0;     // bound on |kernel − exact|
  double random = 0.0;     // the part of `kernel` made of independent roundings
  double reference = 0.0;  // bound on |value − exact|

  Bounded() = default;
  // A constant (or input) that enters the kernel as a float32: its kernel
  // error is exactly the float32 rounding of c (systematic: every use of
  // the constant shares it), zero for data generated as float32 values.
  explicit Bounded(double c)
      : value(c), kernel(std::abs(static_cast<double>(static_cast<float>(c)) - c)) {}
  static Bounded with_bounds(double v, double k, double r, double random_part = 0.0) {
    Bounded b;
    b.value = v;
    b.kernel = k;
    b.random = std::isnan(random_part) ? k : std::min(random_part, k);
    b.reference = r;
    return b;
  }
};

namespace detail {
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

// The result of one operation: propagated errors k (total) and q (random
// part) plus the operation's own rounding, which is random.
inline Bounded rounded(double v, double k, double q, double r, bool exact) {
  const double rho = arithmetic_rounding(v, k, exact);
  const double rr = r + reference_rounding(v, r, exact);
  const double total = unless_overflow(v, k + rho);
  return Bounded::with_bounds(v, total, std::isnan(rr) ? kInf : rr, q + rho);
}
}  // namespace detail

inline Bounded operator-(const Bounded& a) { return Bounded::with_bounds(-a.value, a.kernel, a.reference, a.random); }

inline Bounded operator+(const Bounded& a, const Bounded& b) {
  const double v = a.value + b.value;
  return detail::rounded(v, a.kernel + b.kernel, a.random + b.random, a.reference + b.reference,
                         detail::sum_exact(a.value, b.value, v));
}

inline Bounded operator-(const Bounded& a, const Bounded& b) { return a + (-b); }

// |xy - x'y'| <= |x| e_y + |y| e_x + e_x e_y: exact, not only first order.
// The second-order term counts as systematic.
inline Bounded operator*(const Bounded& a, const Bounded& b) {
  const double v = a.value * b.value;
  const double k = std::abs(a.value) * b.kernel + std::abs(b.value) * a.kernel + a.kernel * b.kernel;
  const double q = std::abs(a.value) * b.random + std::abs(b.value) * a.random;
  const double r = std::abs(a.value) * b.reference + std::abs(b.value) * a.reference + a.reference * b.reference;
  return detail::rounded(v, k, q, r, detail::product_exact(a.value, b.value, v));
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
}  // namespace detail

// Nonlinear rules give the random part the same rule applied to the
// operands' random parts (never more than the total).
inline Bounded operator/(const Bounded& a, const Bounded& b) {
  const double v = a.value / b.value;
  const double k = detail::quotient_error(a.value, a.kernel, b.value, b.kernel);
  const double q = detail::quotient_error(a.value, a.random, b.value, b.random);
  const double r = detail::quotient_error(a.value, a.reference, b.value, b.reference);
  return detail::rounded(v, k, std::min(q, k), r, detail::quotient_exact(a.value, b.value, v));
}

// a / d where d is known to be at least `floor` > 0 in exact arithmetic and
// in the kernel (Adam's sqrt(v) + eps). Unlike a / d in general this never
// becomes unbounded: with d_lo = max(floor, d - e_d),
//   |a'/d' - a/d| <= e_a / d_lo + |a| (1/d_lo - 1/d).
inline double divide_by_positive(double a, double d, double /*floor*/) { return a / d; }

namespace detail {
inline double positive_quotient_error(double a, double ea, double d, double ed, double floor) {
  if (ea == 0.0 && ed == 0.0) return 0.0;
  // The kernel's d is the rounded value of a quantity >= floor: allow it
  // to sit one rounding below.
  const double lowest = std::max(floor * (1.0 - 0x1p-22), d - ed);
  return ea / lowest + std::abs(a) * (1.0 / lowest - 1.0 / d);
}
}  // namespace detail

inline Bounded divide_by_positive(const Bounded& a, const Bounded& d, double floor) {
  const double v = a.value / d.value;
  const double k = detail::positive_quotient_error(a.value, a.kernel, d.value, d.kernel, floor);
  const double q = detail::positive_quotient_error(a.value, a.random, d.value, d.random, floor);
  const double r = detail::positive_quotient_error(a.value, a.reference, d.value, d.reference, floor);
  return detail::rounded(v, k, std::min(q, k), r, detail::quotient_exact(a.value, d.value, v));
}

inline Bounded& operator+=(Bounded& a, const Bounded& b) { return a = a + b; }
inline Bounded& operator-=(Bounded& a, const Bounded& b) { return a = a - b; }
inline Bounded& operator*=(Bounded& a, const Bounded& b) { return a = a * b; }
inline Bounded& operator/=(Bounded& a, const Bounded& b) { return a = a / b; }

// ---- generic scalar functions: one overload for double, one for Bounded ----

inline double value_of(double x) { return x; }
inline double value_of(const Bounded& x) { return x.value; }

inline double abs(double x) { return std::abs(x); }
inline Bounded abs(const Bounded& x) { return Bounded::with_bounds(std::abs(x.value), x.kernel, x.reference, x.random); }

inline double max(double a, double b) { return std::max(a, b); }
inline double min(double a, double b) { return std::min(a, b); }
// max and min are 1-Lipschitz in each argument.
inline Bounded max(const Bounded& a, const Bounded& b) {
  return Bounded::with_bounds(std::max(a.value, b.value), std::max(a.kernel, b.kernel),
                              std::max(a.reference, b.reference), std::max(a.random, b.random));
}
inline Bounded min(const Bounded& a, const Bounded& b) {
  return Bounded::with_bounds(std::min(a.value, b.value), std::max(a.kernel, b.kernel),
                              std::max(a.reference, b.reference), std::max(a.random, b.random));
}

// 1 where x > 0, else 0 (ReLU's mask). Where |x| is within a non-zero
// error the kernel may take the other branch: the result is then uncertain
// by 1 — systematically, since elements near one kink flip together. An
// exact x (error 0) decides the branch exactly.
inline double positive_step(double x) { return x > 0.0 ? 1.0 : 0.0; }
inline Bounded positive_step(const Bounded& x) {
  const double v = x.value > 0.0 ? 1.0 : 0.0;
  const auto uncertain = [&](double e) { return e > 0.0 && std::abs(x.value) <= e ? 1.0 : 0.0; };
  return Bounded::with_bounds(v, uncertain(x.kernel), uncertain(x.reference));
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
// tanh' = sech^2 is decreasing in |x|: sup over the interval is at |x| - e.
inline double tanh_error(double x, double e) {
  const double nearest = std::max(0.0, std::abs(x) - e);
  const double c = std::cosh(nearest);
  return e / (c * c);
}
}  // namespace detail

inline double sqrt(double x) { return std::sqrt(x); }
namespace detail {
// A unary function with propagation rule `err`: total and random parts.
template <class Error>
Bounded unary(const Bounded& x, double v, Error&& err) {
  const double k = err(x.value, x.kernel), q = std::min(err(x.value, x.random), k);
  const double rho = transcendental_rounding(v, k);
  return Bounded::with_bounds(v, unless_overflow(v, k + rho), err(x.value, x.reference) + reference_transcendental_rounding(v),
                              q + rho);
}
}  // namespace detail

// IEEE sqrt is correctly rounded, but CUDA's approximate forms are not:
// counted as a transcendental.
inline Bounded sqrt(const Bounded& x) { return detail::unary(x, std::sqrt(x.value), detail::sqrt_error); }

inline double exp(double x) { return std::exp(x); }
inline Bounded exp(const Bounded& x) { return detail::unary(x, std::exp(x.value), detail::exp_error); }

inline double log(double x) { return std::log(x); }
inline Bounded log(const Bounded& x) { return detail::unary(x, std::log(x.value), detail::log_error); }

inline double tanh(double x) { return std::tanh(x); }
inline Bounded tanh(const Bounded& x) { return detail::unary(x, std::tanh(x.value), detail::tanh_error); }

// A tensor stored by the kernel in the dtype of `where`: one more rounding.
// The float64 reference stores nothing, so T = double is the identity.
// Round-to-nearest-even of v to p significand bits, exponent range from
// e_min (subnormals below): the value a store of an exactly known v holds.
double round_to_format(double v, int significand_bits, int min_exponent);

inline double store(double x, Storage) { return x; }
inline Bounded store(const Bounded& x, Storage where) {
  const StorageFormat& f = rounding_model().format(where);
  if (std::isnan(x.kernel)) return store(Bounded::with_bounds(x.value, kInf, x.reference, x.random), where);
  // A store that may overflow may hold Inf: counted (the loss scaler's
  // business) and unbounded, unless the kernel is known to have stored
  // finite values only.
  if (std::abs(x.value) + x.kernel >= f.overflow_threshold) {
    count_overflow(true, std::abs(x.value) - x.kernel >= f.overflow_threshold);
    if (!stores_known_finite()) return Bounded::with_bounds(x.value, kInf, x.reference, x.random);
  }
  if (f.unit_roundoff == 0.0) return x;  // same format as the registers
  if (x.kernel == 0.0 && representable(x.value, f.significand_bits, f.min_exponent)) return x;
  const double rho = f.unit_roundoff * (std::abs(x.value) + x.kernel) + f.underflow_floor;
  return Bounded::with_bounds(x.value, x.kernel + rho, x.reference, x.random + rho);
}

// An input of the computation (data, the compute copy of the weights)
// stored to a narrower dtype. Every run rounds the same known value the
// same way, so the reference takes the rounded value itself, exactly: the
// runs then compute the same model, and the narrowing is not an error
// between them. (Results stored by a run use store(): their rounding
// differs from run to run and is bounded.) T = double: the identity.
inline double quantize(double x, Storage) { return x; }
inline Bounded quantize(const Bounded& x, Storage where) {
  const StorageFormat& f = rounding_model().format(where);
  if (f.unit_roundoff == 0.0 || x.kernel != 0.0 || x.reference != 0.0 || !(std::abs(x.value) < f.overflow_threshold))
    return store(x, where);
  return Bounded::with_bounds(round_to_format(x.value, f.significand_bits, f.min_exponent), 0.0, 0.0);
}

// Sum of n terms term(0..n-1), in whatever order the kernel chooses. The
// bound on the reduction holds for every order (deterministic form).
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

// Propagated errors of the terms add up (deterministic), or in quadrature
// (probabilistic: independent, mean-zero errors; NUMERICS §2).
template <class F>
Bounded reduce_sum(long n, F&& term, const Bounded& /*tag*/) {
  double v = 0.0, k = 0.0, q = 0.0, q_squares = 0.0, r = 0.0, magnitude = 0.0, kernel_magnitude = 0.0;
  int granularity = 1 << 20;
  for (long i = 0; i < n; ++i) {
    const Bounded t = term(i);
    v += t.value;
    k += t.kernel;
    q += t.random;
    q_squares += t.random * t.random;
    r += t.reference;
    magnitude += std::abs(t.value);
    kernel_magnitude += std::abs(t.value) + t.kernel;
    if (t.value != 0.0) granularity = std::min(granularity, granularity_exponent(t.value));
  }
  const auto exact_in = [&](int bits, double error) {
    return error == 0.0 && (magnitude == 0.0 || magnitude < std::ldexp(1.0, bits + granularity));
  };
  const RoundingModel& m = rounding_model();
  if (m.reduction == ReductionBound::probabilistic && std::isfinite(k)) {
    k -= q;  // the systematic parts still add up
    q = std::sqrt(q_squares);
    k += q;
  }
  if (!exact_in(24, k)) {
    const double rho = reduction_gamma(n, m.reduction_u) * kernel_magnitude;
    k += rho;
    q += rho;
  }
  if (!exact_in(53, r)) r += reference_gamma(n) * magnitude;
  return Bounded::with_bounds(v, detail::unless_overflow(kernel_magnitude, k), r, q);
}

// Kahan-compensated sum of n terms into a buffer stored in `where`:
// |error| <= (2u + 4 n u^2) sum |t_i| (Knuth; Higham, Accuracy and
// Stability, 2nd ed., (4.10)), u the buffer's unit roundoff (float32
// arithmetic when the buffer is float32). Terms arrive in order 0..n-1.
template <class F>
double compensated_sum(long n, F&& term, Storage, double /*tag*/) {
  double s = 0.0;
  for (long i = 0; i < n; ++i) s += term(i);
  return s;
}

template <class F>
Bounded compensated_sum(long n, F&& term, Storage where, const Bounded& /*tag*/) {
  double v = 0.0, k = 0.0, q = 0.0, q_squares = 0.0, r = 0.0, magnitude = 0.0, kernel_magnitude = 0.0;
  for (long i = 0; i < n; ++i) {
    const Bounded t = term(i);
    v += t.value;
    k += t.kernel;
    q += t.random;
    q_squares += t.random * t.random;
    r += t.reference;
    magnitude += std::abs(t.value);
    kernel_magnitude += std::abs(t.value) + t.kernel;
  }
  const RoundingModel& m = rounding_model();
  if (m.reduction == ReductionBound::probabilistic && std::isfinite(k)) {
    k -= q;
    q = std::sqrt(q_squares);
    k += q;
  }
  const StorageFormat& f = m.format(where);
  const double u = std::max(f.unit_roundoff, m.arithmetic_u);
  const double nd = static_cast<double>(n);
  const double rho = (2.0 * u + 4.0 * nd * u * u) * kernel_magnitude + f.underflow_floor * nd;
  k += rho;
  q += rho;
  r += reference_gamma(n) * magnitude;
  // Every partial sum is at most sum |t_i| (+ errors): the buffer may
  // overflow when that reaches the threshold, and must when the total does.
  if (kernel_magnitude + k >= f.overflow_threshold) {
    count_overflow(true, std::abs(v) - k >= f.overflow_threshold);
    if (!stores_known_finite()) k = kInf;
  }
  return Bounded::with_bounds(v, detail::unless_overflow(v, k), r, q);
}

// reduce<T>(n, term) and compensated<T>(n, term, where): the generic entry points.
template <class T, class F>
T reduce(long n, F&& term) {
  return reduce_sum(n, std::forward<F>(term), T{});
}

template <class T, class F>
T compensated(long n, F&& term, Storage where) {
  return compensated_sum(n, std::forward<F>(term), where, T{});
}

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
