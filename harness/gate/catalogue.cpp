// catalogue.cpp — the catalogue `gradeq list` shows.
#include "harness/gate/catalogue.h"

#include "harness/core/data_parallel.h"
#include "harness/core/data_parallel_mutants.h"
#include "harness/core/mutants.h"
#include "harness/core/suite.h"
#include "kernels/cpu/cpu_backend.h"
#include "properties/properties.h"

namespace gradeq {
namespace {

std::vector<ListedScenario> listed(const std::vector<ScenarioSpec>& suite) {
  std::vector<ListedScenario> out;
  for (const ScenarioSpec& s : suite) out.push_back({s.name, ref::describe(s.model), describe_split(s.split)});
  return out;
}

}  // namespace

Catalogue make_catalogue() {
  Catalogue c;
  c.scenarios = listed(default_scenarios());
  c.data_parallel_scenarios = listed(data_parallel_scenarios());
  for (const Property& p : default_properties()) c.properties.push_back({p.name, p.description});
  // The mutants as they run on the host backend: B19's race modelled.
  CpuBackend host;
  for (const Mutant& m : mutants_for(host)) c.mutants.push_back({m.id, m.bug, m.source, ""});
  for (const DataParallelMutant& m : data_parallel_mutants())
    c.data_parallel_mutants.push_back({m.id, m.bug, m.source, shard_mode_name(m.mode)});
  c.backends = list_backends();
  return c;
}

}  // namespace gradeq
