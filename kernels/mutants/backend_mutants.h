// backend_mutants.h — the catalogued bugs that live in a kernel (docs/BUGS.md):
// each is a ForwardingBackend that wraps the backend under test and breaks
// one op. B7 (overwrite instead of accumulate), B16 (bfloat16 accumulation
// behind a float32 buffer), B28 (the multi-tensor accumulate skipping the
// last tensor), B29-B31 (the embedding backward: lost updates on a
// repeated token, the padding row updated, rows read-modify-written in
// bfloat16), B35 (a chunked head's weight gradient overwritten across
// its row blocks), B19 (unsynchronized concurrent accumulate: the
// real race on the CUDA backend, its lost updates modelled elsewhere). The
// loop's bugs are in harness/core/loop_mutants.h; harness/core/mutants.h lists both.
// A mutant must never be used for anything but the self-test. Depends on
// kernels/ only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace gradeq {

// What every mutant says of its bug, kernel or loop alike.
struct BugInfo {
  std::string id;      // "B7", as in docs/BUGS.md
  std::string bug;     // what is wrong, in a line
  std::string source;  // where it happened in the wild
};

using BackendWrapper = std::function<std::unique_ptr<Backend>(Backend&)>;

struct BackendMutant : BugInfo {
  BackendWrapper wrap;  // the backend under test, broken
};

// B7, B16, B28, B29-B31, B35, attention's B36-B40 and the convolution's B41-B45, for any backend.
std::vector<BackendMutant> single_process_backend_mutants();
// B36-B40, attention's (no causal mask in backward, the scale twice, a
// stale dQ tail, D from a stale output, no key-padding mask): the op
// table's to catch too (tests/test_mutants.cpp).
std::vector<BackendMutant> attention_op_mutants();
// The convolution's (B41-B45): a subset of the list above.
std::vector<BackendMutant> conv_op_mutants();
// B46, max pooling's backward routing to the wrong tie: an op-level
// mutant, not in the list above. Only exact ties can show it, and in a
// model the exact ties before a max pool are ReLU's zeros, whose gradient
// ReLU's backward discards whichever tie gets it (docs/BUGS.md): the op
// table's maxpool entry, on whole numbers, is where it is caught.
std::vector<BackendMutant> pool_op_mutants();
// B19 in the form the backend takes it: the racy kernel on cuda, the
// race's outcome modelled on any other backend.
BackendMutant race_mutant_for(const Backend& backend);

}  // namespace gradeq
