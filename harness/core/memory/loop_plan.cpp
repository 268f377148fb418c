// loop_plan.cpp — the training loop's allocation plan and its bytes.
#include "harness/core/memory/loop_plan.h"

#include <algorithm>
#include <numeric>

#include "harness/core/ops/registry.h"

namespace gradeq {

OptimizerStateUse optimizer_state_use(const ref::OptimizerSpec& o) {
  return {o.kind != ref::OptimizerKind::sgd || o.momentum != 0.0, o.kind != ref::OptimizerKind::sgd};
}

LoopPlan loop_plan(const ref::Model& model, long checkpoint_every) {
  LoopPlan out;
  const std::size_t values = model.values(), last = values - 1;
  // Checkpoint groups: every k top-level blocks.
  const std::size_t blocks = model.block_starts.size() - 1;
  const std::size_t k = checkpoint_every > 0 ? static_cast<std::size_t>(checkpoint_every) : blocks;
  for (std::size_t b = 0; b < blocks; b += k) out.group_starts.push_back(model.block_starts[b]);
  out.group_starts.push_back(model.nodes.size());
  out.slot_of.assign(values, 0);
  if (checkpoint_every <= 0) {
    for (std::size_t v = 0; v < values; ++v) {
      out.slot_of[v] = v;
      out.slot_widths.push_back(model.stored_width(v));
    }
  } else {
    // Value v > 0 is written by node v - 1: inside its group unless it is
    // the group's last node's (the next group's input, or the output).
    std::vector<long> shared;
    std::vector<std::size_t> position(values, 0);
    std::vector<bool> interior(values, false);
    for (std::size_t g = 0; g + 1 < out.group_starts.size(); ++g)
      for (std::size_t n = out.group_starts[g]; n + 1 < out.group_starts[g + 1]; ++n) {
        const std::size_t v = n + 1, i = n - out.group_starts[g];
        interior[v] = true;
        position[v] = i;
        if (shared.size() <= i) shared.resize(i + 1, 0);
        shared[i] = std::max(shared[i], model.widths[v]);
      }
    out.slot_widths = shared;  // interior slots come first
    for (std::size_t v = 0; v < values; ++v) {
      if (interior[v]) {
        out.slot_of[v] = position[v];
      } else {
        out.slot_of[v] = out.slot_widths.size();
        out.slot_widths.push_back(model.stored_width(v));
      }
    }
  }
  if (model.spec.token_input) out.ids_slot = out.slot_of[0];
  // Gradient buffers by liveness, in the order backward runs.
  std::vector<std::size_t> free_buffers;
  const auto take = [&] {
    if (free_buffers.empty()) return out.gradient_buffers++;
    const auto lowest = std::min_element(free_buffers.begin(), free_buffers.end());
    const std::size_t b = *lowest;
    free_buffers.erase(lowest);
    return b;
  };
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<std::size_t> of_value(values, kNone);
  out.output_gradient = of_value[last] = take();
  out.steps.resize(model.nodes.size());
  for (std::size_t n = model.nodes.size(); n-- > 0;) {
    const ref::Node& node = model.nodes[n];
    LoopPlan::Step& step = out.steps[n];
    step.dy = of_value[node.output()];
    std::vector<std::size_t> given_back{step.dy};
    for (std::size_t v : node.inputs) {
      const std::size_t dx = take();
      step.dx.push_back(dx);
      if (of_value[v] == kNone && v > 0) {
        of_value[v] = dx;
        step.sum.push_back(dx);
      } else {
        step.sum.push_back(of_value[v] == kNone ? dx : of_value[v]);
        given_back.push_back(dx);  // added into the value's, or the model's input's: not kept
      }
    }
    free_buffers.insert(free_buffers.end(), given_back.begin(), given_back.end());
  }
  return out;
}

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
  double ids = 0.0;
  for (std::size_t i = 0; i < plan.slot_widths.size(); ++i)
    (i == plan.ids_slot ? ids : activations) += static_cast<double>(rows) * static_cast<double>(plan.slot_widths[i]);
  const long widest = graph.widest_gradient();
  activations += static_cast<double>(plan.gradient_buffers) * static_cast<double>(rows) * static_cast<double>(widest);
  double activation_bytes = bytes(activations, compute) + bytes(ids, DType::f32);
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

}  // namespace gradeq
