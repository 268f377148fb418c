// own_gate.cpp — the whole gradeq command line, with the "own" backend
// registered: `own_gate check --backend own` is the gate on it.
#include <memory>

#include <gradeq/gradeq.h>

#include "own_backend.h"

int main(int argc, char** argv) {
  gradeq::register_backend("own", "the host backend with its own weight-gradient kernel",
                           [] { return std::make_unique<own::OwnBackend>(); });
  return gradeq::run_cli(argc, argv);
}
