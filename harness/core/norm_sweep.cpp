// norm_sweep.cpp — the normalizer study, in float64.
#include "harness/core/norm_sweep.h"
#include "harness/core/ops/registry.h"

#include <cmath>
#include <stdexcept>

#include "harness/core/scenario.h"

namespace gradeq {
namespace {

struct Variant {
  std::string name;
  ref::LayerSpec layer;
  ref::BatchNormMode mode = ref::BatchNormMode::per_micro_batch;
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {
      {"batchnorm", layer_of("batchnorm")},
      {"batchnorm (exact window)", layer_of("batchnorm"), ref::BatchNormMode::exact_window},
      {"layernorm", layer_of("layernorm")},
      {"groupnorm (4 groups)", layer_of("groupnorm", 4)},
      {"rmsnorm", layer_of("rmsnorm")},
  };
  return v;
}

ScenarioSpec sweep_scenario(const NormSweepOptions& o, const Variant& v, long micro_batch, std::uint64_t seed) {
  ScenarioSpec s;
  s.name = "norm sweep";
  s.model.input_features = 8;
  s.model.positions = o.positions;
  s.model.layers = {layer_of("linear", 16), v.layer, layer_of("relu"), layer_of("linear", 4)};
  s.model.loss = ref::LossKind::mse;
  s.split = {std::vector<long>(static_cast<std::size_t>(o.total_batch / micro_batch), micro_batch)};
  s.procedure.batch_norm = v.mode;
  s.seed = seed;
  return s;
}

double norm_of_difference(const ref::Tensors<double>& a, const ref::Tensors<double>& b, double* norm_b) {
  double d = 0.0, n = 0.0;
  for (std::size_t t = 0; t < a.size(); ++t)
    for (long i = 0; i < a[t].size(); ++i) {
      d += (a[t].data()[i] - b[t].data()[i]) * (a[t].data()[i] - b[t].data()[i]);
      n += b[t].data()[i] * b[t].data()[i];
    }
  if (norm_b) *norm_b = std::sqrt(n);
  return std::sqrt(d);
}

}  // namespace

SweepStatistic summarize(const std::vector<double>& xs) {
  SweepStatistic s;
  for (double x : xs) {
    s.mean += x;
    s.max = std::max(s.max, x);
  }
  s.mean /= static_cast<double>(xs.size());
  double var = 0.0;
  for (double x : xs) var += (x - s.mean) * (x - s.mean);
  s.spread = xs.size() > 1 ? std::sqrt(var / static_cast<double>(xs.size() - 1)) : 0.0;
  return s;
}

std::vector<std::string> norm_sweep_variants() {
  std::vector<std::string> names;
  for (const Variant& v : variants()) names.push_back(v.name);
  return names;
}

ScenarioSpec norm_sweep_scenario(const NormSweepOptions& options, const std::string& norm, long micro_batch,
                                 std::uint64_t seed) {
  for (const Variant& v : variants())
    if (v.name == norm) return sweep_scenario(options, v, micro_batch, seed);
  throw std::invalid_argument("sweep: no normalizer '" + norm + "'");
}

NormSweep run_norm_sweep(const NormSweepOptions& o, const ProgressSink& progress) {
  if (o.seeds < 1) throw std::invalid_argument("sweep: seeds must be >= 1");
  if (o.total_batch < 1 || o.positions < 1) throw std::invalid_argument("sweep: total batch and positions must be >= 1");
  for (long m : o.micro_batch_sizes)
    if (m < 1 || o.total_batch % m != 0)
      throw std::invalid_argument("sweep: micro-batch size " + std::to_string(m) + " does not divide the total batch " +
                                  std::to_string(o.total_batch));
  NormSweep sweep;
  sweep.options = o;
  sweep.model = "in(8)-linear(16)-NORM-relu-linear(4) -> mse, " + std::to_string(o.positions) +
                " positions/sample, batch " + std::to_string(o.total_batch) + " samples";
  for (const Variant& v : variants()) {
    if (progress) progress("sweep norms: " + v.name);
    for (long m : o.micro_batch_sizes) {
      if (v.layer.op->couples_samples() && m * o.positions < 2) continue;  // no statistics from 1 value
      std::vector<double> grad, loss, running;
      NormSweepRow row;
      row.norm = v.name;
      row.micro_batch = m;
      row.micro_batches = o.total_batch / m;
      row.has_running = v.layer.op->couples_samples();
      for (int k = 0; k < o.seeds; ++k) {
        const ScenarioSpec spec = sweep_scenario(o, v, m, mix_seed(o.seed, static_cast<std::uint64_t>(k)));
        const Scenario sc = materialize(spec);
        const auto start = ref::initial_state<double>(spec.model, spec.procedure, sc.initial_params);
        const auto full = ref::run_window(spec.model, spec.procedure, start, sc.windows[0], {o.total_batch});
        const auto acc = ref::run_window(spec.model, spec.procedure, start, sc.windows[0], spec.split[0]);
        double g_norm = 0.0;
        grad.push_back(norm_of_difference(acc.gradients.grads, full.gradients.grads, &g_norm) / g_norm);
        loss.push_back(std::abs(acc.gradients.loss - full.gradients.loss) / std::abs(full.gradients.loss));
        if (row.has_running) {
          const double update_norm = norm_of_difference(full.after.buffers, start.buffers, nullptr);
          running.push_back(norm_of_difference(acc.after.buffers, full.after.buffers, nullptr) / update_norm);
        }
        row.forward_passes = acc.gradients.forward_passes;
      }
      row.gradient = summarize(grad);
      row.loss = summarize(loss);
      if (row.has_running) row.running = summarize(running);
      sweep.rows.push_back(row);
    }
  }
  return sweep;
}

}  // namespace gradeq
