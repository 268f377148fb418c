// junit_report.cpp — junit.xml: one test case per scenario and property.
#include <sstream>

#include <fmt/format.h>

#include "reports/report.h"

namespace gradeq {
namespace {

std::string xml_escape(const std::string& s) {
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

void test_case(std::ostringstream& x, const std::string& suite, const std::string& name, double seconds,
               bool passed, const std::string& failure) {
  x << "  <testcase classname=\"gradeq." << suite << "\" name=\"" << xml_escape(name) << "\" time=\""
    << fmt::format("{:.3f}", seconds) << "\"";
  if (passed) {
    x << "/>\n";
    return;
  }
  x << ">\n    <failure message=\"" << xml_escape(failure) << "\">" << xml_escape(failure) << "</failure>\n  </testcase>\n";
}

}  // namespace

std::string report_junit(const CheckReport& r) {
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x << "<testsuite name=\"gradeq\" tests=\"" << r.scenarios.size() + r.properties.size() << "\" failures=\""
    << r.failures() << "\" time=\"" << fmt::format("{:.3f}", r.seconds) << "\" timestamp=\"" << r.started_at << "\">\n";
  for (const ScenarioResult& s : r.scenarios) test_case(x, "scenario", s.spec.name, s.seconds, s.passed(), s.first_failure());
  for (const PropertyRun& p : r.properties) {
    std::string failure = p.message;
    if (!p.counterexample.empty()) failure += " | counterexample: " + p.counterexample;
    if (!p.reproduce.empty()) failure += " | RC_PARAMS=\"" + p.reproduce + "\"";
    test_case(x, "property", p.name, p.seconds, p.passed, failure);
  }
  x << "</testsuite>\n";
  return x.str();
}

}  // namespace gradeq
