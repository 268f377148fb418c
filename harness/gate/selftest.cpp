// selftest.cpp — the kill matrix: every backend-exercising property on
// correct code and against every mutant; the B16 threshold and the
// campaign are in low_precision_buffer_threshold.cpp and campaign.cpp.
#include "harness/gate/selftest.h"

#include <algorithm>
#include <chrono>
#include <cmath>

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

double SelfTestReport::correct_scenarios_ratio() const {
  for (const PropertyRun& p : correct)
    if (p.name == kScenariosCheck) return p.worst_ratio;
  return 0.0;
}

namespace {

// scenarios_only: each named scenario against one mutant, every one of
// them (a cell each), with the err/bound that detected it.
void scenario_cells(const std::vector<ScenarioSpec>& scenarios, const SelfTestOptions& o, const Mutant& m,
                    const MutantRig& rig, SelfTestReport& report, MutantSummary& summary, const ProgressSink& progress) {
  for (ScenarioSpec spec : scenarios) {
    spec.seed = mix_seed(o.seed, spec.seed);
    if (progress) progress("selftest: mutant " + m.id + ", scenario " + spec.name);
    const auto start = std::chrono::steady_clock::now();
    const ScenarioResult r = check_scenario(spec, *rig.backend, rig.loop, o.model);
    KillCell cell;
    cell.mutant = m.id;
    cell.property = kScenarioCellPrefix + spec.name;
    cell.caught = !r.passed();
    cell.run.name = cell.property;
    cell.run.passed = r.passed();
    cell.run.cases = cell.caught ? 0 : 1;
    for (const Verdict* v : {&r.math, &r.kernel, &r.accumulation}) {
      if (v->status == Status::pass || v->status == Status::expected_divergence) {
        cell.run.worst_ratio = std::max(cell.run.worst_ratio, v->worst_ratio);
      } else {
        cell.detecting_ratio = std::isnan(v->worst_ratio) ? HUGE_VAL : std::max(cell.detecting_ratio, v->worst_ratio);
      }
    }
    if (cell.caught) {
      cell.run.counterexample = spec.name;
      cell.run.counterexample_spec = spec;
      cell.run.message = spec.name + ": " + r.first_failure();
      cell.counterexample_samples = total_samples(spec.split);
      cell.counterexample_parameters = parameter_count(spec);
      summary.caught_by.push_back(cell.property);
    }
    cell.run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.cells.push_back(std::move(cell));
  }
}

}  // namespace

MutantDetection mutant_detection(const SelfTestReport& r, const std::string& mutant) {
  MutantDetection d;
  for (const KillCell& c : r.cells) {
    if (c.mutant != mutant) continue;
    d.worst_passing_ratio = std::max(d.worst_passing_ratio, c.run.worst_ratio);
    if (!c.caught) continue;
    d.caught = true;
    d.smallest_detecting_ratio = std::min(d.smallest_detecting_ratio, c.detecting_ratio);
  }
  const double correct = r.correct_scenarios_ratio();
  if (d.caught) d.separation = correct > 0.0 ? d.smallest_detecting_ratio / correct : HUGE_VAL;
  return d;
}

bool Campaign::calibrated() const { return worst_ratio <= 1.0 / kFormulationFactor; }

bool SelfTestReport::passed() const {
  for (const PropertyRun& p : correct)
    if (!p.passed) return false;
  if (campaign && (campaign->false_alarms > 0 || !campaign->calibrated())) return false;
  // selftest --config measures which mutants its scenarios show: a mutant
  // they cannot exercise (a convolution's bug in an MLP) is reported, not
  // a failure.
  return scenarios_only || survivors().empty();
}

SelfTestReport run_selftest(const SelfTestOptions& o, Backend& backend, const ProgressSink& progress) {
  const auto start = std::chrono::steady_clock::now();
  SelfTestReport report;
  report.backend = backend.name();
  report.seed = o.seed;
  report.cases = o.cases;
  report.size = o.size;
  report.suite = o.suite;
  report.scenarios_only = o.scenarios_only;
  set_size_tier(o.size);
  const std::vector<const Property*> properties =
      o.scenarios_only ? std::vector<const Property*>{} : selftest_internal::backend_properties();
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
    if (o.scenarios_only) {
      scenario_cells(o.scenarios, o, m, rig, report, summary, progress);
    } else if (!o.scenarios.empty()) {
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
  if (!o.scenarios_only) {
    if (progress) progress("selftest: B16 threshold");
    for (DType compute : {DType::f32, DType::bf16})
      report.b16.push_back(selftest_internal::low_precision_buffer_threshold(compute, backend, o.model));
  }
  if (o.campaign_cases > 0) report.campaign = selftest_internal::run_campaign(o, backend, progress);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace gradeq
