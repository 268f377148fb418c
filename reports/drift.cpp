// drift.cpp — a report against a baseline report: what grew, changed,
// appeared or went away. Both sides are report.json documents, so the
// comparison is one a reader could redo from the two files.
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "reports/json_number.h"
#include "reports/report.h"

namespace gradeq {
namespace {

// Grown: more than kDriftFactor times the baseline and by at least
// kDriftFloor (a ratio of 1e-4 becoming 3e-4 is not worth a look).
bool grown(double now, double before) {
  if (std::isnan(now) || std::isnan(before)) return std::isnan(now) != std::isnan(before);
  return now > kDriftFactor * before && now - before >= kDriftFloor;
}

using Tensors = std::map<std::pair<std::string, long>, double>;  // (tensor, window) -> worst ratio

Tensors tensors_of(const nlohmann::json& verdict) {
  Tensors out;
  for (const nlohmann::json& t : verdict.value("tensors", nlohmann::json::array()))
    out[{t.value("tensor", ""), t.value("window", 0L)}] = ratio_of(t.value("worst_ratio", nlohmann::json(0.0)));
  return out;
}

}  // namespace

void check_report_document(const nlohmann::json& report, const std::string& option, const std::string& remedy) {
  if (!report.is_object() || report.value("tool", "") != "gradeq")
    throw std::invalid_argument(option + ": not a gradeq report.json");
  const nlohmann::json version = report.value("schema_version", nlohmann::json());
  if (version != nlohmann::json(report_schema_version()))
    throw std::invalid_argument(option + ": report schema version " + version.dump() + ", this gradeq writes " +
                                std::to_string(report_schema_version()) + ": " + remedy);
  for (const char* list : {"scenarios", "properties"})
    if (!report.contains(list) || !report.at(list).is_array())
      throw std::invalid_argument(option + ": no list of " + list);
}

void check_baseline(const nlohmann::json& baseline) {
  check_report_document(baseline, "--baseline", "regenerate the baseline");
}

void check_baseline_scenarios(const std::vector<std::string>& scenarios, const nlohmann::json& baseline) {
  check_baseline(baseline);
  const std::set<std::string> now_names(scenarios.begin(), scenarios.end());
  std::set<std::string> old_names;
  for (const nlohmann::json& s : baseline.at("scenarios")) old_names.insert(s.value("name", ""));
  if (now_names != old_names) {
    std::string only_now, only_old;
    for (const std::string& n : now_names)
      if (!old_names.count(n)) only_now += (only_now.empty() ? "" : ", ") + n;
    for (const std::string& n : old_names)
      if (!now_names.count(n)) only_old += (only_old.empty() ? "" : ", ") + n;
    throw std::invalid_argument("--baseline: the baseline ran other scenarios (only now: " +
                                (only_now.empty() ? std::string("none") : only_now) + "; only in the baseline: " +
                                (only_old.empty() ? std::string("none") : only_old) + ")");
  }
}

nlohmann::json compare_to_baseline(const nlohmann::json& current, const nlohmann::json& baseline) {
  const auto now_scenarios = by_name(current.at("scenarios"), "name");
  const auto old_scenarios = by_name(baseline.at("scenarios"), "name");  // pointers into the documents: no copies
  std::vector<std::string> names;
  for (const auto& [n, s] : now_scenarios) names.push_back(n);
  check_baseline_scenarios(names, baseline);
  nlohmann::json flags = nlohmann::json::array();
  const auto flag = [&](const std::string& kind, const std::string& where, const std::string& what, double before,
                        double now) {
    flags.push_back({{"kind", kind}, {"check", where}, {"what", what}, {"baseline_ratio", json_number(before)},
                     {"ratio", json_number(now)}});
  };
  long compared = 0;
  for (const auto& [name, now_s] : now_scenarios) {
    const nlohmann::json& old_s = *old_scenarios.at(name);
    const auto now_v = by_name(now_s->at("verdicts"), "verdict"), old_v = by_name(old_s.at("verdicts"), "verdict");
    for (const auto& [verdict, v] : now_v) {
      const std::string where = "scenario " + name + ", " + verdict;
      if (!old_v.count(verdict)) {
        flag("new", where, "a verdict the baseline does not have", NAN, ratio_of(v->value("worst_ratio", 0.0)));
        continue;
      }
      const nlohmann::json& o = *old_v.at(verdict);
      if (v->value("status", "") != o.value("status", ""))
        flag("verdict changed", where, o.value("status", "") + " -> " + v->value("status", ""),
             ratio_of(o.value("worst_ratio", 0.0)), ratio_of(v->value("worst_ratio", 0.0)));
      const Tensors now_t = tensors_of(*v), old_t = tensors_of(o);
      for (const auto& [key, ratio] : now_t) {
        const std::string tensor = key.first + " (window " + std::to_string(key.second) + ")";
        const auto it = old_t.find(key);
        ++compared;
        if (it == old_t.end()) {
          flag("new", where, tensor, NAN, ratio);
        } else if (grown(ratio, it->second) && v->value("status", "") != "expected divergence") {
          flag("grown", where, tensor, it->second, ratio);
        }
      }
      for (const auto& [key, ratio] : old_t)
        if (!now_t.count(key))
          flag("missing", where, key.first + " (window " + std::to_string(key.second) + ")", ratio, NAN);
    }
  }
  const auto now_p = by_name(current.at("properties"), "name");
  const auto old_p = by_name(baseline.at("properties"), "name");
  for (const auto& [name, p] : now_p) {
    const std::string where = "property " + name;
    if (!old_p.count(name)) {
      flag("new", where, "a property the baseline did not run", NAN, ratio_of(p->value("worst_ratio", 0.0)));
      continue;
    }
    const nlohmann::json& o = *old_p.at(name);
    ++compared;
    if (p->value("passed", false) != o.value("passed", false) || p->value("ran", true) != o.value("ran", true))
      flag("verdict changed", where,
           std::string(o.value("passed", false) ? "pass" : "FAIL") + " -> " + (p->value("passed", false) ? "pass" : "FAIL"),
           ratio_of(o.value("worst_ratio", 0.0)), ratio_of(p->value("worst_ratio", 0.0)));
    else if (grown(ratio_of(p->value("worst_ratio", 0.0)), ratio_of(o.value("worst_ratio", 0.0))))
      flag("grown", where, "worst err/bound over its cases", ratio_of(o.value("worst_ratio", 0.0)),
           ratio_of(p->value("worst_ratio", 0.0)));
  }
  for (const auto& [name, p] : old_p)
    if (!now_p.count(name)) flag("missing", "property " + name, "a property this run did not run", ratio_of(p->value("worst_ratio", 0.0)), NAN);
  return {{"baseline_started_at", baseline.value("started_at", "")},
          {"baseline_version", baseline.value("version", "")},
          {"compared", compared},
          {"rule", fmt::format("grown: err/bound more than {:g}x the baseline's and by at least {:g}; verdicts that "
                               "changed; checks new or missing",
                               kDriftFactor, kDriftFloor)},
          {"flags", flags}};
}

std::string drift_markdown(const nlohmann::json& drift) {
  std::ostringstream md;
  md << "## Drift against the baseline\n\nBaseline of " << drift.value("baseline_started_at", "") << " (gradeq "
     << drift.value("baseline_version", "") << "); " << drift.value("compared", 0L) << " checks compared; "
     << drift.value("rule", "") << ".\n\n";
  const nlohmann::json& flags = drift.at("flags");
  if (flags.empty()) {
    md << "Nothing drifted.\n\n";
    return md.str();
  }
  md << "| kind | check | what | baseline err/bound | err/bound |\n|---|---|---|---|---|\n";
  for (const nlohmann::json& f : flags)
    md << "| " << f.value("kind", "") << " | " << f.value("check", "") << " | " << f.value("what", "") << " | "
       << f.at("baseline_ratio").dump() << " | " << f.at("ratio").dump() << " |\n";
  md << "\n";
  return md.str();
}

}  // namespace gradeq
