// markdown_report.cpp — report.md: what a reviewer reads. Per scenario the
// model, shapes and split, the three verdicts, and per tensor the error,
// the bound and the share of the bound used.
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "reports/report.h"

namespace gradeq {
namespace {

std::string sci(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0.0) return "0";
  return fmt::format("{:.2e}", v);
}

std::string mark(bool ok) { return ok ? "pass" : "**FAIL**"; }

// Failing tensors listed per failing scenario in report.md.
constexpr long kFailingRowsShown = 5;

std::string status_cell(const Verdict& v) {
  const std::string s = v.status == Status::fail ? "**FAIL**" : status_name(v.status);
  return fmt::format("{} (worst error/bound {})", s, sci(v.worst_ratio));
}

const TensorCheck* find_check(const Verdict& v, const std::string& name, long window) {
  for (const TensorCheck& c : v.checks)
    if (c.name == name && c.window == window) return &c;
  return nullptr;
}

void scenario_section(std::ostringstream& md, const ScenarioResult& s) {
  md << "### " << s.spec.name << " — " << (s.passed() ? "pass" : "**FAIL**") << "\n\n";
  md << "- model: `" << ref::describe(s.spec.model) << "`\n";
  md << "- parameters:";
  for (const ref::ParameterInfo& p : s.schema.parameters)
    md << " " << p.name << " [" << p.rows << "×" << p.cols << "]";
  md << "\n";
  md << "- data: " << (s.spec.data == DataKind::files ? "read from the window set's files" : data_kind_name(s.spec.data))
     << "; input rows × features per sample: " << s.spec.model.positions << " × " << s.spec.model.input_features;
  if (s.spec.data != DataKind::files) md << "; seed " << s.spec.seed;
  md << "\n";
  md << "- split (samples per micro-batch, one bracket per window): `" << describe_split(s.spec.split) << "`\n";
  md << "- precision: compute " << dtype_name(s.spec.precision.compute) << ", accumulation buffer "
     << dtype_name(s.spec.precision.accumulate) << "\n";
  md << "- procedure: " << describe_procedure(s.spec.procedure) << "\n";
  md << "- verdicts: math equivalence " << status_cell(s.math) << "; kernel correctness " << status_cell(s.kernel)
     << "; accumulation equivalence " << status_cell(s.accumulation) << "\n";
  if (!s.passed()) {
    md << "- failure:\n";
    for (const std::string& line : s.failures()) md << "  - " << (line.starts_with("  ") ? line.substr(2) : line) << "\n";
  }
  if (s.math.status == Status::expected_divergence) {
    // What per-micro-batch BatchNorm costs at this split, in exact arithmetic.
    double gradient = 0.0, running = 0.0;
    const long last = s.math.checks.empty() ? 0 : s.math.checks.back().window;
    for (const TensorCheck& c : s.math.checks) {
      if (c.window != last) continue;
      if (c.kind == RecordKind::gradient) gradient = std::max(gradient, c.metrics.normwise_rel);
      if (c.kind == RecordKind::statistic) running = std::max(running, c.metrics.normwise_rel);
    }
    md << "- expected divergence (BatchNorm over micro-batches, not a kernel bug): in float64, R_acc departs from "
          "R_full by up to " << sci(gradient) << " (normwise, per gradient tensor, last window) and the running "
          "statistics by up to " << sci(running) << "; the kernel still matches its own accumulated reference "
          "(kernel correctness). See docs/BATCHNORM.md.\n";
  }
  md << "\n";
  md << "The failing tensors (accumulation equivalence K_acc vs R_full, with the kernel-correctness ratios and the "
        "float64 divergence of R_acc from R_full; every tensor is in report.json and report.html):\n\n";
  md << "| window | tensor | shape | max abs error | bound at worst | error/bound | max rel | normwise rel | max ULP "
        "| cosine | K_full err/bound | K_acc err/bound | R_acc vs R_full rel |\n";
  md << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  long shown = 0, failing = 0;
  for (const TensorCheck& c : s.accumulation.checks) {
    const TensorCheck* kf = find_check(s.kernel, "full: " + c.name, c.window);
    const TensorCheck* ka = find_check(s.kernel, "acc: " + c.name, c.window);
    const TensorCheck* m = find_check(s.math, c.name, c.window);
    const bool accumulation_failed = !c.passed() && s.accumulation.status != Status::expected_divergence;
    if (!accumulation_failed && (!kf || kf->passed()) && (!ka || ka->passed())) continue;
    if (++failing > kFailingRowsShown) continue;
    ++shown;
    md << "| " << c.window << " | " << c.name << " | " << c.rows << "×" << c.cols << " | " << sci(c.metrics.max_abs) << " | "
       << sci(c.worst_bound) << " | " << (c.passed() ? "" : "**") << sci(c.worst_ratio) << (c.passed() ? "" : "**")
       << " | " << sci(c.metrics.max_rel) << " | " << sci(c.metrics.normwise_rel) << " | "
       << fmt::format("{:.1f}", c.metrics.max_ulp) << " | " << fmt::format("{:.9f}", c.metrics.cosine) << " | "
       << (kf ? sci(kf->worst_ratio) : "-") << " | " << (ka ? sci(ka->worst_ratio) : "-") << " | "
       << (m ? sci(m->metrics.normwise_rel) : "-") << " |\n";
  }
  if (failing > shown) md << "\n" << failing - shown << " more failing tensors: report.json, report.html\n";
  md << "\n";
}

}  // namespace

std::string markdown_table(const std::vector<std::vector<std::string>>& rows) {
  std::ostringstream md;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    md << "|";
    for (const std::string& cell : rows[i]) md << " " << cell << " |";
    md << "\n";
    if (i == 0) {
      md << "|";
      for (std::size_t c = 0; c < rows[0].size(); ++c) md << "---|";
      md << "\n";
    }
  }
  return md.str();
}

std::string report_markdown(const CheckReport& r, const std::vector<Figure>* figures) {
  std::ostringstream md;
  md << "# gradeq report\n\n";
  md << "**" << (r.passed() ? "PASS" : "FAIL") << "** — " << r.scenarios.size() << " scenarios, "
     << r.properties.size() << " properties, " << r.failures() << " failing; backend `" << r.backend << "`, seed "
     << r.seed << ", " << fmt::format("{:.1f}", r.seconds) << " s, gradeq " << r.version << ", " << r.started_at
     << ".\n\n";
  md << "Error model: " << error_model_name(r.model) << "; formulation factor " << kFormulationFactor
     << " (docs/NUMERICS.md). A check passes when every element's |error| is within its bound and no value is NaN "
        "or Inf. Verdicts: **math** R_acc vs R_full (float64), **kernel** K_full vs R_full and K_acc vs R_acc, "
        "**accumulation** K_acc vs R_full. Every tensor of every check is in report.json"
     << (figures ? " and [report.html](report.html), with the plots" : "") << ".\n\n";

  md << "## Scenarios\n\n| scenario | math | kernel | accumulation | worst err/bound | result |\n|---|---|---|---|---|---|\n";
  for (const ScenarioResult& s : r.scenarios) {
    double worst = 0.0;
    for (const Verdict* v : {&s.kernel, &s.accumulation})
      if (v->status != Status::expected_divergence) worst = std::max(worst, v->worst_ratio);
    md << "| " << s.spec.name << " | " << status_name(s.math.status) << " | " << status_name(s.kernel.status) << " | "
       << status_name(s.accumulation.status) << " | " << sci(worst) << " | " << mark(s.passed()) << " |\n";
  }
  md << "\n";

  const std::vector<std::vector<std::string>> memory = memory_table(report_json(r).at("scenarios"));
  if (memory.size() > 1) {
    md << "## Memory\n\nThe accumulated run's bytes at its peak by category, and the peaks predicted from "
          "one-micro-batch runs (fixed + per-sample bytes; a result fails beyond "
       << 100.0 * kMemoryTolerance << " %, docs/MEMORY.md).\n\n";
    md << markdown_table(memory) << "\n";
  }

  if (!r.properties.empty()) {
    md << "## Properties\n\n" << size_tier_name(r.size) << " shapes; a property fails when it discards more than "
       << 100.0 * kMaxDiscardRate << " % of its cases (vacuous or ill-conditioned).\n\n";
    md << "| property | cases | worst err/bound | discarded | result |\n|---|---|---|---|---|\n";
    for (const PropertyRun& p : r.properties)
      md << "| " << p.name << " | " << p.cases << " | " << sci(p.worst_ratio) << " | "
         << p.discarded_vacuous + p.discarded_ill_conditioned << " | " << (p.ran ? mark(p.passed) : "not run") << " |\n";
    md << "\n";
    for (const PropertyRun& p : r.properties)
      if (!p.ran) md << "- " << p.name << ": " << p.message << "\n";
  }

  // Failures in full.
  bool any_failure = false;
  for (const PropertyRun& p : r.properties) {
    if (!p.ran || p.passed) continue;
    if (!any_failure) md << "## Failures\n\n";
    any_failure = true;
    md << "### property " << p.name << " — counterexample\n\n";
    md << "- shrunk case: `" << p.counterexample << "`\n";
    md << "- " << p.message << "\n";
    if (!p.reproduce.empty()) md << "- replay: `" << replay_command(r, p) << "`\n";
    md << "\n";
  }
  for (const ScenarioResult& s : r.scenarios) {
    if (s.passed()) continue;
    if (!any_failure) md << "## Failures\n\n";
    any_failure = true;
    scenario_section(md, s);
  }

  if (figures && !figures->empty()) {
    md << "## Plots\n\n";
    for (const Figure& f : *figures)
      if (!f.section.starts_with("scenario:")) md << "- [" << f.title << "](plots/" << f.id << ".svg)\n";
    md << "- per scenario, the worst err/bound of each tensor: `plots/scenario_<name>.svg`\n\n";
  } else {
    if (r.norm_sweep) md << norm_sweep_markdown(*r.norm_sweep);
    if (r.precision_sweep) md << precision_sweep_markdown(*r.precision_sweep);
  }
  return md.str();
}

}  // namespace gradeq
