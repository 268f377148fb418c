// data_parallel_mutants.h — the catalogued bugs of data parallelism
// (docs/BUGS.md: B2, B12, B20-B23): each is a small subclass of
// DataParallelLoop (harness/core/data_parallel.h) that overrides one step.
// Part of gradeq_mutants, not of gradeq_harness. A mutant must never be used
// for anything but the self-test.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/core/data_parallel.h"

namespace gradeq {

// A data-parallel bug of docs/BUGS.md, as a loop over a communicator.
struct DataParallelMutant {
  std::string id, bug, source;
  ShardMode mode;  // the mode it lives in
  std::function<std::unique_ptr<TrainingLoop>(Backend&, Communicator&)> make;
};
// B2, B12, B20, B21, B22 (replicated) and B23 (sharded).
const std::vector<DataParallelMutant>& data_parallel_mutants();

}  // namespace gradeq
