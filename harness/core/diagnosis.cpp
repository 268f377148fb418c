// diagnosis.cpp — reading a failing verdict's checks for the bug behind them.
#include "harness/core/diagnosis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace gradeq {
namespace {

// %.<digits>g
std::string number(double v, int digits = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

struct Group {
  std::string run, reference;
  std::map<long, std::vector<const TensorCheck*>> windows;  // checks by window, in order
};

std::string base_name(const std::string& name) {
  for (const char* prefix : {"acc: ", "full: "})
    if (name.starts_with(prefix)) return name.substr(std::string(prefix).size());
  return name;
}

const TensorCheck* named(const std::vector<const TensorCheck*>& checks, const std::string& name) {
  for (const TensorCheck* c : checks)
    if (base_name(c->name) == name) return c;
  return nullptr;
}

bool any_failed(const std::vector<const TensorCheck*>& checks, RecordKind kind) {
  for (const TensorCheck* c : checks)
    if (c->kind == kind && !c->passed()) return true;
  return false;
}

// The run's gradient as a multiple of the reference's, where every gradient
// tensor of the window with a nonzero reference is one: cosine at least
// kFactorCosine, and the factors (the least-squares scale cos |a| / |e|)
// within kFactorSpread of each other. 0 where it is not.
double constant_factor(const std::vector<const TensorCheck*>& checks) {
  double lo = HUGE_VAL, hi = -HUGE_VAL;
  for (const TensorCheck* c : checks) {
    if (c->kind != RecordKind::gradient || c->expected_norm == 0.0) continue;
    if (c->non_finite_actual > 0 || c->unbounded > 0 || !(c->metrics.cosine >= kFactorCosine)) return 0.0;
    const double f = c->metrics.cosine * c->actual_norm / c->expected_norm;
    lo = std::min(lo, f);
    hi = std::max(hi, f);
  }
  if (!(lo <= hi) || !(hi - lo <= kFactorSpread * std::abs(hi))) return 0.0;
  const double f = 0.5 * (lo + hi);
  return std::abs(f - 1.0) >= kFactorAwayFromOne ? f : 0.0;
}

// Whether a parameter's or its optimizer state's check is of a parameter
// the run had no gradient for.
bool of_one_without_gradient(const TensorCheck& c, const std::vector<std::string>& without_gradient) {
  const std::string name = base_name(c.name);
  for (const std::string& p : without_gradient)
    if (name == "param/" + p || name.starts_with("state/" + p + ".")) return true;
  return false;
}

void diagnose_group(const Group& g, const std::vector<std::string>& without_gradient, std::vector<std::string>& out) {
  // A constant factor on the gradient, window by window; consecutive
  // windows with the same factor said once, before the rest.
  std::vector<std::pair<std::vector<long>, double>> factors;
  std::vector<std::string> lines;
  bool lr_said = false, clip_said = false, step_said = false;
  for (const auto& [w, checks] : g.windows) {
    const bool gradient_failed = any_failed(checks, RecordKind::gradient);
    if (gradient_failed) {
      const double f = constant_factor(checks);
      if (f > 0.0) {
        if (!factors.empty() && std::abs(factors.back().second - f) <= kFactorSpread * f) {
          factors.back().first.push_back(w);
        } else {
          factors.push_back({{w}, f});
        }
      }
    }
    const TensorCheck* lr = named(checks, "step/lr");
    if (lr && !lr->passed() && !lr_said) {
      const TensorCheck* step = named(checks, "state/step");
      const std::string which = step ? "step " + std::to_string(static_cast<long>(step->worst_expected) - 1)
                                     : "window " + std::to_string(w);
      lines.push_back(which + " used learning rate " + number(lr->worst_actual) + "; the schedule gives " +
                      number(lr->worst_expected) +
                      " (a scheduler stepped per micro-batch? warmup_steps, total_steps or learning_rate other than "
                      "the run's?)");
      lr_said = true;
    }
    const TensorCheck* norm = named(checks, "clip/norm");
    const TensorCheck* coefficient = named(checks, "clip/coefficient");
    const bool clip_failed = (norm && !norm->passed()) || (coefficient && !coefficient->passed()) ||
                             any_failed(checks, RecordKind::clipped_gradient);
    if (!gradient_failed && clip_failed && !clip_said) {
      std::string what = "window " + std::to_string(w) + ": " + g.run + "'s gradient agrees with " + g.reference +
                         "'s, its clip does not";
      if (norm && coefficient)
        what += ": norm " + number(norm->worst_actual) + " where " + number(norm->worst_expected) + ", coefficient " +
                number(coefficient->worst_actual) + " where " + number(coefficient->worst_expected);
      lines.push_back(what + " (clipped per micro-batch? before the unscale? another max_norm?)");
      clip_said = true;
    }
    bool weights_failed = false;
    for (const TensorCheck* c : checks)
      if ((c->kind == RecordKind::parameter || c->kind == RecordKind::optimizer_state) && !c->passed() &&
          !of_one_without_gradient(*c, without_gradient))
        weights_failed = true;
    if (!gradient_failed && !clip_failed && !(lr && !lr->passed()) && weights_failed && !step_said) {
      lines.push_back("window " + std::to_string(w) +
                      ": the gradient, the learning rate and the clip agree, the weights or the optimizer state do "
                      "not: the optimizer step (weight decay applied per micro-batch? a step per micro-batch? "
                      "weight_decay, betas, eps or momentum other than the run's?)");
      step_said = true;
    }
  }
  for (const auto& [windows, f] : factors) {
    std::string which = "window" + std::string(windows.size() > 1 ? "s " : " ");
    for (std::size_t i = 0; i < windows.size(); ++i) which += (i ? ", " : "") + std::to_string(windows[i]);
    const double octaves = std::log2(f);  // a loss scale is a power of two >= 2
    const bool power_of_two = octaves > 0.5 && std::abs(octaves - std::round(octaves)) < kFactorSpread;
    out.push_back(g.run + " ≈ " + number(f, 4) + " × " + g.reference + " in " + which + " (every gradient; cosine ≥ " +
                  number(kFactorCosine) + "): " +
                  "a normalisation factor (the loss divided by N once too often or too rarely? a normaliser that "
                  "counts padding, one micro-batch's items, or a causal LM's labels before the shift?)" +
                  (power_of_two ? " or, a power of two, a loss scale left in (the gradient taken before "
                                  "GradScaler.unscale_?)"
                                : ""));
  }
  out.insert(out.end(), lines.begin(), lines.end());
}

}  // namespace

std::vector<std::string> diagnose(const std::vector<TensorCheck>& checks, const std::string& run,
                                  const std::string& reference, const std::vector<std::string>& without_gradient) {
  std::map<std::string, Group> groups;  // by prefix
  for (const TensorCheck& c : checks) {
    const std::string prefix = c.name.starts_with("acc: ") ? "acc" : c.name.starts_with("full: ") ? "full" : "";
    Group& g = groups[prefix];
    if (g.run.empty()) {
      g.run = prefix == "acc" ? "K_acc" : prefix == "full" ? "K_full" : run;
      g.reference = prefix == "acc" ? "R_acc" : prefix == "full" ? "R_full" : reference;
    }
    g.windows[c.window].push_back(&c);
  }
  std::vector<std::string> out;
  for (const char* prefix : {"", "acc", "full"})
    if (groups.count(prefix)) diagnose_group(groups.at(prefix), without_gradient, out);
  return out;
}

}  // namespace gradeq
