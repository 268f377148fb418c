// measured_memory.cpp — peaks measured on a backend, and their fit.
#include "harness/core/measured_memory.h"

#include <algorithm>

#include "harness/core/memory/loop_plan.h"

namespace gradeq {

long smallest_micro_batch(const ScenarioSpec& spec) {
  return ref::has_batch_norm(spec.model) ? (2 + spec.model.positions - 1) / spec.model.positions : 1;
}

double measure_peak(const ScenarioSpec& spec, long samples, Backend& backend, const LoopFactory& loop) {
  ScenarioSpec one = spec;
  one.split = {{samples}};
  return loop(backend)->run(materialize(one), one.split).memory.peak;
}

MemoryFit measure_memory_fit(const ScenarioSpec& spec, const std::vector<long>& samples, Backend& backend,
                             const LoopFactory& loop) {
  std::vector<std::pair<long, double>> points;
  for (long n : samples) points.emplace_back(n, measure_peak(spec, n, backend, loop));
  return fit_memory(points);
}

void predict_memory(ScenarioMemory& m, const ScenarioSpec& spec, Backend& backend, const LoopFactory& loop) {
  const long low = std::max(smallest_micro_batch(spec), m.micro_batch / 2);
  const std::vector<long> sizes = low < m.micro_batch ? std::vector<long>{low, m.micro_batch}
                                                      : std::vector<long>{m.micro_batch, m.micro_batch + 1};
  m.fit = measure_memory_fit(spec, sizes, backend, loop);
  m.predicted = true;
}

}  // namespace gradeq
