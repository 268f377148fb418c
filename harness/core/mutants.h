// mutants.h — the catalogue of deliberately wrong variants, one per bug of
// docs/BUGS.md that one process can show: the loop's (harness/core/loop_mutants.h)
// and the kernels' (kernels/mutants/backend_mutants.h), in the catalogue's
// order. The self-test (`gradeq selftest`) shows that some property catches
// every one of them. A mutant must never be used for anything else.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/core/equivalence.h"
#include "kernels/backend.h"
#include "kernels/mutants/backend_mutants.h"

namespace gradeq {

struct Mutant : BugInfo {
  BackendWrapper wrap_backend;  // wraps the backend under test (nullptr: the backend as is)
  LoopFactory loop;             // the training loop (nullptr: the correct one)
};

// The single-process mutants (B1, B3-B11, B13-B18, B24, B25), for any backend.
const std::vector<Mutant>& mutants();
// Those, plus B19 (unsynchronized concurrent accumulate): the real racy
// kernel on the CUDA backend, the race's lost-update outcome modelled on
// any other backend.
std::vector<Mutant> mutants_for(const Backend& backend);
const Mutant* find_mutant(const std::string& id);

// A backend with a mutant applied, and the loop that goes with it.
struct MutantRig {
  std::unique_ptr<Backend> wrapped;
  Backend* backend = nullptr;
  LoopFactory loop;

  MutantRig(const Mutant& m, Backend& base);
};

}  // namespace gradeq
