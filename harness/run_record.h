// run_record.h — what a run records after each window, and under which
// names: one schema per scenario (run_schema), built once when the scenario
// is materialized and used by the training loop, the reference run, the
// comparisons, the dump and the report writers.
//
// Names: "grad/<param>" (the window's accumulated gradient as the optimizer
// used it: unscaled, then clipped), "param/<param>" (weights after the
// step), "stats/<buffer>" (BatchNorm running statistics after the window),
// "state/<param>.<name>" (optimizer state: momentum_buffer, exp_avg,
// exp_avg_sq, as PyTorch names them), "state/step" (optimizer steps taken)
// and, with dynamic loss scaling, "state/loss_scale", "state/good_steps",
// "state/skipped". Parameters are "layer<l>.weight" / "layer<l>.bias" for
// the l-th entry of the model's layer list (reference/model.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "harness/memory.h"
#include "reference/model.h"

namespace gradeq {

struct ScenarioSpec;

enum class RecordKind {
  gradient,         // grad/: in the accumulation dtype
  parameter,        // param/: float32 master weights
  statistic,        // stats/: float32 BatchNorm running statistics
  optimizer_state,  // state/<param>.<name>: float32
  counter,          // state/<name>: a scalar the procedure counts
};

enum class Counter { step, loss_scale, good_steps, skipped };

struct RecordEntry {
  std::string name;
  RecordKind kind = RecordKind::parameter;
  long rows = 1, cols = 1;
  std::size_t index = 0;  // parameter (gradient, parameter, optimizer_state) or buffer (statistic)
  int moment = 0;         // optimizer_state: 1 (SGD's momentum buffer, Adam's m) or 2 (Adam's v)
  Counter counter = Counter::step;
};

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
};

struct KernelRun {
  std::vector<KernelWindow> windows;
  // What the run held on the backend at its peak (harness/memory.h); all
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
const ReferenceTensor& find_tensor(const ReferenceWindow& w, const std::string& name);
// nullptr where the window has no such tensor (a skipped window's gradients).
const ReferenceTensor* find_optional(const ReferenceWindow& w, const std::string& name);

}  // namespace gradeq
