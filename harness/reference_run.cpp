// reference_run.cpp — the reference procedure with T = Bounded.
#include "harness/reference_run.h"

#include <stdexcept>

namespace gradeq {

ReferenceRun run_reference(const Scenario& scenario, const Split& split, const ErrorModel& model) {
  using ref::Bounded;
  if (split.size() != scenario.windows.size()) throw std::invalid_argument("run_reference: split and data disagree");
  const ref::RoundingModel rounding = rounding_model_for(scenario.spec.precision, model);
  const ref::ScopedRoundingModel scope(rounding);

  ref::ProcedureConfig config = scenario.spec.procedure;
  config.compute_copy = scenario.spec.precision.compute != DType::f32;
  ref::Tensors<Bounded> params;
  for (const auto& p : scenario.initial_params) params.push_back(ref::lift<Bounded>(p));
  const auto records = ref::run_trajectory(scenario.spec.model, config, params, scenario.windows, split);

  ReferenceRun out;
  for (const auto& r : records) out.window_losses.push_back(r.gradients.loss.value);
  const std::vector<ref::ParameterInfo> layout = ref::parameter_layout(scenario.spec.model);
  auto record = [&](const std::string& prefix, const ref::Tensors<Bounded>& ts) {
    for (std::size_t p = 0; p < ts.size(); ++p) {
      ReferenceTensor t{prefix + layout[p].name, ts[p].rows(), ts[p].cols(), {}, {}, {}};
      for (long i = 0; i < ts[p].size(); ++i) {
        t.value.push_back(ts[p].data()[i].value);
        t.kernel_bound.push_back(ts[p].data()[i].kernel);
        t.reference_bound.push_back(ts[p].data()[i].reference);
      }
      out.tensors.push_back(std::move(t));
    }
  };
  record("grad/", records.back().gradients.grads);
  record("param/", records.back().params_after);
  return out;
}

}  // namespace gradeq
