// training_loop.cpp — the correct accumulation procedure on a Backend.
#include "harness/training_loop.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "kernels/norm_geometry.h"

namespace gradeq {
namespace {

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

Tensor first_rows(const Tensor& t, long rows) { return Tensor{t.data, rows, t.cols, t.dtype}; }

std::vector<float> to_float(const ref::Matrix<double>& m) {
  std::vector<float> v(static_cast<std::size_t>(m.size()));
  for (long i = 0; i < m.size(); ++i) v[i] = static_cast<float>(m.data()[i]);
  return v;
}

NormConfig norm_config(const ref::ModelSpec& spec, const ref::LayerSpec& layer) {
  NormConfig c;
  c.positions = spec.positions;
  c.eps = static_cast<float>(spec.norm_eps);
  c.momentum = static_cast<float>(spec.bn_momentum);
  c.groups = layer.groups;
  switch (layer.kind) {
    case ref::LayerKind::layer_norm: c.kind = NormKind::layer; break;
    case ref::LayerKind::rms_norm: c.kind = NormKind::rms; break;
    case ref::LayerKind::batch_norm: c.kind = NormKind::batch; break;
    case ref::LayerKind::group_norm: c.kind = NormKind::group; break;
    default: throw std::logic_error("norm_config: not a normalizer");
  }
  return c;
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
  for (Tensor* t : owned_)
    if (t->data) backend_.release(*t);
  owned_.clear();
}

void TrainingLoop::allocate(const Scenario& s, long max_rows) {
  release_all();
  const ref::ModelSpec& m = s.spec.model;
  const std::vector<ref::ParameterInfo>& layout = s.schema.parameters;
  const std::vector<long> widths = ref::layer_widths(m);
  const DType compute = s.spec.precision.compute, accumulate = s.spec.precision.accumulate;
  const bool compensated = s.spec.procedure.compensated;
  const std::size_t n = layout.size();
  for (auto* list : {&params_, &compute_params_, &grads_, &staging_, &compensation_, &first_moment_, &second_moment_})
    list->assign(compensated || (list != &staging_ && list != &compensation_) ? n : 0, Tensor{});
  activations_.assign(widths.size(), {});
  activation_grads_.assign(widths.size(), {});
  saved_mean_.assign(m.layers.size(), {});
  saved_rstd_.assign(m.layers.size(), {});
  const std::vector<ref::ParameterInfo>& buffer_layout = s.schema.buffers;
  buffers_.assign(buffer_layout.size(), {});
  for (std::size_t p = 0; p < n; ++p) {
    const long rows = layout[p].rows, cols = layout[p].cols;
    own(params_[p], rows, cols, DType::f32);
    own(grads_[p], rows, cols, accumulate);
    own(first_moment_[p], rows, cols, DType::f32);
    own(second_moment_[p], rows, cols, DType::f32);
    if (compensated) {
      own(staging_[p], rows, cols, DType::f32);
      own(compensation_[p], rows, cols, accumulate);
    }
    if (compute == DType::f32) {
      compute_params_[p] = params_[p];
    } else {
      own(compute_params_[p], rows, cols, compute);
    }
    backend_.upload(params_[p], to_float(s.initial_params[p]));
  }
  backend_.zero(first_moment_);
  backend_.zero(second_moment_);
  for (std::size_t l = 0; l < widths.size(); ++l) {
    own(activations_[l], max_rows, widths[l], compute);
    own(activation_grads_[l], max_rows, widths[l], compute);
  }
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    if (!ref::is_norm(m.layers[l].kind)) continue;
    const long groups = norm_geometry(norm_config(m, m.layers[l]), max_rows, widths[l]).group_count();
    own(saved_mean_[l], 1, groups, DType::f32);
    own(saved_rstd_[l], 1, groups, DType::f32);
  }
  for (std::size_t b = 0; b < buffer_layout.size(); ++b) {
    own(buffers_[b], buffer_layout[b].rows, buffer_layout[b].cols, DType::f32);
    backend_.fill(buffers_[b], static_cast<float>(ref::initial_buffer_value(buffer_layout[b])));
  }
  own(targets_, max_rows, m.loss == ref::LossKind::mse ? widths.back() : 1, DType::f32);
  allocated();
}

void TrainingLoop::own(Tensor& t, long rows, long cols, DType dtype) {
  t = backend_.allocate(rows, cols, dtype);
  owned_.push_back(&t);
}

KernelRun TrainingLoop::run(const Scenario& scenario, const Split& split) {
  scenario_ = &scenario;
  if (split.size() != scenario.windows.size()) throw std::invalid_argument("run: split and data disagree on windows");
  if (scenario.initial_state)
    throw std::invalid_argument("run: the training loop starts from a fresh optimizer; this scenario starts from a given state");
  long max_rows = 0;
  for (const auto& w : split)
    max_rows = std::max(max_rows, *std::max_element(w.begin(), w.end()) * scenario.spec.model.positions);
  allocate(scenario, max_rows);
  step_ = 0;
  loss_scale_ = procedure().loss_scaling.scale;
  good_steps_ = 0;

  KernelRun out;
  nominal_length_ = split.front().size();
  for (std::size_t w = 0; w < split.size(); ++w) {
    window_loss_ = 0.0;
    skipped_ = false;
    window_ = w;
    window_length_ = split[w].size();
    run_window(scenario.windows[w], split[w]);
    out.windows.push_back(record_window());
  }
  release_all();
  scenario_ = nullptr;
  return out;
}

KernelWindow TrainingLoop::record_window() {
  KernelWindow out;
  out.loss = window_loss_;
  out.skipped = skipped_;
  auto download = [&](const Tensor& t) {
    std::vector<float> host(static_cast<std::size_t>(t.size()));
    backend_.download(t, host);
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
  for (const RecordEntry& e : scenario_->schema.entries) {
    RunTensor t{e.name, e.kind, e.rows, e.cols, {}};
    switch (e.kind) {
      case RecordKind::gradient: t.values = download(grads_[e.index]); break;
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

void TrainingLoop::run_window(const ref::Batch& window, const std::vector<long>& micro_batches) {
  zero_gradients();
  refresh_compute_weights();
  const std::vector<std::pair<long, long>> ranges = micro_batch_ranges(micro_batches);
  const std::vector<float> scales = loss_scales(window, ranges);
  for (std::size_t b = 0; b < ranges.size(); ++b) {
    micro_batch_index_ = b;
    window_loss_ += micro_batch(window.slice(ranges[b].first, ranges[b].second), scales[b]);
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
  if (!procedure().compensated) return forward_loss_backward(micro_batch, scale, grads_);
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

void TrainingLoop::clip_gradients() {
  const ref::ClipSpec& c = procedure().clip;
  if (!c.enabled) return;
  const float norm = gradient_norm();
  const float coefficient = static_cast<float>(c.max_norm) / (norm + static_cast<float>(ref::kClipEpsilon));
  if (coefficient < 1.0f) backend_.scale(grads_, coefficient);
}

bool TrainingLoop::gradients_finite() { return backend_.all_finite(grads_); }

float TrainingLoop::gradient_norm() { return backend_.global_norm(grads_); }

double TrainingLoop::learning_rate() {
  return procedure().optimizer.lr * ref::schedule_multiplier(procedure().schedule, step_);
}

void TrainingLoop::optimizer_step() {
  backend_.optimizer_step(make_optimizer_step(procedure().optimizer, learning_rate(), step_), params_, grads_,
                          first_moment_, second_moment_);
  ++step_;
}

double TrainingLoop::forward_loss_backward(const ref::Batch& mb, float scale, const std::vector<Tensor>& grad_targets) {
  const ref::ModelSpec& m = scenario_->spec.model;
  const std::vector<long> first = ref::first_parameter(m), first_buffer = ref::first_buffer(m);
  const long rows = mb.rows();
  auto act = [&](std::size_t l) { return first_rows(activations_[l], rows); };
  auto dact = [&](std::size_t l) { return first_rows(activation_grads_[l], rows); };
  auto norm_stats = [&](std::size_t l, const NormConfig& c) {
    const long groups = norm_geometry(c, rows, activations_[l].cols).group_count();
    return std::make_pair(Tensor{saved_mean_[l].data, 1, groups, DType::f32},
                          Tensor{saved_rstd_[l].data, 1, groups, DType::f32});
  };

  backend_.upload(act(0), to_float(mb.inputs));
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const Tensor x = act(l), y = act(l + 1);
    backend_.fill(y, kPoison);  // an output a kernel forgets to write stays NaN
    const Tensor* p = compute_params_.data() + first[l];
    switch (m.layers[l].kind) {
      case ref::LayerKind::linear: backend_.linear_forward(x, p[0], p[1], y); break;
      case ref::LayerKind::relu: backend_.activation_forward(Activation::relu, x, y); break;
      case ref::LayerKind::gelu: backend_.activation_forward(Activation::gelu_tanh, x, y); break;
      case ref::LayerKind::layer_norm:
      case ref::LayerKind::batch_norm:
      case ref::LayerKind::group_norm:
      case ref::LayerKind::rms_norm: {
        const NormConfig c = norm_config(m, m.layers[l]);
        auto [mean, rstd] = norm_stats(l, c);
        const bool batch = c.kind == NormKind::batch;
        backend_.norm_forward(c, x, p[0], c.kind == NormKind::rms ? Tensor{} : p[1], y, mean, rstd,
                              batch ? buffers_[first_buffer[l]] : Tensor{},
                              batch ? buffers_[first_buffer[l] + 1] : Tensor{});
        break;
      }
    }
  }

  const std::size_t out = m.layers.size();
  const Tensor targets = first_rows(targets_, rows);
  if (m.loss == ref::LossKind::mse) {
    backend_.upload(targets, to_float(mb.targets));
  } else {
    std::vector<float> classes(mb.classes.begin(), mb.classes.end());
    backend_.upload(targets, classes);
  }
  backend_.fill(dact(out), kPoison);
  const double loss_sum = backend_.loss_forward_backward(
      m.loss == ref::LossKind::mse ? LossKind::mse : LossKind::cross_entropy, act(out), targets, scale, dact(out));

  for (std::size_t l = m.layers.size(); l-- > 0;) {
    const Tensor x = act(l), dy = dact(l + 1), dx = dact(l);
    const Tensor* p = compute_params_.data() + first[l];
    const Tensor* g = grad_targets.data() + first[l];
    backend_.fill(dx, kPoison);
    switch (m.layers[l].kind) {
      case ref::LayerKind::linear:
        backend_.linear_backward_weight(dy, x, g[0], g[1]);
        if (l > 0) backend_.linear_backward_data(dy, p[0], dx);
        break;
      case ref::LayerKind::relu: backend_.activation_backward(Activation::relu, x, dy, dx); break;
      case ref::LayerKind::gelu: backend_.activation_backward(Activation::gelu_tanh, x, dy, dx); break;
      case ref::LayerKind::layer_norm:
      case ref::LayerKind::batch_norm:
      case ref::LayerKind::group_norm:
      case ref::LayerKind::rms_norm: {
        const NormConfig c = norm_config(m, m.layers[l]);
        auto [mean, rstd] = norm_stats(l, c);
        backend_.norm_backward(c, x, p[0], dy, mean, rstd, dx, g[0], c.kind == NormKind::rms ? Tensor{} : g[1]);
        break;
      }
    }
  }
  return loss_sum * static_cast<double>(scale);
}

}  // namespace gradeq
