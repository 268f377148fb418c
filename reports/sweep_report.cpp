// sweep_report.cpp — the normalizer study as JSON and as a report section.
#include <fmt/format.h>

#include <map>
#include <sstream>

#include "harness/core/precision_sweep.h"
#include "reports/json_number.h"
#include "reports/report.h"

namespace gradeq {
namespace {

nlohmann::json statistic_json(const SweepStatistic& s) {
  return {{"mean", json_number(s.mean)}, {"spread", json_number(s.spread)}, {"max", json_number(s.max)}};
}

std::string cell(const SweepStatistic& s) {
  if (s.max == 0.0) return "0";
  return fmt::format("{:.1e} ± {:.0e}", s.mean, s.spread);
}

// One table: a row per normalizer, a column per micro-batch size.
void table(std::ostringstream& md, const NormSweep& sweep, const std::string& title,
           SweepStatistic NormSweepRow::*field, bool running_only) {
  md << "**" << title << "**\n\n| normalizer |";
  for (long m : sweep.options.micro_batch_sizes)
    md << " b=" << m << " (N=" << sweep.options.total_batch / m << ") |";
  md << "\n|---|";
  for (std::size_t i = 0; i < sweep.options.micro_batch_sizes.size(); ++i) md << "---|";
  md << "\n";
  std::vector<std::string> order;
  std::map<std::string, std::map<long, const NormSweepRow*>> by_norm;
  for (const NormSweepRow& r : sweep.rows) {
    if (running_only && !r.has_running) continue;
    if (!by_norm.count(r.norm)) order.push_back(r.norm);
    by_norm[r.norm][r.micro_batch] = &r;
  }
  for (const std::string& norm : order) {
    md << "| " << norm << " |";
    for (long m : sweep.options.micro_batch_sizes) {
      const auto it = by_norm[norm].find(m);
      md << " " << (it == by_norm[norm].end() ? "—" : cell(it->second->*field)) << " |";
    }
    md << "\n";
  }
  md << "\n";
}

}  // namespace

nlohmann::json norm_sweep_json(const NormSweep& sweep) {
  nlohmann::json rows = nlohmann::json::array();
  for (const NormSweepRow& r : sweep.rows) {
    nlohmann::json row = {{"norm", r.norm},
                          {"micro_batch", r.micro_batch},
                          {"micro_batches", r.micro_batches},
                          {"gradient_divergence", statistic_json(r.gradient)},
                          {"loss_divergence", statistic_json(r.loss)},
                          {"forward_passes", r.forward_passes}};
    if (r.has_running) row["running_statistics_divergence"] = statistic_json(r.running);
    rows.push_back(row);
  }
  return {{"model", sweep.model},
          {"total_batch", sweep.options.total_batch},
          {"positions", sweep.options.positions},
          {"seeds", sweep.options.seeds},
          {"seed", sweep.options.seed},
          {"rows", rows}};
}

std::string norm_sweep_markdown(const NormSweep& sweep) {
  std::ostringstream md;
  md << "## Normalizers under accumulation\n\n";
  md << "Float64 reference, one window of " << sweep.options.total_batch << " samples split into N micro-batches of b "
     << "samples; model `" << sweep.model << "`; mean ± standard deviation over " << sweep.options.seeds
     << " seeds. Per-micro-batch BatchNorm normalizes with each micro-batch's statistics and updates its running "
        "statistics N times; the exact-window mode computes statistics and backward coupling over the whole window "
        "first (docs/BATCHNORM.md). Float64 rounding alone is about 1e-16.\n\n";
  table(md, sweep, "Gradient divergence ‖G_acc − G_full‖ / ‖G_full‖", &NormSweepRow::gradient, false);
  table(md, sweep, "Loss divergence |L_acc − L_full| / |L_full|", &NormSweepRow::loss, false);
  table(md, sweep, "Running statistics ‖S_acc − S_full‖ / ‖S_full − S_0‖ (relative to one full-batch update)",
        &NormSweepRow::running, true);
  long exact_passes = 0;
  for (const NormSweepRow& r : sweep.rows)
    if (r.norm == "batchnorm (exact window)" && r.micro_batches > 1) exact_passes = r.forward_passes;
  if (exact_passes > 0)
    md << "Cost of the exact-window mode here: " << exact_passes
       << " passes over the window's data per step instead of 1 — per BatchNorm layer one forward pass for its "
          "statistics and one forward+backward pass for its coupling terms, then the real pass — and no more "
          "memory than one micro-batch.\n\n";
  return md.str();
}

nlohmann::json precision_sweep_json(const PrecisionSweep& sweep) {
  nlohmann::json rows = nlohmann::json::array();
  for (const PrecisionSweepRow& r : sweep.rows)
    rows.push_back({{"accumulate", std::string(dtype_name(r.accumulate))},
                    {"compensated", r.compensated},
                    {"micro_batches", r.micro_batches},
                    {"error", statistic_json(r.error)},
                    {"bound", statistic_json(r.bound)},
                    {"worst_ratio", json_number(r.worst_ratio)},
                    {"gradient_norm_shift", statistic_json(r.norm_shift)}});
  return {{"model", sweep.model}, {"backend", sweep.backend}, {"micro_batch", sweep.options.micro_batch},
          {"seeds", sweep.options.seeds}, {"seed", sweep.options.seed}, {"rows", rows}};
}

std::string precision_sweep_markdown(const PrecisionSweep& sweep) {
  std::ostringstream md;
  md << "## Accumulation precision\n\n";
  md << "Backend `" << sweep.backend << "`, one window of N micro-batches, model `" << sweep.model
     << "`. Each cell: normwise relative error of the accumulated gradient against the float64 full batch, "
        "‖K_acc − R_full‖/‖R_full‖, / the error model's bound on it, ‖bound‖/‖R_full‖ (mean over "
     << sweep.options.seeds << " seeds); the last column is the largest per-element error/bound seen (≤ 1: "
        "within the bound everywhere).\n\n";
  md << "| accumulation buffer |";
  for (long n : sweep.options.micro_batches) md << " N=" << n << " |";
  md << " worst error/bound |\n|---|";
  for (std::size_t i = 0; i <= sweep.options.micro_batches.size(); ++i) md << "---|";
  md << "\n";
  std::map<std::string, std::vector<const PrecisionSweepRow*>> by_variant;
  std::vector<std::string> order;
  for (const PrecisionSweepRow& r : sweep.rows) {
    const std::string name = accumulation_name(r.accumulate, r.compensated);
    if (!by_variant.count(name)) order.push_back(name);
    by_variant[name].push_back(&r);
  }
  for (const std::string& name : order) {
    double worst = 0.0;
    md << "| " << name << " |";
    for (const PrecisionSweepRow* r : by_variant[name]) {
      md << " " << fmt::format("{:.1e} / {:.1e}", r->error.mean, r->bound.mean) << " |";
      worst = std::max(worst, r->worst_ratio);
    }
    md << " " << fmt::format("{:.2f}", worst) << " |\n";
  }
  md << "\nGradient-norm shift |‖K_acc‖ − ‖R_full‖|/‖R_full‖ at the largest N: ";
  bool first = true;
  for (const std::string& name : order) {
    md << (first ? "" : "; ") << name << " " << fmt::format("{:.1e}", by_variant[name].back()->norm_shift.mean);
    first = false;
  }
  md << ".\n\n";
  return md.str();
}

}  // namespace gradeq
