// run_record.cpp — the schema of a run's records.
#include "harness/core/run_record.h"

#include <stdexcept>

#include "harness/core/scenario.h"

namespace gradeq {

RunSchema run_schema(const ScenarioSpec& s) {
  RunSchema schema;
  schema.parameters = ref::parameter_layout(s.model);
  schema.buffers = ref::buffer_layout(s.model);
  auto add = [&](std::string name, RecordKind kind, long rows, long cols, std::size_t index) {
    RecordEntry e;
    e.name = std::move(name);
    e.kind = kind;
    e.rows = rows;
    e.cols = cols;
    e.index = index;
    schema.entries.push_back(std::move(e));
    return &schema.entries.back();
  };
  const std::vector<ref::ParameterInfo>& params = schema.parameters;
  const ref::ProcedureConfig& procedure = s.procedure;
  const bool clip = procedure.clip.enabled;
  for (std::size_t p = 0; p < params.size(); ++p)
    if (!procedure.is_frozen(p)) add("grad/" + params[p].name, RecordKind::gradient, params[p].rows, params[p].cols, p);
  for (std::size_t p = 0; p < params.size(); ++p)
    if (clip && !procedure.is_frozen(p))
      add("clipped_grad/" + params[p].name, RecordKind::clipped_gradient, params[p].rows, params[p].cols, p);
  auto step_value = [&](const char* name, StepValue v) { add(name, RecordKind::step_value, 1, 1, 0)->step_value = v; };
  if (clip) {
    step_value("clip/norm", StepValue::clip_norm);
    step_value("clip/coefficient", StepValue::clip_coefficient);
  }
  step_value("step/lr", StepValue::learning_rate);
  for (std::size_t p = 0; p < params.size(); ++p)
    add("param/" + params[p].name, RecordKind::parameter, params[p].rows, params[p].cols, p);
  for (std::size_t b = 0; b < schema.buffers.size(); ++b)
    add("stats/" + schema.buffers[b].name, RecordKind::statistic, schema.buffers[b].rows, schema.buffers[b].cols, b);
  const ref::OptimizerSpec& o = s.procedure.optimizer;
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (procedure.is_frozen(p)) continue;
    auto state = [&](const char* suffix, int moment) {
      add("state/" + params[p].name + suffix, RecordKind::optimizer_state, params[p].rows, params[p].cols, p)->moment =
          moment;
    };
    if (o.kind == ref::OptimizerKind::sgd) {
      if (o.momentum != 0.0) state(".momentum_buffer", 1);
    } else {
      state(".exp_avg", 1);
      state(".exp_avg_sq", 2);
    }
  }
  auto counter = [&](const char* name, Counter c) { add(std::string("state/") + name, RecordKind::counter, 1, 1, 0)->counter = c; };
  counter("step", Counter::step);
  if (s.procedure.loss_scaling.dynamic) {
    counter("loss_scale", Counter::loss_scale);
    counter("good_steps", Counter::good_steps);
    counter("skipped", Counter::skipped);
  }
  return schema;
}

const RunTensor* find_optional(const KernelWindow& w, const std::string& name) {
  for (const RunTensor& t : w.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const RunTensor& find_tensor(const KernelWindow& w, const std::string& name) {
  if (const RunTensor* t = find_optional(w, name)) return *t;
  throw std::logic_error("kernel run has no tensor " + name);
}

const ReferenceTensor* find_optional(const ReferenceWindow& w, const std::string& name) {
  for (const ReferenceTensor& t : w.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const ReferenceTensor& find_tensor(const ReferenceWindow& w, const std::string& name) {
  if (const ReferenceTensor* t = find_optional(w, name)) return *t;
  throw std::logic_error("reference run has no tensor " + name);
}

}  // namespace gradeq
