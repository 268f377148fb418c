// suite.h — the embedded default suite: named scenarios a user recognizes,
// each chosen to expose a class of accumulation bugs (see shared/BUGS.md:
// uneven item counts, partial windows, several windows, wide ranges).
#pragma once

#include <string>
#include <vector>

#include "harness/scenario.h"

namespace gradeq {

std::vector<ScenarioSpec> default_scenarios();
// nullptr if no scenario has that name.
const ScenarioSpec* find_scenario(const std::vector<ScenarioSpec>& suite, const std::string& name);

}  // namespace gradeq
