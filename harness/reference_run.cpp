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

ReferenceWindow to_window(const ref::ModelSpec& spec, const ref::WindowResult<Bounded>& r) {
  ReferenceWindow w;
  w.loss = r.gradients.loss.value;
  record(w.tensors, "grad/", r.gradients.grads, ref::parameter_layout(spec));
  record(w.tensors, "param/", r.after.params, ref::parameter_layout(spec));
  record(w.tensors, "stats/", r.after.buffers, ref::buffer_layout(spec));
  return w;
}

// The kernel's state as exact inputs: its float32 values are what the
// next window starts from, so they carry no error of their own.
ref::TrainingState<Bounded> state_from(const ref::ModelSpec& spec, const KernelWindow& k, long step) {
  ref::TrainingState<Bounded> s;
  auto take = [&](const std::string& prefix, const std::vector<ref::ParameterInfo>& layout, ref::Tensors<Bounded>& to) {
    for (const ref::ParameterInfo& p : layout) {
      const RunTensor& t = find_tensor(k, prefix + p.name);
      ref::Matrix<Bounded> m(t.rows, t.cols);
      for (long i = 0; i < m.size(); ++i) m.data()[i] = Bounded(t.values[i]);
      to.push_back(std::move(m));
    }
  };
  take("param/", ref::parameter_layout(spec), s.params);
  take("stats/", ref::buffer_layout(spec), s.buffers);
  s.step = step;
  return s;
}

}  // namespace

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
  const auto results = ref::run_trajectory(spec, procedure_of(scenario), ref::initial_state<Bounded>(spec, scenario.initial_params),
                                           scenario.windows, split);
  ReferenceRun out;
  for (const auto& r : results) out.windows.push_back(to_window(spec, r));
  return out;
}

ReferenceWindow run_reference_window(const Scenario& scenario, std::size_t w, const std::vector<long>& micro_batches,
                                     const KernelWindow* before, const ErrorModel& model) {
  if (w >= scenario.windows.size()) throw std::out_of_range("run_reference_window: no such window");
  if ((w == 0) != (before == nullptr))
    throw std::invalid_argument("run_reference_window: window 0 starts from the initial state, later ones from a run's");
  const ref::RoundingModel rounding = rounding_model_for(scenario.spec.precision, model);
  const ref::ScopedRoundingModel scope(rounding);
  const ref::ModelSpec& spec = scenario.spec.model;
  ref::TrainingState<Bounded> start = before ? state_from(spec, *before, static_cast<long>(w))
                                             : ref::initial_state<Bounded>(spec, scenario.initial_params);
  return to_window(spec, ref::run_window(spec, procedure_of(scenario), std::move(start), scenario.windows[w], micro_batches));
}

ReferenceRun run_reference_from(const Scenario& scenario, const Split& split, const KernelRun& kernel,
                                const ErrorModel& model) {
  if (kernel.windows.size() != split.size()) throw std::invalid_argument("run_reference_from: kernel run and split disagree");
  ReferenceRun out;
  for (std::size_t w = 0; w < split.size(); ++w)
    out.windows.push_back(run_reference_window(scenario, w, split[w], w ? &kernel.windows[w - 1] : nullptr, model));
  return out;
}

}  // namespace gradeq
