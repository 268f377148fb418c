// training_report.cpp — the normalizer training sweep (`gradeq sweep norms
// --windows K`) as JSON and as Markdown.
#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "reports/json_number.h"
#include "reports/report.h"

namespace gradeq {
namespace {

nlohmann::json numbers(const std::vector<double>& xs) {
  nlohmann::json out = nlohmann::json::array();
  for (double x : xs) out.push_back(json_number(x));
  return out;
}

nlohmann::json points_json(const std::vector<TrainingPoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const TrainingPoint& p : points)
    out.push_back({{"train_loss", json_number(p.train_loss)},
                   {"held_out_loss", json_number(p.held_out_loss)},
                   {"held_out_accuracy", json_number(p.held_out_accuracy)}});
  return out;
}

std::string verdict(const NormTrainingCurve& c) {
  if (c.expected_divergence) return "expected divergence";
  return c.within_reach() ? "within reach" : "**LEFT ITS BOUNDS' REACH**";
}

}  // namespace

nlohmann::json norm_training_json(const NormTraining& t) {
  nlohmann::json one_batch = nlohmann::json::array();
  for (std::size_t i = 0; i < t.norms.size(); ++i) one_batch.push_back({{"norm", t.norms[i]}, {"points", points_json(t.one_batch[i])}});
  nlohmann::json curves = nlohmann::json::array();
  for (const NormTrainingCurve& c : t.curves) {
    nlohmann::json j = {{"norm", c.norm},
                        {"micro_batch", c.micro_batch},
                        {"micro_batches", c.micro_batches},
                        {"expected_divergence", c.expected_divergence},
                        {"within_reach", c.within_reach()},
                        {"distance", numbers(c.distance)},
                        {"worst_ratio", numbers(c.worst_ratio)},
                        {"accumulated", points_json(c.accumulated)}};
    if (!c.running_drift.empty()) j["running_drift"] = numbers(c.running_drift);
    curves.push_back(std::move(j));
  }
  return {{"study", "norm_training"},
          {"model", t.model},
          {"task", t.task},
          {"windows", t.options.windows},
          {"effective_batch", t.options.effective_batch},
          {"held_out", t.options.held_out},
          {"seed", t.options.seed},
          {"seconds", json_number(t.seconds)},
          {"passed", t.passed()},
          {"one_batch", one_batch},
          {"curves", curves}};
}

std::string norm_training_markdown(const NormTraining& t) {
  std::ostringstream md;
  md << "## Normalizers over a training run\n\n";
  md << "Float64 reference with its bounds; model `" << t.model << "`; task: " << t.task << ". Each normalizer trains "
     << t.options.windows << " windows from the same initial weights as one batch of " << t.options.effective_batch
     << " and accumulated over N micro-batches of b. Distance: ‖θ_acc − θ_full‖ / ‖θ_full − θ_0‖ after the last "
        "window. Worst err/bound: the largest |θ_acc − θ_full| over every parameter and window, against the two "
        "runs' float64 bounds; at most 1 is within reach. Held-out figures in evaluation mode (BatchNorm with its "
        "running statistics), after the last window, accumulated / one batch. Running drift: ‖S_acc − S_full‖ / "
        "‖S_full − S_0‖. "
     << fmt::format("{:.0f} s.", t.seconds) << "\n\n";
  md << "| normalizer | b (N) | distance | worst err/bound | verdict | train loss | held-out loss | held-out accuracy | running drift |\n";
  md << "|---|---|---|---|---|---|---|---|---|\n";
  for (const NormTrainingCurve& c : t.curves) {
    std::size_t n = 0;
    while (n < t.norms.size() && t.norms[n] != c.norm) ++n;
    const TrainingPoint& a = c.accumulated.back();
    const TrainingPoint& f = t.one_batch.at(n).back();
    const double worst = *std::max_element(c.worst_ratio.begin(), c.worst_ratio.end());
    md << fmt::format("| {} | {} ({}) | {:.1e} | {:.2e} | {} | {:.3f} / {:.3f} | {:.3f} / {:.3f} | {:.1f} % / {:.1f} % | {} |\n",
                      c.norm, c.micro_batch, c.micro_batches, c.distance.back(), worst, verdict(c), a.train_loss,
                      f.train_loss, a.held_out_loss, f.held_out_loss, 100.0 * a.held_out_accuracy,
                      100.0 * f.held_out_accuracy,
                      c.running_drift.empty() ? std::string("—") : fmt::format("{:.2f}", c.running_drift.back()));
  }
  md << "\n" << (t.passed() ? "Every normalizer that treats samples independently stayed within its bounds' reach."
                            : "FAILED: a normalizer that treats samples independently left its bounds' reach.")
     << "\n";
  return md.str();
}

}  // namespace gradeq
