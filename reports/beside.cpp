// beside.cpp — a report beside another run's report: each tensor's worst
// err/bound in both, for the checks both ran. Where drift (drift.cpp)
// looks for what grew against an earlier run of the same kernels, this
// sets two kernels side by side: a backend against another, or the host
// kernels in a worst-case summation order (cpu-adversarial) against their
// natural order. Both sides are report.json documents.
#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "reports/json_number.h"
#include "reports/report.h"

namespace gradeq {
namespace {

// The kernel-correctness tensors lead the tables: they hold the kernels'
// own errors against the reference, where a summation order shows.
constexpr const char* kKernelVerdict = "kernel correctness";
constexpr std::size_t kRowsShown = 30;

std::string ratio_cell(const nlohmann::json& j) {
  const double r = ratio_of(j);
  return std::isfinite(r) ? fmt::format("{:.3g}", r) : j.dump();
}

std::string quotient_cell(const nlohmann::json& here, const nlohmann::json& there) {
  const double a = ratio_of(here), b = ratio_of(there);
  if (!(b > 0.0) || !std::isfinite(a) || !std::isfinite(b)) return "";
  return fmt::format("{:.3g}", a / b);
}

}  // namespace

void check_beside(const nlohmann::json& other) {
  check_report_document(other, "--beside", "run it again with this gradeq");
}

nlohmann::json compare_beside(const nlohmann::json& current, const nlohmann::json& other) {
  check_beside(other);
  const auto theirs = by_name(other.at("scenarios"), "name");
  nlohmann::json tensors = nlohmann::json::array(), properties = nlohmann::json::array();
  long only_here = 0;
  for (const nlohmann::json& s : current.at("scenarios")) {
    const std::string name = s.value("name", "");
    const auto found = theirs.find(name);
    if (found == theirs.end()) {
      ++only_here;
      continue;
    }
    const auto their_verdicts = by_name(found->second->at("verdicts"), "verdict");
    for (const nlohmann::json& v : s.at("verdicts")) {
      const std::string verdict = v.value("verdict", "");
      const auto tv = their_verdicts.find(verdict);
      if (tv == their_verdicts.end()) continue;
      std::map<std::pair<std::string, long>, nlohmann::json> their_ratios;  // (tensor, window) -> worst ratio
      for (const nlohmann::json& t : tv->second->value("tensors", nlohmann::json::array()))
        their_ratios[{t.value("tensor", ""), t.value("window", 0L)}] = t.value("worst_ratio", nlohmann::json(0.0));
      for (const nlohmann::json& t : v.value("tensors", nlohmann::json::array())) {
        const auto tt = their_ratios.find({t.value("tensor", ""), t.value("window", 0L)});
        if (tt == their_ratios.end()) continue;
        tensors.push_back({{"scenario", name},
                           {"verdict", verdict},
                           {"tensor", t.value("tensor", "")},
                           {"window", t.value("window", 0L)},
                           {"ratio", t.value("worst_ratio", nlohmann::json(0.0))},
                           {"other_ratio", tt->second}});
      }
    }
  }
  const auto their_properties = by_name(other.at("properties"), "name");
  for (const nlohmann::json& p : current.at("properties")) {
    const auto tp = their_properties.find(p.value("name", ""));
    if (tp == their_properties.end() || !p.value("ran", false) || !tp->second->value("ran", false)) continue;
    properties.push_back({{"name", p.value("name", "")},
                          {"ratio", p.value("worst_ratio", nlohmann::json(0.0))},
                          {"other_ratio", tp->second->value("worst_ratio", nlohmann::json(0.0))}});
  }
  if (tensors.empty() && properties.empty())
    throw std::invalid_argument("--beside: the other report ran none of this run's scenarios and properties");
  return {{"backend", current.value("backend", "")},
          {"other_backend", other.value("backend", "")},
          {"other_started_at", other.value("started_at", "")},
          {"other_version", other.value("version", "")},
          {"scenarios_only_here", only_here},
          {"tensors", tensors},
          {"properties", properties}};
}

std::vector<std::vector<std::string>> beside_table(const nlohmann::json& beside) {
  std::vector<const nlohmann::json*> rows;
  for (const nlohmann::json& t : beside.at("tensors"))
    if (t.value("verdict", "") == kKernelVerdict) rows.push_back(&t);
  // Largest here first; NaN (never a pass) at the top.
  const auto key = [](const nlohmann::json* t) {
    const double r = ratio_of(t->at("ratio"));
    return std::isnan(r) ? HUGE_VAL : r;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const nlohmann::json* a, const nlohmann::json* b) { return key(a) > key(b); });
  std::vector<std::vector<std::string>> table{{"scenario", "tensor", "window", "err/bound, " + beside.value("backend", ""),
                                               "err/bound, " + beside.value("other_backend", ""),
                                               beside.value("backend", "") + " / " + beside.value("other_backend", "")}};
  for (std::size_t i = 0; i < rows.size() && i < kRowsShown; ++i) {
    const nlohmann::json& t = *rows[i];
    table.push_back({t.value("scenario", ""), t.value("tensor", ""), std::to_string(t.value("window", 0L)),
                     ratio_cell(t.at("ratio")), ratio_cell(t.at("other_ratio")),
                     quotient_cell(t.at("ratio"), t.at("other_ratio"))});
  }
  return table;
}

std::string beside_caption(const nlohmann::json& beside) {
  long kernel = 0;
  for (const nlohmann::json& t : beside.at("tensors")) kernel += t.value("verdict", "") == kKernelVerdict;
  return fmt::format(
      "Each tensor's worst err/bound against the reference in this run (backend {}) and in the other run (backend {}, "
      "{}), for the kernel-correctness checks both ran, largest first: {} of {} shown; report.json's \"beside\" lists "
      "every tensor of every check.{}",
      beside.value("backend", ""), beside.value("other_backend", ""), beside.value("other_started_at", ""),
      std::min<long>(kernel, static_cast<long>(kRowsShown)), kernel,
      beside.value("scenarios_only_here", 0L) > 0
          ? fmt::format(" {} of this run's scenarios are not in the other report.", beside.value("scenarios_only_here", 0L))
          : std::string());
}

std::string beside_markdown(const nlohmann::json& beside) {
  std::ostringstream md;
  md << "## Beside backend " << beside.value("other_backend", "") << "\n\n" << beside_caption(beside) << "\n\n";
  md << markdown_table(beside_table(beside));
  if (!beside.at("properties").empty()) {
    md << "\n| property | worst err/bound, " << beside.value("backend", "") << " | worst err/bound, "
       << beside.value("other_backend", "") << " |\n|---|---|---|\n";
    for (const nlohmann::json& p : beside.at("properties"))
      md << "| " << p.value("name", "") << " | " << ratio_cell(p.at("ratio")) << " | " << ratio_cell(p.at("other_ratio"))
         << " |\n";
  }
  md << "\n";
  return md.str();
}

}  // namespace gradeq
