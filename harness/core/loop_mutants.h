// loop_mutants.h — the catalogued bugs that live in the training loop
// (docs/BUGS.md: B1, B3-B6, B8-B11, B13-B15, B17, B18, B24, B25): each is a
// subclass of TrainingLoop that overrides one step. The kernel bugs are in
// kernels/mutants; harness/core/mutants.h lists both. A mutant must never be
// used for anything but the self-test.
#pragma once

#include <string>
#include <vector>

#include "harness/core/training_loop.h"
#include "kernels/mutants/backend_mutants.h"

namespace gradeq {

struct LoopMutant : BugInfo {
  LoopFactory loop;
};

const std::vector<LoopMutant>& loop_mutants();

}  // namespace gradeq
