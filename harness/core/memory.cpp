// memory.cpp — memory categories, the loop's predicted bytes, the fit, sizes.
#include "harness/core/memory.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>

#include "harness/core/scenario.h"
#include "harness/core/training_loop.h"
#include "harness/core/ops/registry.h"

namespace gradeq {

std::string memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::optimizer_state: return "optimizer state";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::scratch: return "scratch";
  }
  return "?";
}

double MemoryUsage::total() const { return std::accumulate(bytes.begin(), bytes.end(), 0.0); }

MemoryUsage loop_memory(const ScenarioSpec& s, long micro_batch_samples) {
  MemoryUsage m;
  const ref::ModelSpec& model = s.model;
  const auto bytes = [](double elements, DType t) { return elements * static_cast<double>(dtype_bytes(t)); };
  double params = 0.0, buffers = 0.0;
  for (const ref::ParameterInfo& p : ref::parameter_layout(model)) params += static_cast<double>(p.rows * p.cols);
  for (const ref::ParameterInfo& b : ref::buffer_layout(model)) buffers += static_cast<double>(b.rows * b.cols);
  const DType compute = s.precision.compute, accumulate = s.precision.accumulate;

  m[MemoryCategory::parameters] =
      bytes(params, DType::f32) + (compute == DType::f32 ? 0.0 : bytes(params, compute)) + bytes(buffers, DType::f32);
  m[MemoryCategory::gradients] = bytes(params, accumulate);
  if (s.procedure.compensated) m[MemoryCategory::gradients] += bytes(params, DType::f32) + bytes(params, accumulate);
  if (s.procedure.staged) m[MemoryCategory::gradients] += bytes(params, compute);
  const OptimizerStateUse use = optimizer_state_use(s.procedure.optimizer);
  m[MemoryCategory::optimizer_state] = bytes(params, DType::f32) * ((use.first ? 1.0 : 0.0) + (use.second ? 1.0 : 0.0));

  const long rows = micro_batch_samples * model.positions;
  const ref::Model graph(model);
  const LoopPlan plan = loop_plan(graph, s.checkpoint_every);
  double activations = 0.0;
  for (long width : plan.slot_widths) activations += static_cast<double>(rows) * static_cast<double>(width);
  const long widest = *std::max_element(graph.widths.begin(), graph.widths.end());
  activations += static_cast<double>(plan.gradient_buffers) * static_cast<double>(rows) * static_cast<double>(widest);
  double activation_bytes = bytes(activations, compute);
  for (const ref::Node& node : graph.nodes)
    activation_bytes +=
        2.0 * bytes(static_cast<double>(record_of(*node.op).saved_groups(graph, node, rows)), DType::f32);
  activation_bytes +=
      bytes(static_cast<double>(rows) * (model.loss == ref::LossKind::mse ? graph.output_width() : 1), DType::f32);
  m[MemoryCategory::activations] = activation_bytes;
  m.peak = m.total();
  return m;
}

double activation_bytes_per_sample(const ScenarioSpec& spec) {
  return loop_memory(spec, 2)[MemoryCategory::activations] - loop_memory(spec, 1)[MemoryCategory::activations];
}

double ScenarioMemory::worst_relative_error() const {
  const auto rel = [](double measured, double predicted) {
    return measured > 0.0 ? std::abs(measured - predicted) / measured : HUGE_VAL;
  };
  return std::max(rel(accumulated.peak, predicted_accumulated()), rel(full_batch.peak, predicted_full_batch()));
}

MemoryFit fit_memory(const std::vector<std::pair<long, double>>& points) {
  double n = 0.0, sx = 0.0, sy = 0.0;
  for (const auto& [x, y] : points) {
    n += 1.0;
    sx += static_cast<double>(x);
    sy += y;
  }
  const double mx = sx / n, my = sy / n;
  double sxx = 0.0, sxy = 0.0;
  for (const auto& [x, y] : points) {
    sxx += (static_cast<double>(x) - mx) * (static_cast<double>(x) - mx);
    sxy += (static_cast<double>(x) - mx) * (y - my);
  }
  if (points.size() < 2 || sxx == 0.0) throw std::invalid_argument("fit_memory: needs at least two distinct sizes");
  MemoryFit f;
  f.per_sample = sxy / sxx;
  f.fixed = my - f.per_sample * mx;
  for (const auto& [x, y] : points)
    f.worst_residual = std::max(f.worst_residual, std::abs(f.at(static_cast<double>(x)) - y) / std::max(y, 1.0));
  return f;
}

long smallest_micro_batch(const ScenarioSpec& spec) {
  return ref::has_batch_norm(spec.model) ? (2 + spec.model.positions - 1) / spec.model.positions : 1;
}

double measure_peak(const ScenarioSpec& spec, long samples, Backend& backend, const LoopFactory& loop) {
  ScenarioSpec one = spec;
  one.split = {{samples}};
  return loop(backend)->run(materialize(one), one.split).memory.peak;
}

MemoryFit measure_memory_fit(const ScenarioSpec& spec, const std::vector<long>& samples, Backend& backend,
                             const LoopFactory& loop) {
  std::vector<std::pair<long, double>> points;
  for (long n : samples) points.emplace_back(n, measure_peak(spec, n, backend, loop));
  return fit_memory(points);
}

void predict_memory(ScenarioMemory& m, const ScenarioSpec& spec, Backend& backend, const LoopFactory& loop) {
  const long low = std::max(smallest_micro_batch(spec), m.micro_batch / 2);
  const std::vector<long> sizes = low < m.micro_batch ? std::vector<long>{low, m.micro_batch}
                                                      : std::vector<long>{m.micro_batch, m.micro_batch + 1};
  m.fit = measure_memory_fit(spec, sizes, backend, loop);
  m.predicted = true;
}

double parse_bytes(const std::string& text) {
  double value = 0.0;
  const char* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, value);
  std::string unit(at, end);
  if (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);  // "512 MiB"
  static const std::vector<std::pair<std::string, double>> units = {
      {"", 1.0},       {"B", 1.0},      {"kB", 1e3},       {"KB", 1e3},       {"MB", 1e6},       {"GB", 1e9},
      {"TB", 1e12},    {"K", 0x1p10},   {"M", 0x1p20},     {"G", 0x1p30},     {"T", 0x1p40},     {"KiB", 0x1p10},
      {"MiB", 0x1p20}, {"GiB", 0x1p30}, {"TiB", 0x1p40}};
  const auto it = std::find_if(units.begin(), units.end(), [&](const auto& u) { return u.first == unit; });
  if (error != std::errc() || it == units.end() || !std::isfinite(value) || value < 0.0)
    throw std::invalid_argument("'" + text + "' is not a size: expected a number with an optional unit, e.g. 8GiB, "
                                "512MiB, 2GB or 1e9 (B; kB, MB, GB, TB; KiB, MiB, GiB, TiB, also written K, M, G, T)");
  return value * it->second;
}

std::string format_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && std::abs(bytes) >= 1024.0) {
    bytes /= 1024.0;
    ++u;
  }
  char out[32];
  std::snprintf(out, sizeof out, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return out;
}

}  // namespace gradeq
