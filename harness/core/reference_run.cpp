// reference_run.cpp — the reference procedure with T = Bounded.
#include "harness/core/reference_run.h"

#include <stdexcept>
#include <string>

namespace gradeq {
namespace {

using ref::Bounded;

ref::ProcedureConfig procedure_of(const Scenario& s) {
  ref::ProcedureConfig config = s.spec.procedure;
  config.compute_copy = s.spec.precision.compute != DType::f32;
  config.slice_samples = s.spec.reference_slice_samples;
  return config;
}

ReferenceTensor tensor_of(const RecordEntry& e, const ref::Matrix<Bounded>& m) {
  ReferenceTensor t{e.name, e.kind, m.rows(), m.cols(), {}, {}, {}};
  for (long i = 0; i < m.size(); ++i) {
    t.value.push_back(m.data()[i].value);
    t.kernel_bound.push_back(m.data()[i].kernel_bound);
    t.reference_bound.push_back(m.data()[i].reference);
  }
  return t;
}

ref::Matrix<Bounded> scalar(double v, double kernel_bound = 0.0) {
  return ref::Matrix<Bounded>::Constant(1, 1, Bounded::with_bounds(v, kernel_bound, 0.0));
}

double counter_value(Counter c, const ref::WindowResult<Bounded>& r) {
  switch (c) {
    case Counter::step: return static_cast<double>(r.after.step);
    case Counter::loss_scale: return r.after.loss_scale;
    case Counter::good_steps: return static_cast<double>(r.after.good_steps);
    case Counter::skipped: break;
  }
  return r.skipped ? 1.0 : 0.0;
}

ReferenceWindow to_window(const RunSchema& schema, const ref::WindowResult<Bounded>& r) {
  ReferenceWindow w;
  w.loss = r.gradients.loss.value;
  w.skipped = r.skipped;
  for (const RecordEntry& e : schema.entries) {
    // A skipped window's gradient overflowed and it took no step: there is
    // nothing to compare.
    if (r.skipped && recorded_by_step(e.kind)) continue;
    switch (e.kind) {
      case RecordKind::gradient: w.tensors.push_back(tensor_of(e, r.gradients.grads[e.index])); break;
      case RecordKind::clipped_gradient: w.tensors.push_back(tensor_of(e, r.step.clipped[e.index])); break;
      case RecordKind::step_value:
        switch (e.step_value) {
          case StepValue::learning_rate:
            w.tensors.push_back(tensor_of(e, scalar(r.step.learning_rate, r.step.learning_rate_bound)));
            break;
          case StepValue::clip_norm:
            w.tensors.push_back(tensor_of(e, ref::Matrix<Bounded>::Constant(1, 1, r.step.clip_norm)));
            break;
          case StepValue::clip_coefficient:
            w.tensors.push_back(tensor_of(e, ref::Matrix<Bounded>::Constant(1, 1, r.step.clip_coefficient)));
            break;
        }
        break;
      case RecordKind::parameter: w.tensors.push_back(tensor_of(e, r.after.params[e.index])); break;
      case RecordKind::statistic: w.tensors.push_back(tensor_of(e, r.after.buffers[e.index])); break;
      case RecordKind::optimizer_state:
        w.tensors.push_back(tensor_of(e, (e.moment == 1 ? r.after.first_moment : r.after.second_moment)[e.index]));
        break;
      case RecordKind::counter: w.tensors.push_back(tensor_of(e, scalar(counter_value(e.counter, r)))); break;
    }
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
ref::TrainingState<Bounded> state_from(const Scenario& s, const ref::ProcedureConfig& config, const KernelWindow& k) {
  ref::TrainingState<Bounded> state = ref::initial_state<Bounded>(s.spec.model, config, s.initial_params);
  for (const RecordEntry& e : s.schema.entries) {
    if (recorded_by_step(e.kind)) continue;  // the window computes its own
    const RunTensor& t = find_tensor(k, e.name);
    switch (e.kind) {
      case RecordKind::gradient:
      case RecordKind::clipped_gradient:
      case RecordKind::step_value: break;
      case RecordKind::parameter: state.params[e.index] = exact_matrix(t); break;
      case RecordKind::statistic: state.buffers[e.index] = exact_matrix(t); break;
      case RecordKind::optimizer_state:
        (e.moment == 1 ? state.first_moment : state.second_moment)[e.index] = exact_matrix(t);
        break;
      case RecordKind::counter:
        switch (e.counter) {
          case Counter::step: state.step = static_cast<long>(t.values[0]); break;
          case Counter::loss_scale: state.loss_scale = t.values[0]; break;
          case Counter::good_steps: state.good_steps = static_cast<long>(t.values[0]); break;
          case Counter::skipped: break;
        }
        break;
    }
  }
  return state;
}

// The state the first window starts from: a fresh optimizer, or the
// scenario's own initial state.
ref::TrainingState<Bounded> start_of(const Scenario& s, const ref::ProcedureConfig& config) {
  return s.initial_state ? state_from(s, config, *s.initial_state)
                         : ref::initial_state<Bounded>(s.spec.model, config, s.initial_params);
}

// Reports window w of k to `status` as the run goes: as it starts, after
// each of its micro-batches (where it has more than one) and after each
// slice of a micro-batch computed in slices.
class WindowStatus {
 public:
  WindowStatus(const ProgressSink& status, std::size_t w, std::size_t k)
      : window_("window " + std::to_string(w + 1) + "/" + std::to_string(k)),
        observer_(status ? ref::MicroBatchObserver([&status, this](const ref::MicroBatchProgress& p) {
          if (p.total == 1 && p.slices == 1) return;
          // The micro-batch in hand: the last one done once its last slice is.
          const std::size_t current = p.slice == p.slices ? p.done : p.done + 1;
          status(window_ +
                 (p.total > 1 ? ", micro-batch " + std::to_string(current) + "/" + std::to_string(p.total) : std::string()) +
                 (p.slices > 1 ? ", row slice " + std::to_string(p.slice) + "/" + std::to_string(p.slices) : std::string()));
        })
                         : ref::MicroBatchObserver{}) {
    if (status) status(window_);
  }

 private:
  const std::string window_;
  const ref::ScopedMicroBatchObserver observer_;
};

}  // namespace

ReferenceRun run_reference(const Scenario& scenario, const Split& split, const ErrorModel& model,
                           const ProgressSink& status) {
  if (split.size() != scenario.windows.size()) throw std::invalid_argument("run_reference: split and data disagree");
  const ref::RoundingModel rounding = rounding_model_for(scenario.spec.precision, model);
  const ref::ScopedRoundingModel scope(rounding);
  const ref::ModelSpec& spec = scenario.spec.model;
  const ref::ProcedureConfig config = procedure_of(scenario);
  // Each window starts where the previous one ended. Only the running state
  // is kept, each window's result recorded as it is made: at real widths a
  // state is several parameter-sized tensors of bounded values.
  ReferenceRun out;
  ref::TrainingState<Bounded> state = start_of(scenario, config);
  for (std::size_t w = 0; w < split.size(); ++w) {
    const WindowStatus window_status(status, w, split.size());
    ref::WindowResult<Bounded> r = ref::run_window(spec, config, std::move(state), scenario.windows[w], split[w]);
    out.windows.push_back(to_window(scenario.schema, r));
    state = std::move(r.after);
  }
  return out;
}

ReferenceWindow run_reference_window(const Scenario& scenario, std::size_t w, const std::vector<long>& micro_batches,
                                     const KernelWindow* before, const ErrorModel& model, ref::SkipRule rule,
                                     const ProgressSink& status) {
  if (w >= scenario.windows.size()) throw std::out_of_range("run_reference_window: no such window");
  if ((w == 0) != (before == nullptr))
    throw std::invalid_argument("run_reference_window: window 0 starts from the initial state, later ones from a run's");
  const ref::RoundingModel rounding = rounding_model_for(scenario.spec.precision, model);
  const ref::ScopedRoundingModel scope(rounding);
  const ref::ModelSpec& spec = scenario.spec.model;
  const ref::ProcedureConfig config = procedure_of(scenario);
  ref::TrainingState<Bounded> start = before ? state_from(scenario, config, *before) : start_of(scenario, config);
  const WindowStatus window_status(status, w, scenario.windows.size());
  return to_window(scenario.schema, ref::run_window(spec, config, std::move(start), scenario.windows[w], micro_batches,
                                                  rule));
}

ReferenceRun run_reference_from(const Scenario& scenario, const Split& split, const KernelRun& kernel,
                                const ErrorModel& model, bool impose_skips, const ReferenceRun* own,
                                const ProgressSink& status) {
  if (kernel.windows.size() != split.size()) throw std::invalid_argument("run_reference_from: kernel run and split disagree");
  if (own && own->windows.size() != split.size()) throw std::invalid_argument("run_reference_from: own run and split disagree");
  const bool reuse_first = own && !scenario.spec.procedure.loss_scaling.dynamic;
  ReferenceRun out;
  for (std::size_t w = 0; w < split.size(); ++w)
    out.windows.push_back(w == 0 && reuse_first
                              ? own->windows[0]
                              : run_reference_window(scenario, w, split[w], w ? &kernel.windows[w - 1] : nullptr, model,
                                                     ref::SkipRule{kernel.windows[w].skipped, impose_skips}, status));
  return out;
}

}  // namespace gradeq
