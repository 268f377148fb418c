// equivalence.cpp — executing the four runs and judging the three verdicts.
#include "harness/equivalence.h"

#include <chrono>
#include <stdexcept>

namespace gradeq {
namespace {

DType dtype_of(const std::string& name, const PrecisionSpec& p) {
  return name.starts_with("grad/") ? p.accumulate : DType::f32;
}

const RunTensor& find(const KernelRun& run, const std::string& name) {
  for (const RunTensor& t : run.tensors)
    if (t.name == name) return t;
  throw std::logic_error("kernel run has no tensor " + name);
}

const ReferenceTensor& find(const ReferenceRun& run, const std::string& name) {
  for (const ReferenceTensor& t : run.tensors)
    if (t.name == name) return t;
  throw std::logic_error("reference run has no tensor " + name);
}

// A failure on bounded elements decides the verdict; elements the error
// model cannot bound only make it inconclusive when nothing else failed.
void conclude(Verdict& v, bool divergence_expected) {
  v.status = Status::pass;
  std::string unbounded_note;
  for (const TensorCheck& c : v.checks) {
    v.worst_ratio = std::max(v.worst_ratio, c.non_finite_actual ? HUGE_VAL : c.worst_ratio);
    const bool failed = c.non_finite_actual > 0 || c.worst_ratio > 1.0;
    if (failed && v.status == Status::pass) {
      v.status = divergence_expected ? Status::expected_divergence : Status::fail;
      v.note = c.name + ": " + c.failure_reason();
    }
    if (c.unbounded > 0 && unbounded_note.empty()) unbounded_note = c.name + ": " + c.failure_reason();
  }
  if (v.status == Status::pass && !unbounded_note.empty()) {
    v.status = Status::inconclusive;
    v.note = unbounded_note;
  }
}

}  // namespace

std::string verdict_name(VerdictKind k) {
  switch (k) {
    case VerdictKind::math_equivalence: return "math equivalence";
    case VerdictKind::kernel_correctness: return "kernel correctness";
    case VerdictKind::accumulation_equivalence: return "accumulation equivalence";
  }
  return "?";
}

std::string status_name(Status s) {
  switch (s) {
    case Status::pass: return "pass";
    case Status::fail: return "FAIL";
    case Status::expected_divergence: return "expected divergence";
    case Status::inconclusive: return "inconclusive";
  }
  return "?";
}

LoopFactory correct_loop() {
  return [](Backend& b) { return std::make_unique<TrainingLoop>(b); };
}

bool ScenarioResult::passed() const {
  for (const Verdict* v : {&math, &kernel, &accumulation})
    if (v->status == Status::fail || v->status == Status::inconclusive) return false;
  return !vacuous;
}

bool ScenarioResult::inconclusive() const {
  for (const Verdict* v : {&math, &kernel, &accumulation})
    if (v->status == Status::inconclusive) return true;
  return false;
}

std::string ScenarioResult::first_failure() const {
  for (const Verdict* v : {&math, &kernel, &accumulation})
    if (v->status == Status::fail) return verdict_name(v->kind) + ": " + v->note;
  for (const Verdict* v : {&math, &kernel, &accumulation})
    if (v->status == Status::inconclusive) return verdict_name(v->kind) + " inconclusive: " + v->note;
  if (vacuous) return "vacuous: every reference gradient is zero";
  return "";
}

bool expects_equivalence(const ScenarioSpec&) { return true; }

Runs execute(const Scenario& scenario, Backend& backend, const LoopFactory& loop, const ErrorModel& model) {
  const Split full = full_batch_split(scenario.spec.split);
  Runs runs;
  runs.r_full = run_reference(scenario, full, model);
  runs.r_acc = run_reference(scenario, scenario.spec.split, model);
  runs.k_full = loop(backend)->run(scenario, full);
  runs.k_acc = loop(backend)->run(scenario, scenario.spec.split);
  return runs;
}

ScenarioResult judge(const Scenario& scenario, const Runs& runs) {
  const ScenarioSpec& spec = scenario.spec;
  const bool equivalent = expects_equivalence(spec);
  ScenarioResult result;
  result.spec = spec;
  result.math.kind = VerdictKind::math_equivalence;
  result.kernel.kind = VerdictKind::kernel_correctness;
  result.accumulation.kind = VerdictKind::accumulation_equivalence;
  bool any_nonzero_gradient = false;
  for (const ReferenceTensor& full : runs.r_full.tensors) {
    const ReferenceTensor& acc = find(runs.r_acc, full.name);
    const DType dtype = dtype_of(full.name, spec.precision);
    const std::size_t n = full.value.size();
    std::vector<double> math(n), kernel_full(n), kernel_acc(n), accumulation(n);
    for (std::size_t i = 0; i < n; ++i) {
      math[i] = math_bound(acc.reference_bound[i], full.reference_bound[i]);
      kernel_full[i] = kernel_bound(full.kernel_bound[i], full.reference_bound[i]);
      kernel_acc[i] = kernel_bound(acc.kernel_bound[i], acc.reference_bound[i]);
      accumulation[i] = accumulation_bound(acc.kernel_bound[i], acc.reference_bound[i], full.reference_bound[i]);
      if (full.name.starts_with("grad/") && full.value[i] != 0.0) any_nonzero_gradient = true;
    }
    result.math.checks.push_back(
        compare_tensor(full.name, full.rows, full.cols, DType::f32, full.value, acc.value, math));
    result.kernel.checks.push_back(compare_tensor("full: " + full.name, full.rows, full.cols, dtype, full.value,
                                                  find(runs.k_full, full.name).values, kernel_full));
    result.kernel.checks.push_back(compare_tensor("acc: " + full.name, full.rows, full.cols, dtype, acc.value,
                                                  find(runs.k_acc, full.name).values, kernel_acc));
    result.accumulation.checks.push_back(compare_tensor(full.name, full.rows, full.cols, dtype, full.value,
                                                        find(runs.k_acc, full.name).values, accumulation));
  }
  conclude(result.math, !equivalent);
  conclude(result.kernel, false);
  conclude(result.accumulation, !equivalent);
  result.vacuous = !any_nonzero_gradient;
  return result;
}

ScenarioResult check_scenario(const ScenarioSpec& spec, Backend& backend, const LoopFactory& loop,
                              const ErrorModel& model) {
  const auto start = std::chrono::steady_clock::now();
  const Scenario scenario = materialize(spec);
  ScenarioResult result = judge(scenario, execute(scenario, backend, loop, model));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace gradeq
