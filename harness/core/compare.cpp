// compare.cpp — error metrics and bound checking of one tensor.
#include "harness/core/compare.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace gradeq {

double ulp_in(double x, DType t) {
  const DTypeFacts f = dtype_facts(t);
  const int min_exponent = t == DType::f16 ? -14 : -126;  // smallest normal exponent
  int e = 0;
  const double m = std::frexp(std::abs(x), &e);  // |x| = m 2^e, m in [0.5, 1)
  int exponent = m == 0.0 ? min_exponent : e - 1;
  if (exponent < min_exponent) exponent = min_exponent;
  return std::ldexp(1.0, exponent - (f.significand_bits - 1));
}

std::string TensorCheck::failure_reason() const {
  if (passed()) return "";
  std::ostringstream os;
  os << "window " << window << ": ";
  if (non_finite_actual > 0) {
    os << non_finite_actual << " non-finite value(s) (NaN/Inf) in the result";
  } else if (unbounded > 0) {
    os << unbounded << " of " << rows * cols << " element(s) the error model cannot bound (ill-conditioned input), in row";
    os << (unbounded_rows.size() > 1 ? "s " : " ");
    for (std::size_t i = 0; i < unbounded_rows.size(); ++i) os << (i ? ", " : "") << unbounded_rows[i];
    if (unbounded_rows.size() == kRowsNamed) os << ", ...";
    if (judged > 0 && worst_ratio <= 1.0)
      os << "; the other " << judged << " are within their bounds (worst err/bound " << worst_ratio << ")";
  } else if (worst_ratio > 1.0) {
    os << "element [" << worst_index / std::max(cols, 1L) << ", " << worst_index % std::max(cols, 1L) << "]: kernel "
       << worst_actual << ", reference " << worst_expected;
    if (worst_bound == 0.0) {
      os << ": it must be exactly " << worst_expected << " (its bound is 0)";
    } else {
      os << ": error " << worst_error << " exceeds its bound " << worst_bound << " (" << worst_ratio << "x)";
    }
  }
  return os.str();
}

TensorCheck compare_tensor(const std::string& name, long rows, long cols, DType dtype,
                           const std::vector<double>& expected, const std::vector<double>& actual,
                           const std::vector<double>& bound) {
  const std::size_t n = expected.size();
  if (actual.size() != n || bound.size() != n || static_cast<long>(n) != rows * cols)
    throw std::invalid_argument("compare_tensor(" + name + "): sizes differ");
  TensorCheck c;
  c.name = name;
  c.rows = rows;
  c.cols = cols;
  c.dtype = dtype;
  double diff_sq = 0.0, e_sq = 0.0, a_sq = 0.0, dot = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double e = expected[i], a = actual[i], b = bound[i];
    // Where the error model gives no bound (the value may even overflow),
    // nothing can be concluded, whatever the kernel holds.
    if (!std::isfinite(b)) {
      ++c.unbounded;
      const long row = cols > 0 ? static_cast<long>(i) / cols : 0;
      if (c.unbounded_rows.size() < kRowsNamed &&
          std::find(c.unbounded_rows.begin(), c.unbounded_rows.end(), row) == c.unbounded_rows.end())
        c.unbounded_rows.push_back(row);
      continue;
    }
    ++c.judged;
    if (!std::isfinite(a)) {
      ++c.non_finite_actual;
      continue;
    }
    const double d = std::abs(a - e);
    diff_sq += d * d;
    e_sq += e * e;
    a_sq += a * a;
    dot += a * e;
    c.metrics.max_abs = std::max(c.metrics.max_abs, d);
    if (e != 0.0) c.metrics.max_rel = std::max(c.metrics.max_rel, d / std::abs(e));
    c.metrics.max_ulp = std::max(c.metrics.max_ulp, d / ulp_in(e, dtype));
    const double ratio = d == 0.0 ? 0.0 : (b > 0.0 ? d / b : HUGE_VAL);
    if (std::isfinite(b) && (c.worst_index < 0 || ratio > c.worst_ratio)) {
      c.worst_ratio = ratio;
      c.worst_index = static_cast<long>(i);
      c.worst_error = d;
      c.worst_bound = b;
      c.worst_expected = e;
      c.worst_actual = a;
    }
  }
  c.expected_norm = std::sqrt(e_sq);
  c.actual_norm = std::sqrt(a_sq);
  c.metrics.normwise_rel = e_sq > 0.0 ? std::sqrt(diff_sq / e_sq) : (diff_sq > 0.0 ? HUGE_VAL : 0.0);
  c.metrics.cosine = (a_sq > 0.0 && e_sq > 0.0) ? dot / std::sqrt(a_sq * e_sq) : (a_sq == e_sq ? 1.0 : 0.0);
  return c;
}

}  // namespace gradeq
