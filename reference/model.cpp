// model.cpp — model description: names, validation, parameter layout.
#include "reference/model.h"

#include <sstream>

namespace gradeq::ref {

std::string layer_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::linear: return "linear";
    case LayerKind::relu: return "relu";
    case LayerKind::gelu: return "gelu";
    case LayerKind::layer_norm: return "layernorm";
  }
  return "?";
}

std::string loss_name(LossKind kind) {
  switch (kind) {
    case LossKind::mse: return "mse";
    case LossKind::cross_entropy: return "cross_entropy";
  }
  return "?";
}

std::string describe(const ModelSpec& spec) {
  std::ostringstream os;
  os << "in(" << spec.input_features << ")";
  for (const LayerSpec& l : spec.layers) {
    os << "-" << layer_name(l.kind);
    if (l.kind == LayerKind::linear) os << "(" << l.features << ")";
  }
  os << " -> " << loss_name(spec.loss);
  if (spec.positions > 1) os << ", " << spec.positions << " positions/sample";
  return os.str();
}

void validate(const ModelSpec& spec) {
  if (spec.input_features < 1) throw std::invalid_argument("model: input features must be >= 1");
  if (spec.positions < 1) throw std::invalid_argument("model: positions per sample must be >= 1");
  if (!(spec.norm_eps > 0.0)) throw std::invalid_argument("model: norm eps must be > 0");
  for (std::size_t l = 0; l < spec.layers.size(); ++l)
    if (spec.layers[l].kind == LayerKind::linear && spec.layers[l].features < 1)
      throw std::invalid_argument("model: layer " + std::to_string(l) + " (linear) needs >= 1 output features");
  const long out = layer_widths(spec).back();
  if (spec.loss == LossKind::cross_entropy && out < 2)
    throw std::invalid_argument("model: cross-entropy needs >= 2 output classes");
}

std::vector<long> layer_widths(const ModelSpec& spec) {
  std::vector<long> widths{spec.input_features};
  for (const LayerSpec& l : spec.layers) widths.push_back(l.kind == LayerKind::linear ? l.features : widths.back());
  return widths;
}

std::vector<ParameterInfo> parameter_layout(const ModelSpec& spec) {
  const std::vector<long> widths = layer_widths(spec);
  std::vector<ParameterInfo> out;
  for (std::size_t l = 0; l < spec.layers.size(); ++l) {
    const std::string prefix = "layer" + std::to_string(l) + ".";
    const long in = widths[l];
    switch (spec.layers[l].kind) {
      case LayerKind::linear:
        out.push_back({prefix + "weight", static_cast<long>(l), spec.layers[l].features, in});
        out.push_back({prefix + "bias", static_cast<long>(l), 1, spec.layers[l].features});
        break;
      case LayerKind::layer_norm:
        out.push_back({prefix + "weight", static_cast<long>(l), 1, in});
        out.push_back({prefix + "bias", static_cast<long>(l), 1, in});
        break;
      case LayerKind::relu:
      case LayerKind::gelu: break;
    }
  }
  return out;
}

std::vector<long> first_parameter(const ModelSpec& spec) {
  std::vector<long> first(spec.layers.size() + 1, 0);
  const std::vector<ParameterInfo> layout = parameter_layout(spec);
  std::size_t p = 0;
  for (std::size_t l = 0; l < spec.layers.size(); ++l) {
    first[l] = static_cast<long>(p);
    while (p < layout.size() && layout[p].layer == static_cast<long>(l)) ++p;
  }
  first[spec.layers.size()] = static_cast<long>(p);
  return first;
}

}  // namespace gradeq::ref
