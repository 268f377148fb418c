// suite.cpp — the default scenarios, read from the embedded TOML.
#include "harness/suite.h"

#include "harness/config.h"

namespace gradeq {

const std::vector<ScenarioSpec>& default_scenarios() {
  static const std::vector<ScenarioSpec> suite = parse_scenarios(default_suite_toml(), "default_suite.toml");
  return suite;
}

const ScenarioSpec* find_scenario(const std::vector<ScenarioSpec>& suite, const std::string& name) {
  for (const ScenarioSpec& s : suite)
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace gradeq
