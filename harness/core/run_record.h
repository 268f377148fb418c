// run_record.h — what a run records after each window, and under which
// names: one schema per scenario (run_schema), built once when the scenario
// is materialized and used by the training loop, the reference run, the
// comparisons, the dump and the report writers.
//
// Names: "grad/<param>" (the window's gradient as accumulation made it:
// after the last micro-batch and the unscale, before any clip),
// "clipped_grad/<param>" (where the procedure clips: the gradient the
// optimizer stepped with), "clip/norm" and "clip/coefficient" (the global
// norm the clip measured and the factor it applied, at most 1), "step/lr"
// (the learning rate the step used), "param/<param>" (weights after the
// step), "stats/<buffer>" (BatchNorm running statistics after the window),
// "state/<param>.<name>" (optimizer state: momentum_buffer, exp_avg,
// exp_avg_sq, as PyTorch names them), "state/step" (optimizer steps taken)
// and, with dynamic loss scaling, "state/loss_scale", "state/good_steps",
// "state/skipped". Parameters are "layer<l>.weight" / "layer<l>.bias" for
// the l-th entry of the model's layer list (reference/model.h). A frozen
// parameter has no gradient and no optimizer state; a skipped window (the
// loss scaler found an overflow) has no gradient, clip or learning rate.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "harness/core/memory/types.h"
#include "reference/model.h"

namespace gradeq {

struct ScenarioSpec;

enum class RecordKind {
  gradient,          // grad/: in the accumulation dtype, before the clip
  clipped_gradient,  // clipped_grad/: in the accumulation dtype
  step_value,        // clip/norm, clip/coefficient (float32), step/lr (float64): scalars of the step
  parameter,         // param/: float32 master weights
  statistic,         // stats/: float32 BatchNorm running statistics
  optimizer_state,   // state/<param>.<name>: float32
  counter,           // state/<name>: a scalar the procedure counts
};

enum class Counter { step, loss_scale, good_steps, skipped };
enum class StepValue { learning_rate, clip_norm, clip_coefficient };

// What only a step that happened records: a skipped window has none of it.
inline bool recorded_by_step(RecordKind k) {
  return k == RecordKind::gradient || k == RecordKind::clipped_gradient || k == RecordKind::step_value;
}
// Stored in the accumulation dtype (the others in float32, but for the
// learning rate: a float64 hyper-parameter).
inline bool is_gradient(RecordKind k) { return k == RecordKind::gradient || k == RecordKind::clipped_gradient; }

struct RecordEntry {
  std::string name;
  RecordKind kind = RecordKind::parameter;
  long rows = 1, cols = 1;
  std::size_t index = 0;  // parameter (gradient, parameter, optimizer_state) or buffer (statistic)
  int moment = 0;         // optimizer_state: 1 (SGD's momentum buffer, Adam's m) or 2 (Adam's v)
  Counter counter = Counter::step;
  StepValue step_value = StepValue::learning_rate;
};

inline bool is_float64(const RecordEntry& e) {
  return e.kind == RecordKind::step_value && e.step_value == StepValue::learning_rate;
}

struct RunSchema {
  std::vector<ref::ParameterInfo> parameters;  // the model's parameters, in order
  std::vector<ref::ParameterInfo> buffers;     // BatchNorm running statistics
  std::vector<RecordEntry> entries;            // what each window records, in order
};

RunSchema run_schema(const ScenarioSpec& spec);

struct RunTensor {
  std::string name;
  RecordKind kind = RecordKind::parameter;
  long rows = 0, cols = 0;
  std::vector<double> values;
};

struct KernelWindow {
  std::vector<RunTensor> tensors;  // the schema's entries in order
  double loss = 0.0;     // normalized loss of the window
  bool skipped = false;  // dynamic loss scaling skipped the step
  // What the run fed, per micro-batch: the indices of the window's samples
  // (0 .. samples - 1, -1 for a sample that is not the window's), in the
  // order fed. Judged against the window: every sample exactly once, in
  // micro-batches of the declared split.
  std::vector<std::vector<long>> fed;
  // Trained parameters that had no gradient after the window (a layer the
  // loss never reached): their grad/ entries are missing from `tensors`.
  std::vector<std::string> missing_gradients;
};

struct KernelRun {
  std::vector<KernelWindow> windows;
  // What the run held on the backend at its peak (harness/core/memory/types.h); all
  // zero for a run not executed here (tensors imported from elsewhere).
  MemoryUsage memory;
};

struct ReferenceTensor {
  std::string name;
  RecordKind kind = RecordKind::parameter;
  long rows = 0, cols = 0;
  std::vector<double> value, kernel_bound, reference_bound;
};

struct ReferenceWindow {
  std::vector<ReferenceTensor> tensors;  // the schema's entries in order; a skipped window has no gradients
  double loss = 0.0;
  bool skipped = false;
};

struct ReferenceRun {
  std::vector<ReferenceWindow> windows;
};

const RunTensor& find_tensor(const KernelWindow& w, const std::string& name);
const RunTensor* find_optional(const KernelWindow& w, const std::string& name);
const ReferenceTensor& find_tensor(const ReferenceWindow& w, const std::string& name);
// nullptr where the window has no such tensor (a skipped window's gradients).
const ReferenceTensor* find_optional(const ReferenceWindow& w, const std::string& name);

}  // namespace gradeq
