// selftest.cpp — the kill matrix: every backend-exercising property on
// correct code and against every mutant; the B16 threshold and the
// campaign are in low_precision_buffer_threshold.cpp and campaign.cpp.
#include "harness/gate/selftest.h"

#include <algorithm>
#include <chrono>

#include "harness/gate/selftest_internal.h"
#include "harness/core/measured_memory.h"
#include "harness/core/mutants.h"
#include "harness/core/tolerance.h"

namespace gradeq {
namespace selftest_internal {

std::vector<const Property*> backend_properties() {
  std::vector<const Property*> out;
  for (const Property& p : default_properties())
    if (p.exercises_backend) out.push_back(&p);
  return out;
}

}  // namespace selftest_internal

namespace {

long parameter_count(const ScenarioSpec& s) {
  long n = 0;
  for (const ref::ParameterInfo& p : ref::parameter_layout(s.model)) n += p.rows * p.cols;
  return n;
}

}  // namespace

PropertyRun run_scenarios_check(const std::vector<ScenarioSpec>& scenarios, const SelfTestOptions& o, Backend& backend,
                                const LoopFactory& loop, const std::string& label, const ProgressSink& progress) {
  const auto start = std::chrono::steady_clock::now();
  PropertyRun run;
  run.name = kScenariosCheck;
  run.passed = true;
  for (ScenarioSpec spec : scenarios) {
    spec.seed = mix_seed(o.seed, spec.seed);
    if (progress)
      progress("selftest: " + label + ", scenario " + spec.name + " [" + std::to_string(run.cases + 1) + "/" +
               std::to_string(scenarios.size()) + "]");
    ScenarioResult r = check_scenario(spec, backend, loop, o.model);
    predict_memory(r.memory, spec, backend, loop);
    for (const Verdict* v : {&r.math, &r.kernel, &r.accumulation})
      if (v->status == Status::pass) run.worst_ratio = std::max(run.worst_ratio, v->worst_ratio);
    if (!r.passed()) {
      run.passed = false;
      run.counterexample = spec.name;
      run.counterexample_spec = spec;
      run.message = spec.name + ": " + r.first_failure();
      break;
    }
    ++run.cases;
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

std::vector<std::string> SelfTestReport::survivors() const {
  std::vector<std::string> out;
  for (const MutantSummary& m : mutants)
    if (m.caught_by.empty()) out.push_back(m.id);
  return out;
}

bool Campaign::calibrated() const { return worst_ratio <= 1.0 / kFormulationFactor; }

bool SelfTestReport::passed() const {
  for (const PropertyRun& p : correct)
    if (!p.passed) return false;
  if (campaign && (campaign->false_alarms > 0 || !campaign->calibrated())) return false;
  return survivors().empty();
}

SelfTestReport run_selftest(const SelfTestOptions& o, Backend& backend, const ProgressSink& progress) {
  const auto start = std::chrono::steady_clock::now();
  SelfTestReport report;
  report.backend = backend.name();
  report.seed = o.seed;
  report.cases = o.cases;
  report.size = o.size;
  report.suite = o.suite;
  set_size_tier(o.size);
  const std::vector<const Property*> properties = selftest_internal::backend_properties();
  PropertyRunConfig config;
  config.cases = o.cases;
  for (const Property* p : properties) {
    if (progress) progress("selftest: correct code, " + p->name);
    PropertyContext ctx{&backend, correct_loop(), o.model};
    config.seed = name_seed(o.seed, p->name);
    report.correct.push_back(run_property(*p, ctx, config));
  }
  if (!o.scenarios.empty())
    report.correct.push_back(run_scenarios_check(o.scenarios, o, backend, correct_loop(), "correct code", progress));
  for (const Mutant& m : mutants_for(backend)) {
    MutantSummary summary{m.id, m.bug, m.source, {}};
    MutantRig rig(m, backend);
    for (const Property* p : properties) {
      if (progress) progress("selftest: mutant " + m.id + ", " + p->name);
      PropertyContext ctx{rig.backend, rig.loop, o.model};
      config.seed = name_seed(o.seed, m.id + "/" + p->name);
      KillCell cell{m.id, p->name, false, run_property(*p, ctx, config), 0, 0};
      cell.caught = !cell.run.passed && cell.run.counterexample_spec.has_value();
      if (cell.run.counterexample_spec) {
        cell.counterexample_samples = total_samples(cell.run.counterexample_spec->split);
        cell.counterexample_parameters = parameter_count(*cell.run.counterexample_spec);
      }
      if (cell.caught) summary.caught_by.push_back(p->name);
      report.cells.push_back(std::move(cell));
    }
    if (!o.scenarios.empty()) {
      KillCell cell{m.id, kScenariosCheck, false,
                    run_scenarios_check(o.scenarios, o, *rig.backend, rig.loop, "mutant " + m.id, progress), 0, 0};
      cell.caught = !cell.run.passed;
      if (cell.run.counterexample_spec) {
        cell.counterexample_samples = total_samples(cell.run.counterexample_spec->split);
        cell.counterexample_parameters = parameter_count(*cell.run.counterexample_spec);
      }
      if (cell.caught) summary.caught_by.push_back(kScenariosCheck);
      report.cells.push_back(std::move(cell));
    }
    report.mutants.push_back(summary);
  }
  if (progress) progress("selftest: B16 threshold");
  for (DType compute : {DType::f32, DType::bf16}) report.b16.push_back(selftest_internal::low_precision_buffer_threshold(compute, backend, o.model));
  if (o.campaign_cases > 0) report.campaign = selftest_internal::run_campaign(o, backend, progress);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace gradeq
