// precision_sweep.cpp — accumulation dtype x compensation x N.
#include "harness/core/precision_sweep.h"
#include "harness/core/ops/registry.h"

#include <cmath>
#include <stdexcept>

#include "harness/core/equivalence.h"

namespace gradeq {

std::string accumulation_name(DType accumulate, bool compensated) {
  return std::string(dtype_name(accumulate)) + (compensated ? " + Kahan" : "");
}

ScenarioSpec precision_sweep_scenario(const PrecisionSweepOptions& o, DType accumulate, bool compensated,
                                      long micro_batches, std::uint64_t seed) {
  ScenarioSpec s;
  s.name = "precision sweep";
  s.model.input_features = 16;
  s.model.layers = {layer_of("linear", 32), layer_of("gelu"), layer_of("linear", 8)};
  s.model.loss = ref::LossKind::mse;
  s.split = {std::vector<long>(static_cast<std::size_t>(micro_batches), o.micro_batch)};
  s.precision.accumulate = accumulate;
  s.procedure.compensated = compensated;
  s.seed = seed;
  return s;
}

PrecisionSweep run_precision_sweep(const PrecisionSweepOptions& o, Backend& backend,
                                   const ProgressSink& progress) {
  if (o.seeds < 1 || o.micro_batch < 1) throw std::invalid_argument("sweep: seeds and micro-batch must be >= 1");
  for (long n : o.micro_batches)
    if (n < 1) throw std::invalid_argument("sweep: micro-batch counts must be >= 1");
  PrecisionSweep sweep;
  sweep.options = o;
  sweep.backend = backend.name();
  sweep.model = "in(16)-linear(32)-gelu-linear(8) -> mse, float32 compute, " + std::to_string(o.micro_batch) +
                " samples per micro-batch";
  const ErrorModel model;
  for (const DType acc : {DType::f32, DType::bf16, DType::f16})
    for (const bool compensated : {false, true}) {
      if (progress) progress("sweep precision: " + accumulation_name(acc, compensated));
      for (long n : o.micro_batches) {
        PrecisionSweepRow row;
        row.accumulate = acc;
        row.compensated = compensated;
        row.micro_batches = n;
        std::vector<double> errors, bounds, shifts;
        for (int k = 0; k < o.seeds; ++k) {
          const Scenario sc = materialize(precision_sweep_scenario(o, acc, compensated, n,
                                                                   mix_seed(o.seed, static_cast<std::uint64_t>(k))));
          const ReferenceRun full = run_reference(sc, full_batch_split(sc.spec.split), model);
          const ReferenceRun acc_ref = run_reference(sc, sc.spec.split, model);
          const KernelRun kernel = correct_loop()(backend)->run(sc, sc.spec.split);
          double diff = 0.0, norm = 0.0, bound = 0.0, kernel_norm = 0.0;
          for (const ReferenceTensor& f : full.windows[0].tensors) {
            if (f.kind != RecordKind::gradient) continue;
            const ReferenceTensor& a = find_tensor(acc_ref.windows[0], f.name);
            const RunTensor& kt = find_tensor(kernel.windows[0], f.name);
            for (std::size_t i = 0; i < f.value.size(); ++i) {
              const double d = kt.values[i] - f.value[i];
              const double b = accumulation_bound(a.kernel_bound[i], a.reference_bound[i], f.reference_bound[i]);
              diff += d * d;
              norm += f.value[i] * f.value[i];
              kernel_norm += kt.values[i] * kt.values[i];
              bound += b * b;
              row.worst_ratio = std::max(row.worst_ratio, std::abs(d) / b);
            }
          }
          errors.push_back(std::sqrt(diff / norm));
          bounds.push_back(std::sqrt(bound / norm));
          shifts.push_back(std::abs(std::sqrt(kernel_norm) - std::sqrt(norm)) / std::sqrt(norm));
        }
        row.error = summarize(errors);
        row.bound = summarize(bounds);
        row.norm_shift = summarize(shifts);
        sweep.rows.push_back(row);
      }
    }
  return sweep;
}

}  // namespace gradeq
