// reference_run.h — runs the float64 reference procedure (T = Bounded) and
// returns, for every tensor a kernel run records, its value and the two
// bounds propagated with it (kernel error, float64 error).
//
// Two ways: the whole trajectory from the scenario's initial state (for
// math equivalence, a property of the procedure alone), and one window
// starting from the exact state a kernel run reached before it (for kernel
// correctness and accumulation equivalence: each step is checked where the
// kernel stands, so bounds do not compound over windows).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/progress.h"
#include "harness/core/run_record.h"
#include "harness/core/scenario.h"
#include "harness/core/tolerance.h"

namespace gradeq {

// status, where given, hears "window 1/2, micro-batch 7/16" as the run goes.
ReferenceRun run_reference(const Scenario& scenario, const Split& split, const ErrorModel& model,
                           const ProgressSink& status = {});

// Window w with the given micro-batches, from the state `before` left
// (nullptr: the scenario's initial state, which must be the case for w = 0).
// rule: the loss scaler's decision (reference/procedure.h, SkipRule).
ReferenceWindow run_reference_window(const Scenario& scenario, std::size_t w, const std::vector<long>& micro_batches,
                                     const KernelWindow* before, const ErrorModel& model, ref::SkipRule rule = {},
                                     const ProgressSink& status = {});

// Window by window, each from the state the kernel run reached before it.
// The kernel's loss-scaler decision is followed where overflow is possible
// but not certain, or always (impose_skips): a full-batch reference started
// from an accumulated run's state must see the same decision to be
// comparable, since an accumulation buffer can overflow on a partial sum
// where the full batch does not.
// own: the reference's own run over the same split, when already computed.
// Its first window starts from the same state; without dynamic loss scaling
// the kernel's decision does not enter it, so it is reused, not recomputed.
ReferenceRun run_reference_from(const Scenario& scenario, const Split& split, const KernelRun& kernel,
                                const ErrorModel& model, bool impose_skips = false, const ReferenceRun* own = nullptr,
                                const ProgressSink& status = {});

}  // namespace gradeq
