// model.h — a model is a stack of layers ending in a loss. This file holds
// the model's description (shared by the reference and the harness's
// driver), its parameter layout, and the float64 forward/backward of the
// whole stack. Tensors the kernel stores are passed through store(), which
// is the identity for T = double and one rounding for T = Bounded.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "reference/layers.h"
#include "reference/losses.h"
#include "reference/tensor.h"

namespace gradeq::ref {

enum class LayerKind { linear, relu, gelu, layer_norm };
enum class LossKind { mse, cross_entropy };

struct LayerSpec {
  LayerKind kind = LayerKind::linear;
  long features = 0;  // Linear: output features; others: ignored (inferred)
};

struct ModelSpec {
  long input_features = 1;
  long positions = 1;  // rows per sample
  std::vector<LayerSpec> layers;
  LossKind loss = LossKind::mse;
  double norm_eps = 1e-5;
};

std::string layer_name(LayerKind kind);
std::string loss_name(LossKind kind);
// "linear(8)-relu-linear(3) -> mse"
std::string describe(const ModelSpec& spec);
// Throws std::invalid_argument with a message naming what is wrong.
void validate(const ModelSpec& spec);
// Features entering each layer, plus the output features at the end.
std::vector<long> layer_widths(const ModelSpec& spec);

struct ParameterInfo {
  std::string name;  // "layer1.weight"
  long layer = 0;
  long rows = 0, cols = 0;
};

std::vector<ParameterInfo> parameter_layout(const ModelSpec& spec);

// Parameters of layer `layer` occupy params[first_parameter[layer] ...].
std::vector<long> first_parameter(const ModelSpec& spec);

template <class T>
using Tensors = std::vector<Matrix<T>>;

// Everything backward needs from forward: the input of every layer.
template <class T>
struct Tape {
  Tensors<T> layer_inputs;
  Matrix<T> output;
};

inline NormShape layer_norm_shape(const ModelSpec& spec) { return {NormKind::layer, 1, spec.positions, spec.norm_eps}; }

template <class T>
Tape<T> forward(const ModelSpec& spec, const Tensors<T>& params, const Matrix<T>& x) {
  const std::vector<long> first = first_parameter(spec);
  Tape<T> tape;
  Matrix<T> h = stored(x, Storage::compute);
  for (std::size_t l = 0; l < spec.layers.size(); ++l) {
    tape.layer_inputs.push_back(h);
    const Matrix<T>* p = params.data() + first[l];
    switch (spec.layers[l].kind) {
      case LayerKind::linear: h = linear_forward(h, p[0], p[1]); break;
      case LayerKind::relu: h = relu_forward(h); break;
      case LayerKind::gelu: h = gelu_forward(h); break;
      case LayerKind::layer_norm: {
        const NormShape shape = layer_norm_shape(spec);
        h = norm_forward(shape, h, p[0], p[1], norm_statistics(shape, h));
        break;
      }
    }
    h = stored(h, Storage::compute);
  }
  tape.output = h;
  return tape;
}

// Fresh parameter gradients of one pass (not accumulated, not stored: the
// caller adds them into its accumulation buffer), given dy at the output.
template <class T>
Tensors<T> backward(const ModelSpec& spec, const Tensors<T>& params, const Tape<T>& tape, const Matrix<T>& dy_out) {
  const std::vector<long> first = first_parameter(spec);
  Tensors<T> grads(params.size());
  Matrix<T> dy = dy_out;
  for (std::size_t l = spec.layers.size(); l-- > 0;) {
    const Matrix<T>& x = tape.layer_inputs[l];
    const Matrix<T>* p = params.data() + first[l];
    Matrix<T> dx;
    switch (spec.layers[l].kind) {
      case LayerKind::linear: {
        LinearGrads<T> g = linear_backward(x, p[0], dy);
        grads[first[l]] = std::move(g.dw);
        grads[first[l] + 1] = std::move(g.db);
        dx = std::move(g.dx);
        break;
      }
      case LayerKind::relu: dx = relu_backward(x, dy); break;
      case LayerKind::gelu: dx = gelu_backward(x, dy); break;
      case LayerKind::layer_norm: {
        const NormShape shape = layer_norm_shape(spec);
        NormGrads<T> g = norm_backward(shape, x, p[0], dy, norm_statistics(shape, x));
        grads[first[l]] = std::move(g.dgamma);
        grads[first[l] + 1] = std::move(g.dbeta);
        dx = std::move(g.dx);
        break;
      }
    }
    // The first layer's dx is not needed; a kernel does not compute it.
    if (l > 0) dy = stored(dx, Storage::compute);
  }
  return grads;
}

}  // namespace gradeq::ref
