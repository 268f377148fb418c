// bounded.h — a float64 value that carries two error bounds with it.
//
// The reference is written once, as templates over a scalar type T. With
// T = double it is plain float64 math (golden and finite-difference tests).
// With T = Bounded every operation also propagates, to first order plus the
// second-order terms that are cheap to keep, an upper bound on
//   kernel_bound: |result of a float32/bfloat16/float16 kernel − exact result|
//   reference:    |this float64 result − exact result|
// for a kernel that evaluates the same expression in float32 registers and
// stores tensors in the dtypes of the active RoundingModel. This is running
// error analysis done by operator overloading; docs/NUMERICS.md derives each
// rule. What this file must not do: know about layers, tensors or kernels.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

namespace gradeq::ref {

// Where a kernel stores a value; each place has its own dtype.
enum class Storage {
  compute,     // activations, their gradients, compute copies of weights
  accumulate,  // the gradient accumulation buffer
  master,      // master weights and optimizer state (float32)
  gemm_operand,  // a GEMM's operands as the GEMM reads them (TF32: 11 bits); float32 otherwise
};

// How a reduction of n terms is bounded (docs/NUMERICS.md §2).
enum class ReductionBound {
  deterministic,  // gamma_n = n u / (1 - n u): holds for every summation order
  probabilistic,  // lambda * sqrt(n) * u: holds with high probability
};

inline constexpr double kNoOverflow = std::numeric_limits<double>::infinity();

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
  StorageFormat gemm_operand{0.0, 0.0, 24, -126, kNoOverflow};  // no rounding unless TF32

  const StorageFormat& format(Storage s) const {
    switch (s) {
      case Storage::compute: return compute;
      case Storage::accumulate: return accumulate;
      case Storage::gemm_operand: return gemm_operand;
      case Storage::master: break;
    }
    return master;
  }
};

// The active model: set for a scope with ScopedRoundingModel. Thread-local so
// that property runs on several threads do not interfere. Inline: every
// bounded operation reads it.
namespace detail {
extern thread_local constinit const RoundingModel* active_rounding_model;
extern const RoundingModel default_rounding_model;
}  // namespace detail
inline const RoundingModel& rounding_model() {
  const RoundingModel* m = detail::active_rounding_model;
  return m ? *m : detail::default_rounding_model;
}

// It holds its own copy of the model, so a temporary may be passed.
class ScopedRoundingModel {
 public:
  explicit ScopedRoundingModel(const RoundingModel& model);
  ~ScopedRoundingModel();
  ScopedRoundingModel(const ScopedRoundingModel&) = delete;
  ScopedRoundingModel& operator=(const ScopedRoundingModel&) = delete;

 private:
  const RoundingModel model_;
  const RoundingModel* previous_;
};

inline constexpr double kFloat64Roundoff = 0x1p-53;
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// gamma_n = n u / (1 - n u): the deterministic bound of a sum of n terms.
double reduction_gamma(long n, double u);
// The float64 reference's own reductions: always the deterministic form.
inline double reference_gamma(long n) {
  const double nu = static_cast<double>(n) * kFloat64Roundoff;
  return nu / (1.0 - nu);
}

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
// folded into the systematic part (|coefficient| bound), which is what a
// shared error always was before it could be followed.
inline constexpr int kSharedTerms = 4;
struct SharedTerms {
  std::array<SharedTerm, kSharedTerms> term;
  int count = 0;

  // Copies only the `count` terms in use: most values have none, and a
  // copy of the whole array, just after its parts were written one by one,
  // stalls on store forwarding in the hottest paths of the reference.
  // The loop runs to the constant kSharedTerms so that it unrolls into a
  // few moves; a loop to `count` became a call to memmove per copy, the
  // largest single cost of the reference.
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
}  // namespace detail

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
// the first-order remainder, a relative 1e-10 or so: taking the strictly
// smaller one then chose on float64 noise, and the shared terms kept or
// folded with it moved bounds downstream by up to 23 %. The first-order
// form keeps the shared terms (later cancellation); the rule wins where it
// is at least twice smaller, the nonlinear regime (NUMERICS §3).
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

// A value that enters many results (a normalizer's mean and 1/sigma, a
// softmax denominator, a clip coefficient): its error is the same in all of
// them, so in their sums it does not average out. Its whole bound becomes
// systematic.
// Its error becomes one shared term of its own (plus the shared terms it
// already carried), followed with its sign into every result.
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

inline Bounded& operator+=(Bounded& a, const Bounded& b) { return a = a + b; }
inline Bounded& operator-=(Bounded& a, const Bounded& b) { return a = a - b; }
inline Bounded& operator*=(Bounded& a, const Bounded& b) { return a = a * b; }
inline Bounded& operator/=(Bounded& a, const Bounded& b) { return a = a / b; }

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
inline Bounded within_interval(const Bounded& x, double lo, double hi);
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
// (each of n roundings is at most u times a partial sum).
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
  ErrorParts with_rounding(long n, double u, double magnitude, double rounding_hard) const {
    return {systematic, random + rounding_hard,
            std::sqrt(scale_squares) + std::sqrt(static_cast<double>(n)) * u * magnitude};
  }
};
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
    ErrorParts e = errors.with_rounding(n_, exact ? 0.0 : m.reduction_u, kernel_magnitude_,
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
    ErrorParts e = errors_.with_rounding(n_, 0.0, 0.0, kahan);
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
