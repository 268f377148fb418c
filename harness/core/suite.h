// suite.h — the embedded default suite: named scenarios a user recognizes,
// each chosen to expose a class of accumulation bugs (see docs/BUGS.md:
// uneven item counts, partial windows, several windows, wide ranges). The
// suite is data: harness/core/default_suite.toml, embedded at build time and read
// by the config reader (harness/core/config.h) that reads a user's file.
#pragma once

#include <string>
#include <vector>

#include "harness/core/scenario.h"

namespace gradeq {

// The text of harness/core/default_suite.toml (generated source).
const char* default_suite_toml();
// The default suite, parsed and validated once.
const std::vector<ScenarioSpec>& default_scenarios();
// The scale suite (harness/core/scale_suite.toml): tile and reduction boundaries.
const char* scale_suite_toml();
const std::vector<ScenarioSpec>& scale_scenarios();
// The data-parallel suite (harness/core/data_parallel_suite.toml): each split is
// one rank's; data_parallel_spec (harness/core/data_parallel.h) makes the
// window of W ranks.
const char* data_parallel_suite_toml();
const std::vector<ScenarioSpec>& data_parallel_scenarios();
// "default", "scale" or "data_parallel"; throws std::invalid_argument for another name.
const std::vector<ScenarioSpec>& named_suite(const std::string& name);
// nullptr if no scenario has that name.
const ScenarioSpec* find_scenario(const std::vector<ScenarioSpec>& suite, const std::string& name);

}  // namespace gradeq
