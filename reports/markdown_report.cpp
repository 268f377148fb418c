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
  md << "- data: " << data_kind_name(s.spec.data) << "; input rows × features per sample: " << s.spec.model.positions
     << " × " << s.spec.model.input_features << "; seed " << s.spec.seed << "\n";
  md << "- split (samples per micro-batch, one bracket per window): `" << describe_split(s.spec.split) << "`\n";
  md << "- precision: compute " << dtype_name(s.spec.precision.compute) << ", accumulation buffer "
     << dtype_name(s.spec.precision.accumulate) << "\n";
  md << "- procedure: " << describe_procedure(s.spec.procedure) << "\n";
  md << "- verdicts: math equivalence " << status_cell(s.math) << "; kernel correctness " << status_cell(s.kernel)
     << "; accumulation equivalence " << status_cell(s.accumulation) << "\n";
  if (!s.passed()) md << "- failure: " << s.first_failure() << "\n";
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
  md << "Accumulation equivalence per window and tensor (K_acc vs R_full), with the kernel-correctness ratios and "
        "the float64 divergence of R_acc from R_full:\n\n";
  md << "| window | tensor | shape | max abs error | bound at worst | error/bound | max rel | normwise rel | max ULP "
        "| cosine | K_full err/bound | K_acc err/bound | R_acc vs R_full rel |\n";
  md << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const TensorCheck& c : s.accumulation.checks) {
    const TensorCheck* kf = find_check(s.kernel, "full: " + c.name, c.window);
    const TensorCheck* ka = find_check(s.kernel, "acc: " + c.name, c.window);
    const TensorCheck* m = find_check(s.math, c.name, c.window);
    md << "| " << c.window << " | " << c.name << " | " << c.rows << "×" << c.cols << " | " << sci(c.metrics.max_abs) << " | "
       << sci(c.worst_bound) << " | " << (c.passed() ? "" : "**") << sci(c.worst_ratio) << (c.passed() ? "" : "**")
       << " | " << sci(c.metrics.max_rel) << " | " << sci(c.metrics.normwise_rel) << " | "
       << fmt::format("{:.1f}", c.metrics.max_ulp) << " | " << fmt::format("{:.9f}", c.metrics.cosine) << " | "
       << (kf ? sci(kf->worst_ratio) : "-") << " | " << (ka ? sci(ka->worst_ratio) : "-") << " | "
       << (m ? sci(m->metrics.normwise_rel) : "-") << " |\n";
  }
  md << "\n";
}

}  // namespace

std::string report_markdown(const CheckReport& r) {
  std::ostringstream md;
  md << "# gradeq report\n\n";
  md << "**" << (r.passed() ? "PASS" : "FAIL") << "** — " << r.scenarios.size() << " scenarios, "
     << r.properties.size() << " properties, " << r.failures() << " failing; backend `" << r.backend << "`, seed "
     << r.seed << ", " << fmt::format("{:.1f}", r.seconds) << " s, gradeq " << r.version << ", " << r.started_at
     << ".\n\n";
  md << "Error model: " << error_model_name(r.model) << "; formulation factor " << kFormulationFactor
     << " (docs/NUMERICS.md). A comparison passes when every element's |error| is within its bound "
        "(error/bound ≤ 1) and no value is NaN or Inf.\n\n";
  md << "Runs: R_full / R_acc are the float64 reference on the full batch and accumulated over the split; "
        "K_full / K_acc the backend under test. Verdicts: **math equivalence** R_acc vs R_full; **kernel "
        "correctness** K_full vs R_full and K_acc vs R_acc; **accumulation equivalence** K_acc vs R_full. "
        "Tensors, per window: `grad/` the accumulated gradient as the optimizer used it (unscaled, clipped), `param/` the weights after the "
        "step, `stats/` BatchNorm running statistics. Math equivalence follows whole trajectories from the initial "
        "state; the kernel verdicts check each window from the state the kernel run reached before it.\n\n";

  md << "## Summary\n\n| scenario | model | split | math | kernel | accumulation | result |\n|---|---|---|---|---|---|---|\n";
  for (const ScenarioResult& s : r.scenarios)
    md << "| " << s.spec.name << " | `" << ref::describe(s.spec.model) << "` | `" << describe_split(s.spec.split)
       << "` | " << status_name(s.math.status) << " | " << status_name(s.kernel.status) << " | "
       << status_name(s.accumulation.status) << " | " << mark(s.passed()) << " |\n";
  md << "\n";

  if (!r.properties.empty()) {
    md << "## Properties\n\nEach property ran on generated cases (" << size_tier_name(r.size)
       << " shapes); a case is discarded (and counted) when it cannot "
          "decide the property whatever the backend does: all reference gradients zero (vacuous), or an element the "
          "error model cannot bound (ill-conditioned). A property that discards more than "
       << 100.0 * kMaxDiscardRate << " % of its cases fails: it would not test what it claims.\n\n";
    md << "| property | cases passed | worst error/bound | discarded vacuous | discarded ill-conditioned | discard rate | "
          "result |\n|---|---|---|---|---|---|---|\n";
    for (const PropertyRun& p : r.properties)
      md << "| " << p.name << " | " << p.cases << " | " << sci(p.worst_ratio) << " | " << p.discarded_vacuous << " | "
         << p.discarded_ill_conditioned << " | " << fmt::format("{:.2f} %", 100.0 * p.discard_rate()) << " | "
         << (p.ran ? mark(p.passed) : "not run") << " |\n";
    md << "\n";
    for (const PropertyRun& p : r.properties) {
      if (!p.ran) md << "- " << p.name << ": " << p.message << "\n";
    }
    for (const PropertyRun& p : r.properties) {
      if (!p.ran || p.passed) continue;
      md << "### " << p.name << " — counterexample\n\n";
      md << "- shrunk case: `" << p.counterexample << "`\n";
      md << "- " << p.message << "\n";
      if (!p.reproduce.empty()) md << "- replay: `" << replay_command(r, p) << "`\n";
      md << "\n";
    }
  }

  if (r.norm_sweep) md << norm_sweep_markdown(*r.norm_sweep);
  if (r.precision_sweep) md << precision_sweep_markdown(*r.precision_sweep);

  md << "## Scenarios\n\n";
  for (const ScenarioResult& s : r.scenarios) scenario_section(md, s);
  return md.str();
}

}  // namespace gradeq
