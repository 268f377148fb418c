// low_precision_buffer_threshold.cpp — from which N the low-precision-buffer mutant (B16)
// is caught: a float32 buffer declared over a compute dtype, N micro-batches.
#include <algorithm>

#include "harness/core/ops/registry.h"
#include "harness/gate/selftest_internal.h"
#include "harness/core/mutants.h"

namespace gradeq::selftest_internal {

B16Threshold low_precision_buffer_threshold(DType compute, Backend& base, const ErrorModel& model) {
  B16Threshold t;
  t.compute = compute;
  const Mutant& b16 = *find_mutant("B16");
  MutantRig rig(b16, base);
  for (long n : {1L, 2L, 4L, 8L, 16L, 32L, 64L, 128L, 256L, 512L, 1024L}) {
    ScenarioSpec s;
    s.name = "B16 threshold";
    s.model.input_features = 16;
    s.model.layers = {layer_of("linear", 32), layer_of("gelu"), layer_of("linear", 8)};
    s.split = {std::vector<long>(static_cast<std::size_t>(n), 2)};
    s.precision.compute = compute;
    s.seed = 5;
    const ScenarioResult r = check_scenario(s, *rig.backend, rig.loop, model);
    t.points.push_back({n, !r.passed(), std::max(r.accumulation.worst_ratio, r.kernel.worst_ratio)});
  }
  for (std::size_t i = t.points.size(); i-- > 0;) {
    if (!t.points[i].caught) break;
    t.first_caught = t.points[i].micro_batches;
  }
  return t;
}

}  // namespace gradeq::selftest_internal
