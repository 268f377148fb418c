// json_report.cpp — the complete machine-readable report.
#include <algorithm>
#include <cmath>

#include "reports/json_number.h"
#include "reports/report.h"

namespace gradeq {
namespace {

// 2: properties carry "ran" and "replay"; "not_run" counts. 3: verdicts
// carry "problems" and "diagnosis"; tensors "actual_norm".
constexpr int kReportSchemaVersion = 3;

}  // namespace

int report_schema_version() { return kReportSchemaVersion; }

namespace {

nlohmann::json check_json(const TensorCheck& c) {
  return {{"tensor", c.name},
          {"window", c.window},
          {"shape", {c.rows, c.cols}},
          {"dtype", std::string(dtype_name(c.dtype))},
          {"passed", c.passed()},
          {"max_abs", json_number(c.metrics.max_abs)},
          {"max_rel", json_number(c.metrics.max_rel)},
          {"normwise_rel", json_number(c.metrics.normwise_rel)},
          {"max_ulp", json_number(c.metrics.max_ulp)},
          {"cosine", json_number(c.metrics.cosine)},
          {"worst_ratio", json_number(c.worst_ratio)},
          {"worst_index", c.worst_index},
          {"worst_error", json_number(c.worst_error)},
          {"worst_bound", json_number(c.worst_bound)},
          {"worst_expected", json_number(c.worst_expected)},
          {"worst_actual", json_number(c.worst_actual)},
          {"expected_norm", json_number(c.expected_norm)},
          {"actual_norm", json_number(c.actual_norm)},
          {"non_finite_actual", c.non_finite_actual},
          {"unbounded", c.unbounded},
          {"unbounded_rows", c.unbounded_rows},
          {"judged", c.judged},
          {"failure", c.failure_reason()}};
}

nlohmann::json verdict_json(const Verdict& v) {
  nlohmann::json checks = nlohmann::json::array();
  for (const TensorCheck& c : v.checks) checks.push_back(check_json(c));
  return {{"verdict", verdict_name(v.kind)}, {"status", status_name(v.status)}, {"worst_ratio", json_number(v.worst_ratio)},
          {"note", v.note}, {"problems", v.problems}, {"diagnosis", v.diagnosis}, {"tensors", checks}};
}

nlohmann::json usage_json(const MemoryUsage& m) {
  nlohmann::json out = {{"peak", m.peak}};
  for (MemoryCategory c : kAllMemoryCategories) {
    std::string key = memory_category_name(c);
    std::replace(key.begin(), key.end(), ' ', '_');
    out[key] = m[c];
  }
  return out;
}

// Bytes of the kernel runs at their peaks, and their predictions: absent
// for runs not executed here (verify).
nlohmann::json memory_json(const ScenarioMemory& m) {
  nlohmann::json out = {{"micro_batch", m.micro_batch},
                        {"window", m.window},
                        {"accumulated", usage_json(m.accumulated)},
                        {"full_batch", usage_json(m.full_batch)},
                        {"loop", usage_json(m.loop)}};
  if (m.predicted)
    out["prediction"] = {{"fixed", m.fit.fixed},
                         {"per_sample", m.fit.per_sample},
                         {"accumulated", m.predicted_accumulated()},
                         {"full_batch", m.predicted_full_batch()},
                         {"worst_relative_error", json_number(m.worst_relative_error())},
                         {"tolerance", kMemoryTolerance},
                         {"holds", m.holds()}};
  return out;
}

}  // namespace

std::vector<std::vector<std::string>> memory_table(const nlohmann::json& scenarios) {
  std::vector<std::vector<std::string>> rows = {{"scenario", "micro-batch", "parameters", "gradients", "optimizer state",
                                                 "activations", "scratch", "peak (predicted)", "full batch",
                                                 "full-batch peak (predicted)", "result"}};
  const auto bytes = [](const nlohmann::json& v) { return format_bytes(v.get<double>()); };
  for (const nlohmann::json& s : scenarios) {
    if (!s.contains("memory")) continue;
    const nlohmann::json& m = s.at("memory");
    const nlohmann::json& acc = m.at("accumulated");
    const bool predicted = m.contains("prediction");
    const auto with_prediction = [&](const nlohmann::json& peak, const char* key) {
      return bytes(peak) + (predicted ? " (" + bytes(m.at("prediction").at(key)) + ")" : "");
    };
    rows.push_back({s.at("name").get<std::string>(), m.at("micro_batch").dump() + " samples", bytes(acc.at("parameters")),
                    bytes(acc.at("gradients")), bytes(acc.at("optimizer_state")), bytes(acc.at("activations")),
                    bytes(acc.at("scratch")), with_prediction(acc.at("peak"), "accumulated"),
                    m.at("window").dump() + " samples", with_prediction(m.at("full_batch").at("peak"), "full_batch"),
                    !predicted ? "measured" : m.at("prediction").at("holds").get<bool>() ? "pass" : "FAIL"});
  }
  return rows;
}

nlohmann::json plan_json(const MemoryPlan& p, const PlanOptions& o) {
  nlohmann::json measured = nlohmann::json::array();
  for (const auto& [samples, bytes] : p.measured) measured.push_back({{"samples", samples}, {"peak", bytes}});
  nlohmann::json out = {{"scenario", p.spec.name},
                        {"budget", o.budget_bytes},
                        {"margin", o.margin},
                        {"usable", p.usable_bytes},
                        {"effective_batch", o.effective_batch},
                        {"measured", measured},
                        {"fixed", p.fit.fixed},
                        {"per_sample", p.fit.per_sample},
                        {"micro_batch", p.micro_batch},
                        {"micro_batches", p.micro_batches},
                        {"last_micro_batch", p.last_micro_batch},
                        {"split", p.spec.split},
                        {"predicted", usage_json(p.categories)},
                        {"predicted_full_batch", p.predicted_full_batch},
                        {"measured_peak", p.measured_peak()},
                        {"relative_error", json_number(p.relative_error())},
                        {"equivalence_passed", p.check.passed()},
                        {"failure", p.check.first_failure()},
                        {"passed", p.passed()}};
  if (p.per_rank)
    out["per_rank"] = {{"ranks", p.per_rank->ranks},
                       {"micro_batch", p.per_rank->micro_batch},
                       {"micro_batches", p.per_rank->micro_batches},
                       {"replicated", p.per_rank->replicated},
                       {"sharded", p.per_rank->sharded}};
  return out;
}

nlohmann::json report_json(const CheckReport& r) {
  nlohmann::json scenarios = nlohmann::json::array();
  for (const ScenarioResult& s : r.scenarios) {
    nlohmann::json shapes = nlohmann::json::array();
    for (const ref::ParameterInfo& p : s.schema.parameters)
      shapes.push_back({{"parameter", p.name}, {"shape", {p.rows, p.cols}}});
    scenarios.push_back({{"name", s.spec.name},
                         {"passed", s.passed()},
                         {"failure", s.first_failure()},
                         {"model", ref::describe(s.spec.model)},
                         {"input_features", s.spec.model.input_features},
                         {"positions", s.spec.model.positions},
                         {"parameters", shapes},
                         {"data", data_kind_name(s.spec.data)},
                         {"split", s.spec.split},
                         {"split_text", describe_split(s.spec.split)},
                         {"compute_dtype", std::string(dtype_name(s.spec.precision.compute))},
                         {"accumulate_dtype", std::string(dtype_name(s.spec.precision.accumulate))},
                         {"learning_rate", s.spec.procedure.optimizer.lr},
                         {"procedure", describe_procedure(s.spec.procedure)},
                         {"seed", s.spec.seed},
                         {"vacuous", s.vacuous},
                         {"seconds", s.seconds},
                         {"verdicts", {verdict_json(s.math), verdict_json(s.kernel), verdict_json(s.accumulation)}}});
    if (s.memory.accumulated.peak > 0.0) scenarios.back()["memory"] = memory_json(s.memory);
    if (s.spec.reference_runs_in_turn) scenarios.back()["reference_runs_in_turn"] = true;
    if (s.spec.reference_slice_samples > 0) scenarios.back()["reference_slice_samples"] = s.spec.reference_slice_samples;
  }
  nlohmann::json properties = nlohmann::json::array();
  for (const PropertyRun& p : r.properties)
    properties.push_back({{"name", p.name},
                          {"ran", p.ran},
                          {"passed", p.ran && p.passed},
                          {"cases", p.cases},
                          {"worst_ratio", json_number(p.worst_ratio)},
                          {"worst_case", p.worst_case},
                          {"discarded_vacuous", p.discarded_vacuous},
                          {"discarded_ill_conditioned", p.discarded_ill_conditioned},
                          {"discard_rate", p.discard_rate()},
                          {"counterexample", p.counterexample},
                          {"message", p.message},
                          {"reproduce", p.reproduce},
                          {"replay", replay_command(r, p)},
                          {"seconds", p.seconds}});
  // Bumped whenever a field changes meaning or goes away.
  nlohmann::json out = {{"tool", "gradeq"},
          {"schema_version", kReportSchemaVersion},
          {"version", r.version},
          {"started_at", r.started_at},
          {"backend", r.backend},
          {"seed", r.seed},
          {"cases_per_property", r.cases},
          {"size", size_tier_name(r.size)},
          {"error_model", error_model_name(r.model)},
          {"formulation_factor", kFormulationFactor},
          {"passed", r.passed()},
          {"failures", r.failures()},
          {"not_run", r.not_run()},
          {"ranks", std::max(r.ranks, 1)},
          {"seconds", r.seconds},
          {"scenarios", scenarios},
          {"properties", properties}};
  if (r.norm_sweep) out["norm_sweep"] = norm_sweep_json(*r.norm_sweep);
  if (r.precision_sweep) out["precision_sweep"] = precision_sweep_json(*r.precision_sweep);
  return out;
}

}  // namespace gradeq
