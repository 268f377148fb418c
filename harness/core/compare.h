// compare.h — one tensor against its expected values and per-element bound:
// the error metrics a report shows and the pass/fail of the comparison.
// NaN or Inf never passes: a non-finite actual value fails; an element the
// error model cannot bound (Inf: ill-conditioned, or a value that may
// overflow) is counted as unbounded and never passes either.
#pragma once

#include <string>
#include <vector>

#include "harness/core/run_record.h"
#include "kernels/dtype.h"

namespace gradeq {

struct ErrorMetrics {
  double max_abs = 0.0;       // max |a - e|
  double max_rel = 0.0;       // max |a - e| / |e| over e != 0
  double normwise_rel = 0.0;  // ||a - e||_2 / ||e||_2
  double max_ulp = 0.0;       // max |a - e| in units in the last place of e, in the kernel dtype
  double cosine = 1.0;        // a.e / (||a|| ||e||)
};

// How many rows an inconclusive check names.
inline constexpr std::size_t kRowsNamed = 8;

struct TensorCheck {
  std::string name;
  RecordKind kind = RecordKind::parameter;
  long window = 0;
  long rows = 0, cols = 0;
  DType dtype = DType::f32;
  ErrorMetrics metrics;
  // The element that used the largest share of its bound.
  double worst_ratio = 0.0;  // |a - e| / bound there; <= 1 passes
  long worst_index = -1;
  double worst_error = 0.0, worst_bound = 0.0, worst_expected = 0.0, worst_actual = 0.0;
  double expected_norm = 0.0, actual_norm = 0.0;  // 2-norms over the finite, bounded elements
  long non_finite_actual = 0;  // NaN / Inf in the values under test
  long unbounded = 0;          // elements where the error model gives no finite bound
  std::vector<long> unbounded_rows;  // the distinct rows they are in (the first kRowsNamed)
  long judged = 0;             // elements compared against a finite bound

  bool passed() const { return non_finite_actual == 0 && unbounded == 0 && worst_ratio <= 1.0; }
  std::string failure_reason() const;  // empty when passed
};

// ulp of x in dtype t: the spacing of t's values at |x|.
double ulp_in(double x, DType t);

TensorCheck compare_tensor(const std::string& name, long rows, long cols, DType dtype,
                           const std::vector<double>& expected, const std::vector<double>& actual,
                           const std::vector<double>& bound);

}  // namespace gradeq
