// bounded.cpp — the thread-local rounding model and the reduction gamma.
#include "reference/bounded.h"

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

bool representable(double v, int significand_bits, int min_exponent) {
  if (v == 0.0) return true;
  if (!std::isfinite(v)) return false;
  int e = 0;
  std::frexp(v, &e);  // |v| = m 2^e, m in [0.5, 1)
  const int exponent = std::max(e - 1, min_exponent);
  const double scaled = std::ldexp(v, significand_bits - 1 - exponent);  // v / ulp(v), exact
  return scaled == std::trunc(scaled);
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
  int e = 0;
  const double m = std::frexp(x, &e);  // x = m 2^e; m has 53 bits
  const auto mantissa = static_cast<long long>(std::ldexp(std::abs(m), 53));
  return e - 53 + __builtin_ctzll(static_cast<unsigned long long>(mantissa));
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
  int e = 0;
  const double m = std::frexp(std::abs(x), &e);
  const auto mantissa = static_cast<unsigned long long>(std::ldexp(m, 53));
  return 53 - __builtin_ctzll(mantissa);
}

}  // namespace gradeq::ref
