// equivalence.cpp — executing the four runs and judging the three verdicts.
#include "harness/equivalence.h"

#include <chrono>
#include <stdexcept>

namespace gradeq {
namespace {

// Gradients live in the accumulation buffer; weights and BatchNorm running
// statistics are float32.
DType dtype_of(const std::string& name, const PrecisionSpec& p) {
  return name.starts_with("grad/") ? p.accumulate : DType::f32;
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

bool expects_equivalence(const ScenarioSpec& spec) {
  if (!ref::has_batch_norm(spec.model) || spec.procedure.batch_norm == ref::BatchNormMode::exact_window) return true;
  // Per-micro-batch BatchNorm equals the full batch only when each window is one micro-batch.
  for (const auto& window : spec.split)
    if (window.size() > 1) return false;
  return true;
}

Runs execute(const Scenario& scenario, Backend& backend, const LoopFactory& loop, const ErrorModel& model) {
  if (scenario.spec.procedure.batch_norm == ref::BatchNormMode::exact_window)
    throw std::invalid_argument("scenario " + scenario.spec.name +
                                ": exact-window batchnorm is a reference-only mode (see `gradeq sweep norms`)");
  const Split full = full_batch_split(scenario.spec.split);
  Runs runs;
  runs.r_full = run_reference(scenario, full, model);
  runs.r_acc = run_reference(scenario, scenario.spec.split, model);
  runs.k_full = loop(backend)->run(scenario, full);
  runs.k_acc = loop(backend)->run(scenario, scenario.spec.split);
  runs.r_full_at_k_full = run_reference_from(scenario, full, runs.k_full, model);
  runs.r_acc_at_k_acc = run_reference_from(scenario, scenario.spec.split, runs.k_acc, model);
  runs.r_full_at_k_acc = run_reference_from(scenario, full, runs.k_acc, model);
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
  auto values_of = [](const RunTensor& t) { return t.values; };
  for (std::size_t w = 0; w < runs.r_full.windows.size(); ++w) {
    for (const ReferenceTensor& full : runs.r_full.windows[w].tensors) {
      const std::string& name = full.name;
      const ReferenceTensor& acc = find_tensor(runs.r_acc.windows[w], name);
      const ReferenceTensor& full_k = find_tensor(runs.r_full_at_k_full.windows[w], name);
      const ReferenceTensor& acc_k = find_tensor(runs.r_acc_at_k_acc.windows[w], name);
      const ReferenceTensor& full_ka = find_tensor(runs.r_full_at_k_acc.windows[w], name);
      const DType dtype = dtype_of(name, spec.precision);
      const std::size_t n = full.value.size();
      std::vector<double> math(n), kernel_full(n), kernel_acc(n), accumulation(n);
      for (std::size_t i = 0; i < n; ++i) {
        math[i] = math_bound(acc.reference_bound[i], full.reference_bound[i]);
        kernel_full[i] = kernel_bound(full_k.kernel_bound[i], full_k.reference_bound[i]);
        kernel_acc[i] = kernel_bound(acc_k.kernel_bound[i], acc_k.reference_bound[i]);
        accumulation[i] = accumulation_bound(acc_k.kernel_bound[i], acc_k.reference_bound[i], full_ka.reference_bound[i]);
        if (name.starts_with("grad/") && full.value[i] != 0.0) any_nonzero_gradient = true;
      }
      auto add = [&](Verdict& v, const std::string& label, DType d, const std::vector<double>& expected,
                     const std::vector<double>& actual, const std::vector<double>& bound) {
        TensorCheck c = compare_tensor(label, full.rows, full.cols, d, expected, actual, bound);
        c.window = static_cast<long>(w);
        v.checks.push_back(std::move(c));
      };
      add(result.math, name, DType::f32, full.value, acc.value, math);
      add(result.kernel, "full: " + name, dtype, full_k.value, values_of(find_tensor(runs.k_full.windows[w], name)),
          kernel_full);
      add(result.kernel, "acc: " + name, dtype, acc_k.value, values_of(find_tensor(runs.k_acc.windows[w], name)),
          kernel_acc);
      add(result.accumulation, name, dtype, full_ka.value, values_of(find_tensor(runs.k_acc.windows[w], name)),
          accumulation);
    }
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
