// junit_report.cpp — junit.xml: one test case per scenario and property.
#include <sstream>

#include <fmt/format.h>

#include "reports/report.h"

namespace gradeq {

std::string markup_escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// A failing case is a <failure>; one the error model could not decide
// (inconclusive, or a property that could not decide enough of its cases)
// is an <error>: nothing was shown wrong, nothing was shown right.
enum class Outcome { pass, failure, error, skipped };

void test_case(std::ostringstream& x, const std::string& classname, const std::string& name, double seconds,
               Outcome outcome, const std::string& message) {
  x << "  <testcase classname=\"" << markup_escaped(classname) << "\" name=\"" << markup_escaped(name) << "\" time=\""
    << fmt::format("{:.3f}", seconds) << "\"";
  if (outcome == Outcome::pass) {
    x << "/>\n";
    return;
  }
  if (outcome == Outcome::skipped) {
    x << ">\n    <skipped message=\"" << markup_escaped(message) << "\"/>\n  </testcase>\n";
    return;
  }
  const char* tag = outcome == Outcome::failure ? "failure" : "error";
  x << ">\n    <" << tag << " message=\"" << markup_escaped(message) << "\">" << markup_escaped(message) << "</" << tag
    << ">\n  </testcase>\n";
}

Outcome outcome_of(const ScenarioResult& s) {
  if (s.passed()) return Outcome::pass;
  for (const Verdict* v : {&s.math, &s.kernel, &s.accumulation})
    if (v->status == Status::fail) return Outcome::failure;
  return s.inconclusive() ? Outcome::error : Outcome::failure;
}

Outcome outcome_of(const PropertyRun& p) {
  if (!p.ran) return Outcome::skipped;
  if (p.passed) return Outcome::pass;
  return p.counterexample_spec ? Outcome::failure : Outcome::error;
}

}  // namespace

std::string report_junit(const CheckReport& r, const nlohmann::json* drift, bool fail_on_drift) {
  // The suite is named after the backend, so cpu and cuda runs of one
  // pipeline do not collide.
  const std::string suite = "gradeq." + r.backend;
  long failures = 0, errors = 0, skipped = 0;
  const auto count = [&](Outcome o) {
    failures += o == Outcome::failure;
    errors += o == Outcome::error;
    skipped += o == Outcome::skipped;
  };
  for (const ScenarioResult& s : r.scenarios) count(outcome_of(s));
  for (const PropertyRun& p : r.properties) count(outcome_of(p));
  // Drift against a baseline: one test case, failing only when asked to.
  std::string drift_message;
  Outcome drift_outcome = Outcome::pass;
  if (drift) {
    const nlohmann::json& flags = drift->at("flags");
    for (const nlohmann::json& f : flags)
      drift_message += (drift_message.empty() ? "" : " | ") + f.value("kind", "") + ": " + f.value("check", "") + ": " +
                       f.value("what", "");
    if (!flags.empty() && fail_on_drift) drift_outcome = Outcome::failure;
    count(drift_outcome);
  }
  const std::size_t tests = r.scenarios.size() + r.properties.size() + (drift ? 1 : 0);
  const std::string totals = fmt::format("tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3f}\"", tests,
                                         failures, errors, skipped, r.seconds);
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x << "<testsuites name=\"gradeq\" " << totals << ">\n";
  x << "<testsuite name=\"" << markup_escaped(suite) << "\" " << totals << " timestamp=\"" << r.started_at << "\">\n";
  // What reproduces the run.
  x << "  <properties>\n";
  for (const auto& [name, value] : {std::pair<std::string, std::string>{"backend", r.backend},
                                    {"seed", std::to_string(r.seed)},
                                    {"cases_per_property", std::to_string(r.cases)},
                                    {"size", size_tier_name(r.size)},
                                    {"error_model", error_model_name(r.model)},
                                    {"version", r.version}})
    x << "    <property name=\"" << name << "\" value=\"" << markup_escaped(value) << "\"/>\n";
  x << "  </properties>\n";
  for (const ScenarioResult& s : r.scenarios)
    test_case(x, suite + ".scenario", s.spec.name, s.seconds, outcome_of(s), s.first_failure());
  for (const PropertyRun& p : r.properties) {
    std::string message = p.message;
    if (!p.counterexample.empty()) message += " | counterexample: " + p.counterexample;
    if (!p.reproduce.empty()) message += " | replay: " + replay_command(r, p);
    test_case(x, suite + ".property", p.name, p.seconds, outcome_of(p), message);
  }
  if (drift) {
    if (drift_outcome == Outcome::pass && !drift_message.empty()) {
      // Reported, not failed: the flags go to the test case's output.
      x << "  <testcase classname=\"" << markup_escaped(suite) << ".drift\" name=\"baseline\" time=\"0.000\">\n"
        << "    <system-out>" << markup_escaped(drift_message) << "</system-out>\n  </testcase>\n";
    } else {
      test_case(x, suite + ".drift", "baseline", 0.0, drift_outcome, drift_message);
    }
  }
  x << "</testsuite>\n</testsuites>\n";
  return x.str();
}

}  // namespace gradeq
