// bounded.cpp — the thread-local rounding model and the reduction gamma.
#include "reference/bounded.h"

#include <bit>

namespace gradeq::ref {
namespace {
thread_local OverflowTally tally;
thread_local bool finite_stores = false;
thread_local std::uint64_t shared_sources = 0;
}  // namespace

thread_local constinit const RoundingModel* detail::active_rounding_model = nullptr;
const RoundingModel detail::default_rounding_model{};

std::uint64_t detail::next_shared_source() { return ++shared_sources; }

bool stores_known_finite() { return finite_stores; }
ScopedFiniteStores::ScopedFiniteStores(bool known) : previous_(finite_stores) { finite_stores = known; }
ScopedFiniteStores::~ScopedFiniteStores() { finite_stores = previous_; }

OverflowTally overflow_tally() { return tally; }

void count_overflow(bool possible, bool certain) {
  tally.possible += possible;
  tally.certain += certain;
}

ScopedRoundingModel::ScopedRoundingModel(const RoundingModel& model)
    : model_(model), previous_(detail::active_rounding_model) {
  detail::active_rounding_model = &model_;
}
ScopedRoundingModel::~ScopedRoundingModel() { detail::active_rounding_model = previous_; }

// The bits of a finite nonzero double: |x| = mantissa 2^exponent with an
// integer mantissa (53 bits when normal, fewer when subnormal). Read from
// the representation: frexp / ldexp calls here cost a few percent of the
// reference's time.
namespace {
struct Bits {
  std::uint64_t mantissa;
  int exponent;
};
Bits bits_of(double x) {
  const auto b = std::bit_cast<std::uint64_t>(x);
  const int biased = static_cast<int>((b >> 52) & 0x7ff);
  const std::uint64_t fraction = b & ((std::uint64_t{1} << 52) - 1);
  if (biased == 0) return {fraction, -1074};
  return {fraction | (std::uint64_t{1} << 52), biased - 1075};
}
// The exponent of x's highest set bit: floor(log2 |x|).
int top_exponent(const Bits& b) { return b.exponent + 63 - std::countl_zero(b.mantissa); }
}  // namespace

bool representable(double v, int significand_bits, int min_exponent) {
  if (v == 0.0) return true;
  if (!std::isfinite(v)) return false;
  // v is a multiple of its ulp in the format: its lowest set bit is at or
  // above the ulp's exponent.
  const Bits b = bits_of(v);
  const int ulp_exponent = std::max(top_exponent(b), min_exponent) - (significand_bits - 1);
  return b.exponent + std::countr_zero(b.mantissa) >= ulp_exponent;
}

double round_to_format(double v, int significand_bits, int min_exponent) {
  if (v == 0.0 || !std::isfinite(v)) return v;
  int e = 0;
  std::frexp(v, &e);
  const int exponent = std::max(e - 1, min_exponent);
  const int shift = significand_bits - 1 - exponent;
  return std::ldexp(std::nearbyint(std::ldexp(v, shift)), -shift);  // nearbyint: ties to even
}

int granularity_exponent(double x) {
  const Bits b = bits_of(x);
  return b.exponent + std::countr_zero(b.mantissa);
}

double a_priori_margin(long n) {
  const double u = rounding_model().arithmetic_u;
  return 1.0 + 2.0 * reduction_gamma(n, u) + 16.0 * u;
}

double reduction_gamma(long n, double u) {
  const double nu = static_cast<double>(n) * u;
  return nu < 1.0 ? nu / (1.0 - nu) : kInf;
}


int significant_bits(double x) {
  if (x == 0.0 || !std::isfinite(x)) return 0;
  const Bits b = bits_of(x);
  return 64 - std::countl_zero(b.mantissa) - std::countr_zero(b.mantissa);
}

}  // namespace gradeq::ref
