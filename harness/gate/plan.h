// plan.h — `gradeq plan`: the largest micro-batch that fits a memory
// budget, the number of micro-batches that reaches an effective batch, and
// the proof that this split computes the same update as the batch it
// replaces.
//
//   1. measure the peak of one micro-batch at three sizes and fit fixed +
//      per-sample bytes (harness/core/memory/);
//   2. take the largest micro-batch b whose predicted peak fits the budget
//      less a margin, and N = ceil(E / b) micro-batches: N - 1 of b and the
//      rest last (global-count normalization keeps an uneven last one
//      exact);
//   3. run the scenario with that split through the equivalence checks,
//      and measure its peak against the prediction.
#pragma once

#include <optional>
#include <stdexcept>
#include <vector>

#include "harness/core/equivalence.h"
#include "harness/core/memory/loop_plan.h"
#include "harness/core/measured_memory.h"
#include "harness/core/progress.h"

namespace gradeq {

struct PlanOptions {
  double budget_bytes = 0.0;
  long effective_batch = 0;  // samples per optimizer step
  double margin = 0.1;       // the fraction of the budget kept free
  long ranks = 0;            // > 1: also predict per-rank bytes for data parallelism
  ErrorModel model;
};

// Bytes one data-parallel rank holds (predicted), replicated (DDP) or with
// gradients and optimizer state sharded over the ranks (ZeRO-2 / FSDP's
// SHARD_GRAD_OP): parameters and the accumulation buffer stay whole, the
// reduced gradient and the optimizer state are 1/W.
struct RankBytes {
  long ranks = 0;
  long micro_batch = 0, micro_batches = 0;  // per rank
  double replicated = 0.0, sharded = 0.0;
};

struct MemoryPlan {
  ScenarioSpec spec;                          // with the planned split
  std::vector<std::pair<long, double>> measured;  // (samples, peak) of the fit's runs
  MemoryFit fit;
  MemoryUsage categories;                     // loop_memory at the planned micro-batch, scratch from the fit
  double usable_bytes = 0.0;                  // budget * (1 - margin)
  long micro_batch = 0, micro_batches = 0, last_micro_batch = 0;
  double predicted_peak = 0.0, predicted_full_batch = 0.0;
  std::optional<RankBytes> per_rank;
  ScenarioResult check;                       // the planned split, checked; its memory measured and predicted
  double measured_peak() const { return check.memory.accumulated.peak; }
  double relative_error() const;              // |measured - predicted| / measured
  bool passed() const;                        // equivalence holds and the peak is as predicted
};

// The backend's peaks are not fixed + linear in the micro-batch: no plan can
// be extrapolated from them (a finding about the code under test: exit 1).
class PlanFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws std::invalid_argument (exit 2) for a budget that is not above the
// fixed part plus one micro-batch, an effective batch below 1, a margin
// outside [0, 1).
MemoryPlan make_plan(const ScenarioSpec& spec, const PlanOptions& options, Backend& backend,
                     const ProgressSink& progress);

}  // namespace gradeq
