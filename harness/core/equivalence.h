// equivalence.h — one scenario, four runs, three verdicts (docs/ARCHITECTURE.md):
//
//   R_full, R_acc  float64 reference, full batch and accumulated (same split)
//   K_full, K_acc  backend under test, full batch and accumulated
//
//   math equivalence          R_acc vs R_full   float64 rounding only, or a
//                                               named expected divergence
//   kernel correctness        K_full vs R_full and K_acc vs R_acc
//   accumulation equivalence  K_acc vs R_full   the headline check
//
// Math equivalence compares whole trajectories from the initial state. The
// kernel verdicts compare every window, with the reference started from the
// exact state the kernel run reached before that window: each step is
// checked where the kernel stands, so error bounds do not compound over
// windows, and a bug in any window shows in that window.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/core/compare.h"
#include "harness/core/progress.h"
#include "harness/core/reference_run.h"
#include "harness/core/scenario.h"
#include "harness/core/tolerance.h"
#include "harness/core/training_loop.h"

namespace gradeq {

enum class VerdictKind { math_equivalence, kernel_correctness, accumulation_equivalence };
enum class Status {
  pass,
  fail,
  expected_divergence,  // a named expectation (BatchNorm): reported, never a failure
  inconclusive,         // the error model gives no finite bound for some element
                        // (ill-conditioned case): neither pass nor a kernel failure
};

std::string verdict_name(VerdictKind k);
std::string status_name(Status s);

struct Verdict {
  VerdictKind kind = VerdictKind::math_equivalence;
  Status status = Status::pass;
  std::vector<TensorCheck> checks;
  // What the run under test did that no tensor shows and that makes the
  // verdict fail whatever the tensors say: a sample of the window fed
  // twice, never, or from outside it; micro-batches other than the
  // declared split; a trained parameter left without a gradient
  // (procedure_problems).
  std::vector<std::string> problems;
  double worst_ratio = 0.0;
  std::string note;  // why it failed, or why divergence is expected
  // Where it failed: what its tensors say about the bug (harness/core/diagnosis.h).
  std::vector<std::string> diagnosis;
};

struct Runs {
  ReferenceRun r_full, r_acc;          // whole trajectories from the initial state
  KernelRun k_full, k_acc;             // k_full may be empty (an external run given without it)
  // Window by window from the kernel runs' states: R_full from K_full's,
  // R_acc and R_full from K_acc's.
  ReferenceRun r_full_at_k_full, r_acc_at_k_acc, r_full_at_k_acc;
};

struct ScenarioResult {
  ScenarioSpec spec;
  RunSchema schema;
  Verdict math, kernel, accumulation;
  // Every reference gradient is exactly zero: the comparison could not fail
  // for the right reason, so the scenario counts as failed.
  bool vacuous = false;
  double seconds = 0.0;
  // The kernel runs' peak memory; predicted (and judged) where the gate
  // measured the fit (harness/core/measured_memory.h). Not a verdict: a scenario whose
  // peak is off its prediction fails with its own reason.
  ScenarioMemory memory;

  // Passed: no verdict failed or was inconclusive, and not vacuous.
  bool passed() const;
  bool inconclusive() const;
  std::string first_failure() const;  // empty when passed
  // Every failing verdict (and vacuity, memory): its note and diagnosis,
  // one line each.
  std::vector<std::string> failures() const;

 private:
  std::string vacuity_failure() const;
  std::string memory_failure() const;
};

// What `run` fed and recorded, against the windows of `split` it was
// given: each window's samples fed exactly once each, in micro-batches of
// the split's sizes, and every trained parameter with a gradient. One
// line per window that is wrong, naming the samples and micro-batches.
std::vector<std::string> procedure_problems(const Split& split, const KernelRun& run);

// Whether R_acc = R_full in exact arithmetic: the model treats samples
// independently, or its BatchNorm sees whole windows (one micro-batch per
// window). Otherwise divergence is the named expectation "expected
// divergence" (docs/BUGS.md: yolov5 1630, PyTorch 46516).
bool expects_equivalence(const ScenarioSpec& spec);

// Per element, the bound each verdict compares with (harness/core/tolerance.h):
// kernel correctness against the reference from the kernel's own state,
// accumulation equivalence of K_acc against R_full from K_acc's state.
// The verdicts and the window-set writer use the same ones.
std::vector<double> kernel_bounds(const ReferenceTensor& expected);
std::vector<double> accumulation_bounds(const ReferenceTensor& acc, const ReferenceTensor& full);

// The five reference runs for the kernel runs in `runs` (k_full may be
// empty: then r_full_at_k_full is too).
// progress, where given, hears which runs are under way, window by window
// and micro-batch by micro-batch.
void add_reference_runs(const Scenario& scenario, Runs& runs, const ErrorModel& model, const ProgressSink& progress = {});
Runs execute(const Scenario& scenario, Backend& backend, const LoopFactory& loop, const ErrorModel& model,
             const ProgressSink& progress = {});
ScenarioResult judge(const Scenario& scenario, const Runs& runs);
// explain: where it fails, also test the known-wrong procedures
// (explain_failure); the gate's named scenarios do, properties do not.
ScenarioResult check_scenario(const ScenarioSpec& spec, Backend& backend, const LoopFactory& loop,
                              const ErrorModel& model, const ProgressSink& progress = {}, bool explain = false);

// Where accumulation equivalence fails on the gradient without a problem in
// what the run fed: whether K_acc is what a known wrong procedure computes,
// judged like kernel correctness against that procedure's reference, window
// by window from K_acc's state. Today one: each micro-batch normalised by
// its own item count and 1/N (equal_split: the mean of per-micro-batch
// means, docs/BUGS.md B1), tested where a window's micro-batches hold
// different item counts (elsewhere it is the correct procedure). A match
// heads the verdict's diagnosis. One more reference run, on failure only.
void explain_failure(const Scenario& scenario, const Runs& runs, const ErrorModel& model, ScenarioResult& result);

}  // namespace gradeq
