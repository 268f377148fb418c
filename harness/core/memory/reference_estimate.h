// reference_estimate.h — the float64 reference's memory: its peak estimated
// from a scenario's shapes before anything is allocated, the memory the
// machine has available, and the fit of a scenario to a limit (its
// reference runs in turn, its passes in slices) or its refusal
// (docs/MEMORY.md; the estimate's measurements: docs/PERFORMANCE.md §5).
#pragma once

#include "harness/core/scenario.h"

namespace gradeq {

// What checking the scenario will hold at its peak, from its shapes alone
// (before anything is allocated): the reference's bounded tensors of the
// largest window (the full-batch pass holds all of its rows, or one slice
// of them with reference_slice_samples, plus the sums kept across slices)
// and of its largest micro-batch, their GEMM temporaries, the
// parameter-sized state of two reference runs at once (one, with
// reference_runs_in_turn) and every
// window's records of it, the kernel's float32 tensors and the process
// itself. An upper estimate, to refuse a scenario that cannot fit before
// it starts: 1.1-1.8x the peak RSS measured on the scale suite and on
// language-model blocks up to widths 768/3072 (docs/PERFORMANCE.md §5).
double estimated_peak_bytes(const ScenarioSpec& spec);

// What /proc/meminfo says is available now (MemAvailable), in bytes; 0
// where it cannot be read.
double available_memory_bytes();

// std::invalid_argument, with the estimate, for a scenario whose estimated
// peak memory (estimated_peak_bytes) exceeds the limit (0: no limit).
// Where both reference runs at once would not fit but one at a time would,
// they go in turn (spec.reference_runs_in_turn): the same results, in up
// to twice the reference's time. Where even that would not fit, passes
// over more samples than fit go in slices (spec.reference_slice_samples:
// the largest micro-batch's samples, halved until it fits; not through
// BatchNorm): the same results up to float64 summation order.
void fit_to_memory(ScenarioSpec& spec, double max_memory_bytes);

}  // namespace gradeq
