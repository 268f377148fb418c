// selftest_report.cpp — the self-test as JSON and Markdown: the kill
// matrix with shrunk counterexamples, B16's threshold, the campaign.
#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "reports/json_number.h"
#include "reports/report.h"

namespace gradeq {
namespace {

std::string ratio_text(double v) { return std::isfinite(v) ? fmt::format("{:.3g}", v) : "∞ (non-finite or bitwise)"; }

}  // namespace

nlohmann::json selftest_json(const SelfTestReport& r) {
  nlohmann::json correct = nlohmann::json::array();
  for (const PropertyRun& p : r.correct)
    correct.push_back({{"property", p.name}, {"passed", p.passed}, {"cases", p.cases},
                       {"worst_ratio", json_number(p.worst_ratio)}, {"message", p.message}});
  nlohmann::json cells = nlohmann::json::array();
  for (const KillCell& c : r.cells)
    cells.push_back({{"mutant", c.mutant},
                     {"property", c.property},
                     {"caught", c.caught},
                     {"cases_before_failure", c.run.cases},
                     {"worst_ratio", json_number(c.run.worst_ratio)},
                     {"counterexample", c.run.counterexample},
                     {"counterexample_samples", c.counterexample_samples},
                     {"counterexample_parameters", c.counterexample_parameters},
                     {"message", c.run.message},
                     {"reproduce", c.run.reproduce},
                     {"detecting_ratio", json_number(c.detecting_ratio)}});
  nlohmann::json mutants = nlohmann::json::array();
  for (const MutantSummary& m : r.mutants)
    mutants.push_back({{"id", m.id}, {"bug", m.bug}, {"source", m.source}, {"caught_by", m.caught_by}});
  nlohmann::json b16 = nlohmann::json::array();
  for (const B16Threshold& t : r.b16) {
    nlohmann::json points = nlohmann::json::array();
    for (const ThresholdPoint& p : t.points)
      points.push_back({{"micro_batches", p.micro_batches}, {"caught", p.caught}, {"ratio", json_number(p.ratio)}});
    b16.push_back({{"compute", std::string(dtype_name(t.compute))}, {"first_caught", t.first_caught}, {"points", points}});
  }
  nlohmann::json out = {{"backend", r.backend},       {"suite", r.suite}, {"ranks", r.ranks}, {"seed", r.seed},       {"cases", r.cases}, {"size", size_tier_name(r.size)},
                        {"passed", r.passed()},       {"survivors", r.survivors()},
                        {"correct", correct},         {"kill_matrix", cells}, {"mutants", mutants},
                        {"b16_threshold", b16},       {"seconds", r.seconds},
                        {"scenarios_only", r.scenarios_only}, {"correct_scenarios_ratio", json_number(r.correct_scenarios_ratio())}};
  if (r.scenarios_only) {
    nlohmann::json detections = nlohmann::json::array();
    for (const MutantSummary& m : r.mutants) {
      const MutantDetection d = mutant_detection(r, m.id);
      detections.push_back({{"mutant", m.id},
                            {"caught", d.caught},
                            {"smallest_detecting_ratio", json_number(d.caught ? d.smallest_detecting_ratio : 0.0)},
                            {"separation", json_number(d.caught ? d.separation : 0.0)},
                            {"worst_passing_ratio", json_number(d.worst_passing_ratio)}});
    }
    out["detections"] = detections;
  }
  if (r.campaign) {
    const Campaign& c = *r.campaign;
    nlohmann::json cm = nlohmann::json::array();
    for (const CampaignMutant& m : c.mutants)
      cm.push_back({{"id", m.id},
                    {"cases", m.cases},
                    {"detected", m.detected},
                    {"marginal", m.marginal},
                    {"smallest_detecting_ratio", json_number(m.smallest_detecting_ratio)},
                    {"smallest_case", m.smallest_case},
                    {"separation", json_number(m.separation)},
                    {"float32_cases", m.float32_cases},
                    {"float32_detected", m.float32_detected},
                    {"float32_marginal", m.float32_marginal},
                    {"float32_smallest_detecting_ratio", json_number(m.float32_smallest_ratio)},
                    {"float32_smallest_case", m.float32_smallest_case},
                    {"float32_separation", json_number(m.float32_separation)}});
    nlohmann::json edges = nlohmann::json::array();
    for (double e : c.bin_edges) edges.push_back(json_number(e));
    out["campaign"] = {{"cases", c.cases},
                       {"false_alarms", c.false_alarms},
                       {"false_alarm_cases", c.false_alarm_cases},
                       {"discarded", c.discarded},
                       {"worst_ratio", json_number(c.worst_ratio)},
                       {"calibrated", c.calibrated()},
                       {"separation_goal", kSeparationGoal},
                       {"worst_case", c.worst_case},
                       {"worst_property", c.worst_property},
                       {"histogram_edges", edges},
                       {"histogram", c.histogram},
                       {"mutants", cm},
                       {"seconds", c.seconds}};
  }
  return out;
}

std::string selftest_markdown(const SelfTestReport& r) {
  std::ostringstream md;
  const bool data_parallel = r.suite == "data_parallel";
  md << "# gradeq self-test\n\n";
  if (data_parallel) {
    md << "**" << (r.passed() ? "PASS" : "FAIL") << "** — backend `" << r.backend << "`, data_parallel suite on "
       << r.ranks << " ranks, seed " << r.seed << ", " << fmt::format("{:.1f}", r.seconds) << " s. Each named "
       << "check runs the suite's scenarios, replicated and sharded, on correct code (it must pass) and with one "
          "mutant per data-parallel bug (docs/BUGS.md; harness/core/data_parallel_mutants.cpp): each mutant must be caught by "
          "at least one check.\n\n";
  } else {
    md << "**" << (r.passed() ? "PASS" : "FAIL") << "** — backend `" << r.backend << "`, seed " << r.seed << ", up to "
       << r.cases << " cases per property and mutant, " << size_tier_name(r.size) << " shapes, " << fmt::format("{:.1f}", r.seconds) << " s. Every property "
       << "that runs the backend is run against correct code (it must pass) and against one mutant per catalogued "
          "bug (docs/BUGS.md; kernels/mutants): each mutant must be caught by at least one property, with a "
          "shrunk counterexample.\n\n";
    if (r.scenarios_only)
      md << "Scenarios only (`selftest --config " << r.suite << "`): each scenario runs on correct code (it must "
            "pass) and against every mutant, every scenario for each; a cell is caught where the scenario fails. "
            "Each mutant's detecting err/bound is the smallest among the scenarios that caught it, and its "
            "separation that ÷ the worst err/bound of correct code over the scenarios ("
         << fmt::format("{:.3g}", r.correct_scenarios_ratio()) << ").\n\n";
    if (r.suite == "scale")
      md << "The scale suite's named scenarios run too, as one check (`" << kScenariosCheck
         << "`): each must pass on correct code, and a mutant is caught by the first one it fails (its name is "
            "the counterexample). A mutant they do not catch may still be exercised, within the bounds: "
            "selftest.json gives each cell's worst error/bound.\n\n";
  }
  const std::vector<std::string> survivors = r.survivors();
  if (!survivors.empty()) {
    md << "**Surviving mutants:**";
    for (const std::string& s : survivors) md << " " << s;
    md << "\n\n";
  }
  md << "## Correct code\n\n| property | cases | worst error/bound | result |\n|---|---|---|---|\n";
  for (const PropertyRun& p : r.correct)
    md << "| " << p.name << " | " << p.cases << (p.name == kScenariosCheck ? " scenarios" : "") << " | "
       << fmt::format("{:.3g}", p.worst_ratio) << " | "
       << (p.passed ? "pass" : "**FAIL** " + p.message) << " |\n";
  md << "\n## Kill matrix\n\nA cell shows ✗ where the " << (data_parallel ? "check" : "property")
     << " caught the mutant (" << (data_parallel ? "its first failure" : "its shrunk counterexample")
     << " below), · where it did not (it does not exercise the bug).\n\n| mutant | bug |";
  std::vector<std::string> properties;
  if (r.scenarios_only) {
    for (const KillCell& c : r.cells)
      if (std::find(properties.begin(), properties.end(), c.property) == properties.end()) properties.push_back(c.property);
  } else {
    for (const PropertyRun& p : r.correct) properties.push_back(p.name);
  }
  for (const std::string& p : properties) md << " " << p << " |";
  md << "\n|---|---|";
  for (std::size_t i = 0; i < properties.size(); ++i) md << "---|";
  md << "\n";
  for (const MutantSummary& m : r.mutants) {
    md << "| " << m.id << " | " << m.bug << " |";
    for (const std::string& p : properties) {
      bool caught = false;
      for (const KillCell& c : r.cells)
        if (c.mutant == m.id && c.property == p) caught = c.caught;
      md << (caught ? " ✗ |" : " · |");
    }
    md << "\n";
  }
  if (data_parallel) {
    md << "\n## Failures\n\nFor each mutant, the first failure each check that caught it reported.\n\n";
    for (const MutantSummary& m : r.mutants) {
      md << "- **" << m.id << "** (" << m.source << "):" << (m.caught_by.empty() ? " **not caught**" : "") << "\n";
      for (const KillCell& c : r.cells)
        if (c.mutant == m.id && c.caught)
          md << "  - " << c.property << ": " << c.run.message
             << (c.run.counterexample.empty() ? "" : " (shrunk case: `" + c.run.counterexample + "`)") << "\n";
    }
    return md.str();
  }
  if (r.scenarios_only) {
    md << "\n## Detection\n\nWhere no scenario caught a mutant, the last column gives the largest err/bound it "
          "left: equal to correct code's, the scenarios do not exercise the bug at all.\n\n| mutant | caught | "
          "smallest detecting err/bound | separation | largest err/bound where not caught |\n|---|---|---|---|---|\n";
    for (const MutantSummary& m : r.mutants) {
      const MutantDetection d = mutant_detection(r, m.id);
      md << "| " << m.id << " | " << (d.caught ? "yes" : "**no**") << " | "
         << (d.caught ? ratio_text(d.smallest_detecting_ratio) : "—") << " | " << (d.caught ? ratio_text(d.separation) : "—")
         << " | " << (d.caught ? "—" : fmt::format("{:.3g}", d.worst_passing_ratio)) << " |\n";
    }
    return md.str();
  }
  md << "\n## Counterexamples\n\nFor each mutant, the smallest shrunk counterexample among the properties that caught "
        "it (size: samples in the split, parameters in the model).\n\n";
  for (const MutantSummary& m : r.mutants) {
    const KillCell* best = nullptr;
    for (const KillCell& c : r.cells)
      if (c.mutant == m.id && c.caught &&
          (!best || c.counterexample_samples * c.counterexample_parameters <
                        best->counterexample_samples * best->counterexample_parameters))
        best = &c;
    md << "- **" << m.id << "** (" << m.source << "): ";
    if (!best) {
      md << "**not caught**\n";
      continue;
    }
    md << "caught by " << m.caught_by.size() << " propert" << (m.caught_by.size() == 1 ? "y" : "ies") << "; by "
       << best->property << " after " << best->run.cases << " passing case(s), shrunk to " << best->counterexample_samples
       << " samples, " << best->counterexample_parameters << " parameters: `" << best->run.counterexample << "` — "
       << best->run.message << "\n";
  }
  md << "\n## B16: from which N a bfloat16 buffer behind a float32 declaration is caught\n\n";
  for (const B16Threshold& t : r.b16) {
    md << "- compute " << dtype_name(t.compute) << ": ";
    if (t.first_caught < 0) {
      md << "not caught up to N = " << t.points.back().micro_batches;
    } else {
      md << "caught from N = " << t.first_caught;
    }
    md << " (error/bound by N:";
    for (const ThresholdPoint& p : t.points) md << " " << p.micro_batches << "→" << fmt::format("{:.2g}", p.ratio);
    md << ")\n";
  }
  if (r.campaign) {
    const Campaign& c = *r.campaign;
    md << "\n## Calibration campaign\n\n";
    md << c.cases << " random cases on correct code (round-robin over the properties above), " << c.discarded
       << " discarded as vacuous or ill-conditioned, **" << c.false_alarms << " false alarms**; worst error/bound "
       << fmt::format("{:.6f}", c.worst_ratio) << " (" << c.worst_property << ": `" << c.worst_case << "`), "
       << (c.calibrated() ? "within" : "**above**") << " the error model's 1/F = 0.5; "
       << fmt::format("{:.0f}", c.seconds) << " s.\n\n";
    md << "Histogram of error/bound for correct code:\n\n| error/bound | cases |\n|---|---|\n";
    for (std::size_t b = 0; b < c.histogram.size(); ++b)
      md << "| [" << fmt::format("{:g}", c.bin_edges[b]) << ", "
         << (std::isfinite(c.bin_edges[b + 1]) ? fmt::format("{:g}", c.bin_edges[b + 1]) : "∞") << ") | "
         << c.histogram[b] << " |\n";
    md << "\nMutants on the first cases of the same stream: the smallest error/bound among the cases that detected "
          "each, and the separation = that ÷ the worst error/bound of correct code; first over the cases that "
          "compute and accumulate in float32, then over all (with bfloat16 / float16 the legitimate error of "
          "correct code is itself the size of small bugs, so detections there can sit just above 1). Marginal: "
          "detections whose separation is below "
       << fmt::format("{:g}", kSeparationGoal) << ".\n\n";
    md << "| mutant | float32 cases: detected | marginal | smallest detecting error/bound | separation | all cases: "
          "detected | marginal | smallest | separation |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const CampaignMutant& m : c.mutants)
      md << "| " << m.id << " | " << m.float32_detected << "/" << m.float32_cases << " | " << m.float32_marginal
         << " | " << (m.float32_detected ? ratio_text(m.float32_smallest_ratio) : "—") << " | "
         << (m.float32_detected ? ratio_text(m.float32_separation) : "—") << " | " << m.detected << "/" << m.cases
         << " | " << m.marginal << " | " << (m.detected ? ratio_text(m.smallest_detecting_ratio) : "—") << " | "
         << (m.detected ? ratio_text(m.separation) : "—") << " |\n";
    if (!c.false_alarm_cases.empty()) {
      md << "\nFalse alarms:\n\n";
      for (const std::string& f : c.false_alarm_cases) md << "- " << f << "\n";
    }
  }
  return md.str();
}

}  // namespace gradeq
