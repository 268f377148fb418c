// reference_run.cpp — the reference procedure with T = Bounded.
#include "harness/reference_run.h"

#include <stdexcept>

namespace gradeq {
namespace {

using ref::Bounded;

ref::ProcedureConfig procedure_of(const Scenario& s) {
  ref::ProcedureConfig config = s.spec.procedure;
  config.compute_copy = s.spec.precision.compute != DType::f32;
  return config;
}

void record(std::vector<ReferenceTensor>& out, const std::string& prefix, const ref::Tensors<Bounded>& ts,
            const std::vector<ref::ParameterInfo>& names) {
  for (std::size_t p = 0; p < ts.size(); ++p) {
    ReferenceTensor t{prefix + names[p].name, ts[p].rows(), ts[p].cols(), {}, {}, {}};
    for (long i = 0; i < ts[p].size(); ++i) {
      t.value.push_back(ts[p].data()[i].value);
      t.kernel_bound.push_back(ts[p].data()[i].kernel);
      t.reference_bound.push_back(ts[p].data()[i].reference);
    }
    out.push_back(std::move(t));
  }
}

ref::Matrix<Bounded> scalar(double v) { return ref::Matrix<Bounded>::Constant(1, 1, Bounded::with_bounds(v, 0.0, 0.0)); }

ReferenceWindow to_window(const ScenarioSpec& s, const ref::WindowResult<Bounded>& r) {
  const ref::ModelSpec& spec = s.model;
  const std::vector<ref::ParameterInfo> layout = ref::parameter_layout(spec);
  ReferenceWindow w;
  w.loss = r.gradients.loss.value;
  w.skipped = r.skipped;
  // A skipped window's gradient overflowed: there is nothing to compare.
  if (!r.skipped) record(w.tensors, "grad/", r.gradients.grads, layout);
  record(w.tensors, "param/", r.after.params, layout);
  record(w.tensors, "stats/", r.after.buffers, ref::buffer_layout(spec));
  for (const OptimizerStateInfo& o : optimizer_state_layout(s)) {
    const ref::Tensors<Bounded>& from = o.second_moment ? r.after.optimizer_b : r.after.optimizer_a;
    record(w.tensors, "state/", {from[o.parameter]}, {{o.name, 0, 0, 0}});
  }
  record(w.tensors, "state/", {scalar(static_cast<double>(r.after.step))}, {{"step", 0, 1, 1}});
  if (s.procedure.loss_scaling.dynamic) {
    record(w.tensors, "state/", {scalar(r.after.loss_scale)}, {{"loss_scale", 0, 1, 1}});
    record(w.tensors, "state/", {scalar(static_cast<double>(r.after.good_steps))}, {{"good_steps", 0, 1, 1}});
    record(w.tensors, "state/", {scalar(r.skipped ? 1.0 : 0.0)}, {{"skipped", 0, 1, 1}});
  }
  return w;
}

ref::Matrix<Bounded> exact_matrix(const RunTensor& t) {
  ref::Matrix<Bounded> m(t.rows, t.cols);
  for (long i = 0; i < m.size(); ++i) m.data()[i] = Bounded::with_bounds(t.values[i], 0.0, 0.0);
  return m;
}

// The kernel's state as exact inputs: its float32 values are what the
// next window starts from, so they carry no error of their own.
ref::TrainingState<Bounded> state_from(const ScenarioSpec& s, const ref::ProcedureConfig& config,
                                       const ref::Tensors<double>& initial_params, const KernelWindow& k) {
  const ref::ModelSpec& spec = s.model;
  ref::TrainingState<Bounded> state = ref::initial_state<Bounded>(spec, config, initial_params);
  const std::vector<ref::ParameterInfo> layout = ref::parameter_layout(spec), buffers = ref::buffer_layout(spec);
  for (std::size_t p = 0; p < layout.size(); ++p) state.params[p] = exact_matrix(find_tensor(k, "param/" + layout[p].name));
  for (std::size_t b = 0; b < buffers.size(); ++b) state.buffers[b] = exact_matrix(find_tensor(k, "stats/" + buffers[b].name));
  for (const OptimizerStateInfo& o : optimizer_state_layout(s))
    (o.second_moment ? state.optimizer_b : state.optimizer_a)[o.parameter] = exact_matrix(find_tensor(k, "state/" + o.name));
  state.step = static_cast<long>(find_tensor(k, "state/step").values[0]);
  if (s.procedure.loss_scaling.dynamic) {
    state.loss_scale = find_tensor(k, "state/loss_scale").values[0];
    state.good_steps = static_cast<long>(find_tensor(k, "state/good_steps").values[0]);
  }
  return state;
}

}  // namespace

std::vector<OptimizerStateInfo> optimizer_state_layout(const ScenarioSpec& s) {
  std::vector<OptimizerStateInfo> out;
  const ref::OptimizerSpec& o = s.procedure.optimizer;
  const std::vector<ref::ParameterInfo> layout = ref::parameter_layout(s.model);
  for (std::size_t p = 0; p < layout.size(); ++p) {
    if (o.kind == ref::OptimizerKind::sgd) {
      if (o.momentum != 0.0) out.push_back({layout[p].name + ".momentum_buffer", p, false});
    } else {
      out.push_back({layout[p].name + ".exp_avg", p, false});
      out.push_back({layout[p].name + ".exp_avg_sq", p, true});
    }
  }
  return out;
}

const RunTensor& find_tensor(const KernelWindow& w, const std::string& name) {
  for (const RunTensor& t : w.tensors)
    if (t.name == name) return t;
  throw std::logic_error("kernel run has no tensor " + name);
}

const ReferenceTensor& find_tensor(const ReferenceWindow& w, const std::string& name) {
  for (const ReferenceTensor& t : w.tensors)
    if (t.name == name) return t;
  throw std::logic_error("reference run has no tensor " + name);
}

ReferenceRun run_reference(const Scenario& scenario, const Split& split, const ErrorModel& model) {
  if (split.size() != scenario.windows.size()) throw std::invalid_argument("run_reference: split and data disagree");
  const ref::RoundingModel rounding = rounding_model_for(scenario.spec.precision, model);
  const ref::ScopedRoundingModel scope(rounding);
  const ref::ModelSpec& spec = scenario.spec.model;
  const ref::ProcedureConfig config = procedure_of(scenario);
  const auto results = ref::run_trajectory(spec, config, ref::initial_state<Bounded>(spec, config, scenario.initial_params),
                                           scenario.windows, split);
  ReferenceRun out;
  for (const auto& r : results) out.windows.push_back(to_window(scenario.spec, r));
  return out;
}

ReferenceWindow run_reference_window(const Scenario& scenario, std::size_t w, const std::vector<long>& micro_batches,
                                     const KernelWindow* before, const ErrorModel& model, ref::SkipRule rule) {
  if (w >= scenario.windows.size()) throw std::out_of_range("run_reference_window: no such window");
  if ((w == 0) != (before == nullptr))
    throw std::invalid_argument("run_reference_window: window 0 starts from the initial state, later ones from a run's");
  const ref::RoundingModel rounding = rounding_model_for(scenario.spec.precision, model);
  const ref::ScopedRoundingModel scope(rounding);
  const ref::ModelSpec& spec = scenario.spec.model;
  const ref::ProcedureConfig config = procedure_of(scenario);
  ref::TrainingState<Bounded> start = before ? state_from(scenario.spec, config, scenario.initial_params, *before)
                                             : ref::initial_state<Bounded>(spec, config, scenario.initial_params);
  return to_window(scenario.spec, ref::run_window(spec, config, std::move(start), scenario.windows[w], micro_batches,
                                                  rule));
}

ReferenceRun run_reference_from(const Scenario& scenario, const Split& split, const KernelRun& kernel,
                                const ErrorModel& model, bool impose_skips) {
  if (kernel.windows.size() != split.size()) throw std::invalid_argument("run_reference_from: kernel run and split disagree");
  ReferenceRun out;
  for (std::size_t w = 0; w < split.size(); ++w)
    out.windows.push_back(run_reference_window(scenario, w, split[w], w ? &kernel.windows[w - 1] : nullptr, model,
                                               ref::SkipRule{kernel.windows[w].skipped, impose_skips}));
  return out;
}

}  // namespace gradeq
