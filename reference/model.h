// model.h — a model is a stack of layers ending in a loss. This file holds
// the model's description (shared by the reference and the harness's
// driver), its parameter and buffer layout, and the float64 forward and
// backward of the whole stack. Tensors the kernel stores are passed through
// stored(), which is the identity for T = double and one rounding for
// T = Bounded.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/layers.h"
#include "reference/losses.h"
#include "reference/tensor.h"

namespace gradeq::ref {

enum class LayerKind { linear, relu, gelu, gelu_erf, layer_norm, batch_norm, group_norm, rms_norm };
enum class LossKind { mse, cross_entropy };

struct LayerSpec {
  LayerKind kind = LayerKind::linear;
  long features = 0;  // Linear: output features; others: ignored (inferred)
  long groups = 0;    // GroupNorm: channel groups (must divide the features)
};

struct ModelSpec {
  long input_features = 1;
  long positions = 1;  // rows per sample
  std::vector<LayerSpec> layers;
  LossKind loss = LossKind::mse;
  double norm_eps = 1e-5;      // PyTorch's default for Batch/Layer/GroupNorm
  double bn_momentum = 0.1;    // PyTorch's default
};

std::string layer_name(LayerKind kind);
std::string loss_name(LossKind kind);
// "in(8)-linear(16)-batchnorm-relu-linear(3) -> mse"
std::string describe(const ModelSpec& spec);
// Throws std::invalid_argument with a message naming what is wrong.
void validate(const ModelSpec& spec);
// Features entering each layer, plus the output features at the end.
std::vector<long> layer_widths(const ModelSpec& spec);
bool is_norm(LayerKind kind);
bool has_batch_norm(const ModelSpec& spec);
NormShape norm_shape(const ModelSpec& spec, const LayerSpec& layer);

struct ParameterInfo {
  std::string name;  // "layer1.weight"
  long layer = 0;
  long rows = 0, cols = 0;
};

std::vector<ParameterInfo> parameter_layout(const ModelSpec& spec);
// Parameters of layer l occupy params[first_parameter(spec)[l] ...].
std::vector<long> first_parameter(const ModelSpec& spec);

// Buffers: BatchNorm's running mean and variance, [1, C] each, starting at
// 0 and 1 as in PyTorch. Buffers of layer l start at first_buffer(spec)[l].
std::vector<ParameterInfo> buffer_layout(const ModelSpec& spec);
std::vector<long> first_buffer(const ModelSpec& spec);
double initial_buffer_value(const ParameterInfo& b);

template <class T>
using Tensors = std::vector<Matrix<T>>;

// BatchNorm statistics and backward coupling supplied from outside, per
// layer (nullopt: compute from the batch at hand). Used by the exact
// BatchNorm-under-accumulation procedure, which computes them over the
// whole window.
template <class T>
struct WindowNorms {
  std::vector<std::optional<NormStatistics<T>>> statistics;
  std::vector<std::optional<NormCoupling<T>>> coupling;
};

// Everything backward needs from forward: the input of every layer and the
// statistics each normalizer used.
template <class T>
struct Tape {
  Tensors<T> layer_inputs;
  std::vector<std::optional<NormStatistics<T>>> statistics;
  Matrix<T> output;
};

// running: BatchNorm buffers to update (training mode), or nullptr.
template <class T>
Tape<T> forward(const ModelSpec& spec, const Tensors<T>& params, const Matrix<T>& x, Tensors<T>* running = nullptr,
                const WindowNorms<T>* window = nullptr) {
  const std::vector<long> first = first_parameter(spec), first_buf = first_buffer(spec);
  Tape<T> tape;
  Matrix<T> h = quantized(x, Storage::compute);
  for (std::size_t l = 0; l < spec.layers.size(); ++l) {
    tape.layer_inputs.push_back(h);
    tape.statistics.emplace_back();
    const Matrix<T>* p = params.data() + first[l];
    const LayerKind kind = spec.layers[l].kind;
    switch (kind) {
      case LayerKind::linear: h = linear_forward(h, p[0], p[1]); break;
      case LayerKind::relu: h = relu_forward(h); break;
      case LayerKind::gelu: h = gelu_forward(h); break;
      case LayerKind::gelu_erf: h = gelu_erf_forward(h); break;
      case LayerKind::layer_norm:
      case LayerKind::batch_norm:
      case LayerKind::group_norm:
      case LayerKind::rms_norm: {
        const NormShape shape = norm_shape(spec, spec.layers[l]);
        const bool supplied = window && window->statistics.size() > l && window->statistics[l].has_value();
        tape.statistics[l] = supplied ? *window->statistics[l] : norm_statistics(shape, h);
        const Matrix<T> no_beta;
        h = norm_forward(shape, h, p[0], kind == LayerKind::rms_norm ? no_beta : p[1], *tape.statistics[l]);
        if (kind == LayerKind::batch_norm && running && !supplied)
          batchnorm_update_running((*running)[first_buf[l]], (*running)[first_buf[l] + 1], *tape.statistics[l],
                                   spec.bn_momentum);
        break;
      }
    }
    h = stored(h, Storage::compute);
  }
  tape.output = h;
  return tape;
}

template <class T>
struct Backward {
  Tensors<T> grads;                 // fresh parameter gradients (not accumulated, not stored)
  Tensors<T> layer_output_grads;    // dy arriving at each layer's output
};

namespace detail {

// Backward from dy at the output. Gradients are fresh: the caller adds them
// into its accumulation buffer. With `output_grads`, the dy arriving at each
// layer's output is kept there. With `release` (the tape itself, given
// away by the caller), each layer's entries are freed as soon as its
// backward is done: at real widths the tape is most of a pass's memory, and
// holding it all until the end, beside a second set of activation-sized
// gradients, doubled the pass's peak. With `slice_sums` (one per parameter)
// the pass is over one slice of a batch's rows: its reductions over rows
// are added there and no gradient is returned; otherwise each is decided
// as soon as its layer is done.
template <class T>
Tensors<T> backward_pass(const ModelSpec& spec, const Tensors<T>& params, const Tape<T>& tape, const Matrix<T>& dy_out,
                         const WindowNorms<T>* window, Tensors<T>* output_grads, Tape<T>* release,
                         std::vector<RowSum<T>>* slice_sums = nullptr) {
  const std::vector<long> first = first_parameter(spec);
  Tensors<T> grads(slice_sums ? 0 : params.size());
  if (output_grads) output_grads->assign(spec.layers.size(), Matrix<T>());
  Matrix<T> dy = dy_out;
  for (std::size_t l = spec.layers.size(); l-- > 0;) {
    if (output_grads) (*output_grads)[l] = dy;
    const Matrix<T>& x = tape.layer_inputs[l];
    const Matrix<T>* p = params.data() + first[l];
    RowSum<T> local[2];
    RowSum<T>* sums = slice_sums ? slice_sums->data() + first[l] : local;
    long count = 0;  // the layer's parameters
    Matrix<T> dx;
    switch (spec.layers[l].kind) {
      case LayerKind::linear:
        dx = linear_backward(x, p[0], dy, sums[0], sums[1]);
        count = 2;
        break;
      case LayerKind::relu: dx = relu_backward(x, dy); break;
      case LayerKind::gelu: dx = gelu_backward(x, dy); break;
      case LayerKind::gelu_erf: dx = gelu_erf_backward(x, dy); break;
      case LayerKind::layer_norm:
      case LayerKind::batch_norm:
      case LayerKind::group_norm:
      case LayerKind::rms_norm: {
        const NormShape shape = norm_shape(spec, spec.layers[l]);
        const NormStatistics<T>& st = *tape.statistics[l];
        const bool supplied = window && window->coupling.size() > l && window->coupling[l].has_value();
        const bool rms = spec.layers[l].kind == LayerKind::rms_norm;
        dx = norm_backward(shape, x, p[0], dy, st, supplied ? *window->coupling[l] : norm_coupling(shape, x, p[0], dy, st),
                           sums[0], rms ? nullptr : &sums[1]);
        count = rms ? 1 : 2;
        break;
      }
    }
    if (!slice_sums)
      for (long k = 0; k < count; ++k) grads[static_cast<std::size_t>(first[l] + k)] = std::move(local[k]).result();
    if (release) {
      release->layer_inputs[l] = Matrix<T>();
      release->statistics[l].reset();
    }
    // The first layer's dx is not needed; a kernel does not compute it.
    dy = l > 0 ? stored(dx, Storage::compute) : Matrix<T>();
  }
  return grads;
}

}  // namespace detail

// Backward from dy at the output, keeping the dy that arrives at each
// layer's output (the exact BatchNorm procedure's coupling needs them).
template <class T>
Backward<T> backward_with_layer_grads(const ModelSpec& spec, const Tensors<T>& params, const Tape<T>& tape,
                                      const Matrix<T>& dy_out, const WindowNorms<T>* window = nullptr) {
  Backward<T> out;
  out.grads = detail::backward_pass(spec, params, tape, dy_out, window, &out.layer_output_grads,
                                    static_cast<Tape<T>*>(nullptr));
  return out;
}

// The parameters' gradients alone, from a tape that is kept.
template <class T>
Tensors<T> backward(const ModelSpec& spec, const Tensors<T>& params, const Tape<T>& tape, const Matrix<T>& dy_out) {
  return detail::backward_pass(spec, params, tape, dy_out, static_cast<const WindowNorms<T>*>(nullptr),
                               static_cast<Tensors<T>*>(nullptr), static_cast<Tape<T>*>(nullptr));
}

// The parameters' gradients alone, from a tape given away: each layer's
// entries are freed once its backward is done.
template <class T>
Tensors<T> backward(const ModelSpec& spec, const Tensors<T>& params, Tape<T>&& tape, const Matrix<T>& dy_out,
                    const WindowNorms<T>* window = nullptr) {
  return detail::backward_pass(spec, params, tape, dy_out, window, static_cast<Tensors<T>*>(nullptr), &tape);
}

}  // namespace gradeq::ref
