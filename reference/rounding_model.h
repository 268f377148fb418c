// rounding_model.h — the kernel as the error model sees it: where it stores
// values (Storage) and in which format (StorageFormat), how its registers
// and reductions round (RoundingModel, the active one per thread), and what
// every bound reads of a format: unit roundoff, gamma_n, which values it
// holds, when a store overflows. Part of reference/bounded.h.
#pragma once

#include <limits>

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

}  // namespace gradeq::ref
