// reference_run.h — runs the float64 reference procedure over a scenario
// and returns, for every tensor a kernel run records, its value and the two
// bounds the reference propagated with it (kernel error, float64 error).
#pragma once

#include <string>
#include <vector>

#include "harness/scenario.h"
#include "harness/tolerance.h"

namespace gradeq {

struct ReferenceTensor {
  std::string name;  // same names as RunTensor
  long rows = 0, cols = 0;
  std::vector<double> value, kernel_bound, reference_bound;
};

struct ReferenceRun {
  std::vector<ReferenceTensor> tensors;
  std::vector<double> window_losses;
};

ReferenceRun run_reference(const Scenario& scenario, const Split& split, const ErrorModel& model);

}  // namespace gradeq
