// training_loop.cpp — the correct accumulation procedure on a Backend.
#include "harness/core/training_loop.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "kernels/communicator.h"
#include "harness/core/ops/registry.h"

namespace gradeq {
namespace {

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

std::vector<float> to_float(const ref::Matrix<double>& m) {
  std::vector<float> v(static_cast<std::size_t>(m.size()));
  for (long i = 0; i < m.size(); ++i) v[i] = static_cast<float>(m.data()[i]);
  return v;
}

}  // namespace

OptimizerStep make_optimizer_step(const ref::OptimizerSpec& o, double lr, long step) {
  OptimizerStep s;
  s.kind = o.kind == ref::OptimizerKind::sgd    ? OptimizerKind::sgd
           : o.kind == ref::OptimizerKind::adam ? OptimizerKind::adam
                                                : OptimizerKind::adamw;
  s.lr = static_cast<float>(lr);
  s.momentum = static_cast<float>(o.momentum);
  s.one_minus_dampening = static_cast<float>(1.0 - o.dampening);
  s.nesterov = o.nesterov;
  s.first_step = step == 0;
  s.weight_decay = static_cast<float>(o.weight_decay);
  s.beta1 = static_cast<float>(o.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  s.beta2 = static_cast<float>(o.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  s.eps = static_cast<float>(o.eps);
  const double t = static_cast<double>(step + 1);
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(o.beta1, t)));
  s.inv_sqrt_bias_correction2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(o.beta2, t)));
  s.decay = static_cast<float>(1.0 - lr * o.weight_decay);
  return s;
}

LoopFactory correct_loop() {
  return [](Backend& b) { return std::make_unique<TrainingLoop>(b); };
}

TrainingLoop::~TrainingLoop() { release_all(); }

void TrainingLoop::release_all() {
  for (const Owned& o : owned_)
    if (o.tensor->data) backend_.release(*o.tensor);
  owned_.clear();
  live_ = {};
}

void TrainingLoop::allocate(const Scenario& s, long max_rows) {
  release_all();
  const ref::ModelSpec& m = s.spec.model;
  const std::vector<ref::ParameterInfo>& layout = s.schema.parameters;
  const DType compute = s.spec.precision.compute, accumulate = s.spec.precision.accumulate;
  const bool compensated = s.spec.procedure.compensated;
  const OptimizerStateUse state = optimizer_state_use(s.spec.procedure.optimizer);
  const std::size_t n = layout.size();
  for (auto* list : {&params_, &compute_params_, &grads_}) list->assign(n, Tensor{});
  const bool staged = s.spec.procedure.staged;
  staging_.assign(compensated || staged ? n : 0, Tensor{});
  compensation_.assign(compensated ? n : 0, Tensor{});
  first_moment_.assign(state.first ? n : 0, Tensor{});
  second_moment_.assign(state.second ? n : 0, Tensor{});
  const ref::Model& model = model_.emplace(m);
  shorter_.reset();  // a shorter model of an earlier scenario's is not this one's
  saved_mean_.assign(model.nodes.size(), {});
  saved_rstd_.assign(model.nodes.size(), {});
  const std::vector<ref::ParameterInfo>& buffer_layout = s.schema.buffers;
  buffers_.assign(buffer_layout.size(), {});
  for (std::size_t p = 0; p < n; ++p) {
    const long rows = layout[p].rows, cols = layout[p].cols;
    own(params_[p], rows, cols, DType::f32, MemoryCategory::parameters);
    own(grads_[p], rows, cols, accumulate, MemoryCategory::gradients);
    if (state.first) own(first_moment_[p], rows, cols, DType::f32, MemoryCategory::optimizer_state);
    if (state.second) own(second_moment_[p], rows, cols, DType::f32, MemoryCategory::optimizer_state);
    if (compensated) {
      own(staging_[p], rows, cols, DType::f32, MemoryCategory::gradients);
      own(compensation_[p], rows, cols, accumulate, MemoryCategory::gradients);
    }
    if (staged) own(staging_[p], rows, cols, compute, MemoryCategory::gradients);
    if (compute == DType::f32) {
      compute_params_[p] = params_[p];
    } else {
      own(compute_params_[p], rows, cols, compute, MemoryCategory::parameters);
    }
    backend_.upload(params_[p], to_float(s.initial_params[p]));
  }
  backend_.zero(first_moment_);
  backend_.zero(second_moment_);
  plan_ = loop_plan(model, s.spec.checkpoint_every);
  activations_.assign(plan_.slot_widths.size(), {});
  for (std::size_t i = 0; i < activations_.size(); ++i)
    own(activations_[i], max_rows, plan_.slot_widths[i], i == plan_.ids_slot ? DType::f32 : compute,
        MemoryCategory::activations);
  gradient_buffers_.assign(plan_.gradient_buffers, {});
  const long widest = model.widest_gradient();
  for (Tensor& g : gradient_buffers_) own(g, max_rows, widest, compute, MemoryCategory::activations);
  for (std::size_t n = 0; n < model.nodes.size(); ++n) {
    const long groups = record_of(*model.nodes[n].op).saved_groups(model, model.nodes[n], max_rows);
    if (groups == 0) continue;
    own(saved_mean_[n], 1, groups, DType::f32, MemoryCategory::activations);
    own(saved_rstd_[n], 1, groups, DType::f32, MemoryCategory::activations);
  }
  for (std::size_t b = 0; b < buffer_layout.size(); ++b) {
    own(buffers_[b], buffer_layout[b].rows, buffer_layout[b].cols, DType::f32, MemoryCategory::parameters);
    backend_.fill(buffers_[b], static_cast<float>(buffer_layout[b].start));
  }
  own(targets_, max_rows, m.loss == ref::LossKind::mse ? model.output_width() : 1, DType::f32,
      MemoryCategory::activations);
  allocated();
}

void TrainingLoop::own(Tensor& t, long rows, long cols, DType dtype, MemoryCategory category) {
  const std::size_t before = backend_.live_bytes();
  t = backend_.allocate(rows, cols, dtype);
  const std::size_t bytes = backend_.live_bytes() - before;
  owned_.push_back({&t, category, bytes});
  live_[static_cast<std::size_t>(category)] += static_cast<double>(bytes);
  const auto sum = [](const auto& a) { return std::accumulate(a.begin(), a.end(), 0.0); };
  if (sum(live_) > sum(at_peak_)) at_peak_ = live_;
}

void TrainingLoop::disown(Tensor& t) {
  const auto it = std::find_if(owned_.begin(), owned_.end(), [&](const Owned& o) { return o.tensor == &t; });
  if (it == owned_.end()) throw std::logic_error("disown: not a tensor of this loop");
  live_[static_cast<std::size_t>(it->category)] -= static_cast<double>(it->bytes);
  backend_.release(t);
  owned_.erase(it);
}

MemoryUsage TrainingLoop::measured_memory() const {
  MemoryUsage m;
  m.bytes = at_peak_;
  m.peak = static_cast<double>(backend_.peak_bytes() - base_bytes_);
  m[MemoryCategory::scratch] = std::max(0.0, m.peak - m.total());
  return m;
}

Tensor TrainingLoop::activation(std::size_t v, long rows) const {
  const Tensor& slot = activations_[plan_.slot_of[v]];
  return Tensor{slot.data, rows, model_->stored_width(v), slot.dtype};
}

Tensor TrainingLoop::gradient_buffer(std::size_t k, long rows, long width) const {
  const Tensor& buffer = gradient_buffers_[k];
  return Tensor{buffer.data, rows, width, buffer.dtype};
}

LoopCall TrainingLoop::node_call(std::size_t n, long rows) const {
  const ref::Model& model = shorter_ ? *shorter_ : *model_;
  const ref::Node& node = model.nodes[n];
  LoopCall c{backend_, model, node, rows};
  for (std::size_t v : node.inputs) c.x.push_back(activation(v, rows));
  c.params = compute_params_.data() + node.first_parameter;
  c.buffers = buffers_.data() + node.first_buffer;
  const long groups = record_of(*node.op).saved_groups(model, node, rows);
  if (groups > 0) {
    c.saved_mean = Tensor{saved_mean_[n].data, 1, groups, DType::f32};
    c.saved_rstd = Tensor{saved_rstd_[n].data, 1, groups, DType::f32};
  }
  return c;
}

KernelRun TrainingLoop::run(const Scenario& scenario, const Split& split) {
  scenario_ = &scenario;
  if (split.size() != scenario.windows.size()) throw std::invalid_argument("run: split and data disagree on windows");
  if (scenario.initial_state)
    throw std::invalid_argument("run: the training loop starts from a fresh optimizer; this scenario starts from a given state");
  long max_rows = 0;
  for (const auto& w : split)
    max_rows = std::max(max_rows, *std::max_element(w.begin(), w.end()) * scenario.spec.model.positions);
  release_all();
  backend_.reset_peak_bytes();
  base_bytes_ = backend_.live_bytes();
  at_peak_ = {};
  allocate(scenario, max_rows);
  step_ = 0;
  loss_scale_ = procedure().loss_scaling.scale;
  good_steps_ = 0;

  KernelRun out;
  nominal_length_ = split.front().size();
  for (std::size_t w = 0; w < split.size(); ++w) {
    window_loss_ = 0.0;
    skipped_ = false;
    fed_.clear();
    unclipped_.clear();
    window_ = w;
    window_length_ = split[w].size();
    run_window(scenario.windows[w], split[w]);
    out.windows.push_back(record_window());
  }
  out.memory = measured_memory();
  release_all();
  scenario_ = nullptr;
  return out;
}

KernelWindow TrainingLoop::record_window() {
  KernelWindow out;
  out.loss = window_loss_;
  out.skipped = skipped_;
  out.fed = fed_;
  auto download = [&](const Tensor& t) {
    const std::vector<float> host = host_values(backend_, t);
    return std::vector<double>(host.begin(), host.end());
  };
  auto counter = [&](Counter c) {
    switch (c) {
      case Counter::step: return static_cast<double>(step_);
      case Counter::loss_scale: return loss_scale_;
      case Counter::good_steps: return static_cast<double>(good_steps_);
      case Counter::skipped: break;
    }
    return skipped_ ? 1.0 : 0.0;
  };
  const bool clipped = procedure().clip.enabled;
  for (const RecordEntry& e : scenario_->schema.entries) {
    if (skipped_ && recorded_by_step(e.kind)) continue;  // no step, nothing of one to record
    RunTensor t{e.name, e.kind, e.rows, e.cols, {}};
    switch (e.kind) {
      // A window that never reached its clip (a loop that drops it) keeps
      // nothing apart: its buffers are all there is.
      case RecordKind::gradient:
        t.values = clipped && !unclipped_.empty() ? unclipped_[e.index] : download(grads_[e.index]);
        break;
      case RecordKind::clipped_gradient: t.values = download(grads_[e.index]); break;
      case RecordKind::step_value:
        switch (e.step_value) {
          case StepValue::learning_rate: t.values = {step_learning_rate_}; break;  // float64, as computed
          case StepValue::clip_norm: t.values = {clip_norm_}; break;
          case StepValue::clip_coefficient: t.values = {clip_coefficient_}; break;
        }
        break;
      case RecordKind::parameter: t.values = download(params_[e.index]); break;
      case RecordKind::statistic: t.values = download(buffers_[e.index]); break;
      case RecordKind::optimizer_state:
        t.values = download((e.moment == 1 ? first_moment_ : second_moment_)[e.index]);
        break;
      case RecordKind::counter: t.values = {counter(e.counter)}; break;
    }
    out.tensors.push_back(std::move(t));
  }
  return out;
}

void TrainingLoop::record_fed(long window_samples, const std::vector<std::pair<long, long>>& ranges) {
  fed_.clear();
  for (const auto& [first, count] : ranges) {
    std::vector<long> samples;
    for (long i = first; i < first + count; ++i) samples.push_back(i >= 0 && i < window_samples ? i : -1);
    fed_.push_back(std::move(samples));
  }
}

std::vector<Tensor> TrainingLoop::trained(const std::vector<Tensor>& per_parameter) const {
  if (per_parameter.empty()) return {};
  std::vector<Tensor> out;
  for (std::size_t p = 0; p < per_parameter.size(); ++p)
    if (!procedure().is_frozen(p)) out.push_back(per_parameter[p]);
  return out;
}

void TrainingLoop::run_window(const ref::Batch& window, const std::vector<long>& micro_batches) {
  zero_gradients();
  refresh_compute_weights();
  const std::vector<std::pair<long, long>> ranges = micro_batch_ranges(micro_batches);
  record_fed(window.samples(), ranges);
  const std::vector<float> scales = loss_scales(window, ranges);
  for (std::size_t b = 0; b < ranges.size(); ++b) {
    micro_batch_index_ = b;
    window_loss_ += micro_batch(ref::micro_batch_of(window, ranges[b].first, ranges[b].second, procedure()), scales[b]);
  }
  finish_window();
}

void TrainingLoop::zero_gradients() {
  backend_.zero(grads_);
  backend_.zero(compensation_);
}

void TrainingLoop::refresh_compute_weights() {
  for (std::size_t p = 0; p < params_.size(); ++p)
    if (compute_params_[p].data != params_[p].data) backend_.convert(params_[p], compute_params_[p]);
}

std::vector<std::pair<long, long>> TrainingLoop::micro_batch_ranges(const std::vector<long>& micro_batches) {
  std::vector<std::pair<long, long>> ranges;
  long first = 0;
  for (long n : micro_batches) {
    ranges.emplace_back(first, n);
    first += n;
  }
  return ranges;
}

std::vector<float> TrainingLoop::loss_scales(const ref::Batch& window,
                                             const std::vector<std::pair<long, long>>& ranges) {
  std::vector<long> counts;
  for (const auto& r : ranges) counts.push_back(r.second);
  std::vector<float> scales;
  for (double s : ref::micro_batch_scales(procedure(), scenario_->spec.model.loss, window, counts))
    scales.push_back(static_cast<float>(s * loss_scale_));  // the loss scale is a power of two: exact
  return scales;
}

double TrainingLoop::micro_batch(const ref::Batch& micro_batch, float scale) {
  if (staging_.empty()) return forward_loss_backward(micro_batch, scale, grads_);
  backend_.zero(staging_);
  const double loss = forward_loss_backward(micro_batch, scale, staging_);
  backend_.accumulate(grads_, staging_, compensation_);
  return loss;
}

void TrainingLoop::finish_window() {
  unscale_gradients();
  const ref::LossScaling& ls = procedure().loss_scaling;
  if (ls.dynamic && !gradients_finite()) {
    // Overflow: skip the step, back off; the schedule does not advance.
    skipped_ = true;
    loss_scale_ *= ls.backoff_factor;
    good_steps_ = 0;
    return;
  }
  if (procedure().clip.enabled) keep_unclipped_gradients();
  clip_gradients();
  optimizer_step();
  if (ls.dynamic && ++good_steps_ == ls.growth_interval) {
    loss_scale_ *= ls.growth_factor;
    good_steps_ = 0;
  }
}

void TrainingLoop::unscale_gradients() {
  if (loss_scale_ == 1.0) return;
  backend_.scale(grads_, static_cast<float>(1.0 / loss_scale_));
  window_loss_ /= loss_scale_;
}

void TrainingLoop::keep_unclipped_gradients() {
  unclipped_.assign(grads_.size(), {});
  for (std::size_t p = 0; p < grads_.size(); ++p) {
    const std::vector<float> host = host_values(backend_, grads_[p]);
    unclipped_[p].assign(host.begin(), host.end());
  }
}

void TrainingLoop::clip_gradients() {
  const ref::ClipSpec& c = procedure().clip;
  if (!c.enabled) return;
  const float norm = gradient_norm();
  const float coefficient = static_cast<float>(c.max_norm) / (norm + static_cast<float>(ref::kClipEpsilon));
  if (coefficient < 1.0f) backend_.scale(trained(grads_), coefficient);
  clip_norm_ = norm;
  clip_coefficient_ = std::min(coefficient, 1.0f);
}

bool TrainingLoop::gradients_finite() { return backend_.all_finite(trained(grads_)); }

float TrainingLoop::gradient_norm() { return backend_.global_norm(trained(grads_)); }

double TrainingLoop::learning_rate() {
  return procedure().optimizer.lr * ref::schedule_multiplier(procedure().schedule, step_);
}

void TrainingLoop::step_with(const ref::OptimizerSpec& o) {
  step_learning_rate_ = learning_rate();
  backend_.optimizer_step(make_optimizer_step(o, step_learning_rate_, step_), trained(params_), trained(grads_),
                          trained(first_moment_), trained(second_moment_));
  ++step_;
}

void TrainingLoop::optimizer_step() { step_with(procedure().optimizer); }

void TrainingLoop::forward_node(std::size_t n, long rows, bool update_running_statistics) {
  LoopCall c = node_call(n, rows);
  c.y = activation(c.node.output(), rows);
  c.update_running = update_running_statistics;
  backend_.fill(c.y, kPoison);  // an output a kernel forgets to write stays NaN
  record_of(*c.node.op).loop_forward(c);
}

void TrainingLoop::add_input_gradient(const Tensor& value_gradient, const Tensor& part) {
  backend_.accumulate(std::span<const Tensor>(&value_gradient, 1), std::span<const Tensor>(&part, 1), {});
}

double TrainingLoop::forward_loss_backward(const ref::Batch& mb, float scale, const std::vector<Tensor>& grad_targets) {
  const ref::Model& model = *model_;
  const ref::ModelSpec& m = model.spec;
  const long rows = mb.rows();
  // A micro-batch padded shorter than the model's positions runs through
  // the model at its own length (ref::at_positions).
  if (mb.positions == m.positions)
    shorter_.reset();
  else if (!shorter_ || shorter_->spec.positions != mb.positions)
    shorter_.emplace(ref::at_positions(m, mb.positions));
  const std::size_t nodes = model.nodes.size(), output = model.values() - 1;

  // A chunked head runs with the loss (ModelSpec::head_chunk_rows): its
  // logits are never formed whole, nor their gradient.
  const bool chunked = model.chunked_head();
  const std::size_t head = nodes - 1;
  backend_.upload(activation(0, rows), to_float(mb.inputs));
  for (std::size_t n = 0; n < (chunked ? head : nodes); ++n) forward_node(n, rows, true);

  const Tensor targets = Tensor{targets_.data, rows, targets_.cols, targets_.dtype};
  if (m.loss == ref::LossKind::mse) {
    backend_.upload(targets, to_float(mb.targets));
  } else {
    // A causal LM's labels arrive unshifted: the loop shifts them, and the
    // kernel scores each row against its target as cross-entropy does.
    const std::vector<int> scored =
        m.loss == ref::LossKind::causal_lm ? ref::shifted_labels(mb.classes, mb.positions) : mb.classes;
    std::vector<float> classes(scored.begin(), scored.end());
    backend_.upload(targets, classes);
  }
  double loss_sum = 0.0;
  if (chunked) {
    const ref::Node& node = model.nodes[head];
    const LoopPlan::Step& step = plan_.steps[head];
    const std::size_t v = node.inputs[0];
    const Tensor dx = gradient_buffer(step.dx[0], rows, model.widths[v]);
    backend_.fill(dx, kPoison);
    loss_sum = backend_.chunked_head_cross_entropy(activation(v, rows), compute_params_[node.first_parameter], targets,
                                                   scale, m.head_chunk_rows, m.head_chunk_vocabulary, dx,
                                                   grad_targets[node.first_parameter]);
    if (step.sum[0] != step.dx[0]) add_input_gradient(gradient_buffer(step.sum[0], rows, dx.cols), dx);
  } else {
    const Tensor dy_out = gradient_buffer(plan_.output_gradient, rows, model.widths[output]);
    backend_.fill(dy_out, kPoison);
    const ref::LossKind kernel_loss = m.loss == ref::LossKind::causal_lm ? ref::LossKind::cross_entropy : m.loss;
    loss_sum = backend_.loss_forward_backward(kernel_loss, activation(output, rows), targets, scale, dy_out);
  }

  // Group by group from the last: with checkpointing, first recompute the
  // group's forward from its kept input (its values were overwritten by
  // the groups after it); then back through its nodes.
  const bool checkpointed = scenario_->spec.checkpoint_every > 0;
  for (std::size_t g = plan_.group_starts.size() - 1; g-- > 0;) {
    const std::size_t start = plan_.group_starts[g], end = plan_.group_starts[g + 1];
    if (checkpointed)
      for (std::size_t n = start; n + 1 < end; ++n) forward_node(n, rows, false);
    for (std::size_t n = end; n-- > start;) {
      if (chunked && n == head) continue;  // done with the loss
      const LoopPlan::Step& step = plan_.steps[n];
      LoopCall c = node_call(n, rows);
      c.y = activation(c.node.output(), rows);  // what forward wrote (attention's backward reads it)
      c.dy = gradient_buffer(step.dy, rows, model.widths[c.node.output()]);
      c.grads = grad_targets.data() + c.node.first_parameter;
      for (std::size_t i = 0; i < c.node.inputs.size(); ++i) {
        const std::size_t v = c.node.inputs[i];
        // The model's input has no gradient (some kernels write one all the
        // same, into a buffer nothing reads); token ids have none at all.
        c.needed.push_back(v > 0);
        c.dx.push_back(v > 0 || !m.token_input ? gradient_buffer(step.dx[i], rows, model.widths[v]) : Tensor{});
        backend_.fill(c.dx.back(), kPoison);
      }
      backward_node(c);
      for (std::size_t i = 0; i < c.node.inputs.size(); ++i)
        if (c.needed[i] && step.sum[i] != step.dx[i])
          add_input_gradient(gradient_buffer(step.sum[i], rows, c.dx[i].cols), c.dx[i]);
    }
  }
  return loss_sum * static_cast<double>(scale);
}

void TrainingLoop::backward_node(const LoopCall& c) { record_of(*c.node.op).loop_backward(c); }

}  // namespace gradeq
