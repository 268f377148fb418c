// suite.cpp — the default scenarios, read from the embedded TOML.
#include "harness/core/suite.h"

#include <stdexcept>

#include "harness/core/config.h"

namespace gradeq {

const std::vector<ScenarioSpec>& default_scenarios() {
  static const std::vector<ScenarioSpec> suite = parse_scenarios(default_suite_toml(), "default_suite.toml");
  return suite;
}

const std::vector<ScenarioSpec>& scale_scenarios() {
  static const std::vector<ScenarioSpec> suite = parse_scenarios(scale_suite_toml(), "scale_suite.toml");
  return suite;
}

const std::vector<ScenarioSpec>& data_parallel_scenarios() {
  static const std::vector<ScenarioSpec> suite =
      parse_scenarios(data_parallel_suite_toml(), "data_parallel_suite.toml");
  return suite;
}

const std::vector<ScenarioSpec>& named_suite(const std::string& name) {
  if (name == "default") return default_scenarios();
  if (name == "scale") return scale_scenarios();
  if (name == "data_parallel") return data_parallel_scenarios();
  throw std::invalid_argument("unknown suite '" + name + "' (default, scale or data_parallel)");
}

const ScenarioSpec* find_scenario(const std::vector<ScenarioSpec>& suite, const std::string& name) {
  for (const ScenarioSpec& s : suite)
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace gradeq
