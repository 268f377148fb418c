// measured_memory.h — a scenario's memory measured on a backend: the peak of one
// micro-batch's window, fitted over micro-batch sizes into fixed plus
// per-sample bytes, and the prediction the gate checks the kernel runs'
// peaks against (docs/MEMORY.md).
#pragma once

#include <vector>

#include "harness/core/memory/types.h"
#include "harness/core/scenario.h"
#include "harness/core/training_loop.h"

namespace gradeq {

// The peak of one window of one micro-batch of `samples` samples (the
// scenario's model, data kind and procedure).
double measure_peak(const ScenarioSpec& spec, long samples, Backend& backend, const LoopFactory& loop);
// Those of each of `samples`, fitted; at least two sizes.
MemoryFit measure_memory_fit(const ScenarioSpec& spec, const std::vector<long>& samples, Backend& backend,
                             const LoopFactory& loop);
// The smallest micro-batch the scenario accepts (BatchNorm needs two values
// per channel).
long smallest_micro_batch(const ScenarioSpec& spec);
// Fills m.fit (and m.predicted) from one-micro-batch runs at m.micro_batch
// and about half of it.
void predict_memory(ScenarioMemory& m, const ScenarioSpec& spec, Backend& backend, const LoopFactory& loop);

}  // namespace gradeq
