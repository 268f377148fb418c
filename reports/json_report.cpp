// json_report.cpp — the complete machine-readable report.
#include <cmath>

#include "reports/json_number.h"
#include "reports/report.h"

namespace gradeq {
namespace {

constexpr int kReportSchemaVersion = 2;  // 2: properties carry "ran" and "replay"; "not_run" counts

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
          {"note", v.note}, {"tensors", checks}};
}

}  // namespace

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
          {"seconds", r.seconds},
          {"scenarios", scenarios},
          {"properties", properties}};
  if (r.norm_sweep) out["norm_sweep"] = norm_sweep_json(*r.norm_sweep);
  if (r.precision_sweep) out["precision_sweep"] = precision_sweep_json(*r.precision_sweep);
  return out;
}

}  // namespace gradeq
