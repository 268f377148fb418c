// model.cpp — model description: names, validation, parameter layout.
#include "reference/model.h"

#include <sstream>

namespace gradeq::ref {

std::string layer_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::linear: return "linear";
    case LayerKind::relu: return "relu";
    case LayerKind::gelu: return "gelu";
    case LayerKind::gelu_erf: return "gelu_erf";
    case LayerKind::layer_norm: return "layernorm";
    case LayerKind::batch_norm: return "batchnorm";
    case LayerKind::group_norm: return "groupnorm";
    case LayerKind::rms_norm: return "rmsnorm";
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
    if (l.kind == LayerKind::group_norm) os << "(" << l.groups << " groups)";
  }
  os << " -> " << loss_name(spec.loss);
  if (spec.positions > 1) os << ", " << spec.positions << " positions/sample";
  return os.str();
}

void validate(const ModelSpec& spec) {
  if (spec.input_features < 1) throw std::invalid_argument("model: input features must be >= 1");
  if (spec.positions < 1) throw std::invalid_argument("model: positions per sample must be >= 1");
  if (!(spec.norm_eps > 0.0)) throw std::invalid_argument("model: norm eps must be > 0");
  if (!(spec.bn_momentum >= 0.0 && spec.bn_momentum <= 1.0))
    throw std::invalid_argument("model: batchnorm momentum must be in [0, 1]");
  const std::vector<long> widths = layer_widths(spec);
  for (std::size_t l = 0; l < spec.layers.size(); ++l) {
    const LayerSpec& layer = spec.layers[l];
    const std::string where = "model: layer " + std::to_string(l) + " (" + layer_name(layer.kind) + ")";
    if (layer.kind == LayerKind::linear && layer.features < 1)
      throw std::invalid_argument(where + " needs >= 1 output features");
    if (layer.kind == LayerKind::group_norm && (layer.groups < 1 || widths[l] % layer.groups != 0))
      throw std::invalid_argument(where + ": " + std::to_string(layer.groups) + " groups do not divide " +
                                  std::to_string(widths[l]) + " channels");
  }
  const long out = widths.back();
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
      case LayerKind::batch_norm:
      case LayerKind::group_norm:
        out.push_back({prefix + "weight", static_cast<long>(l), 1, in});
        out.push_back({prefix + "bias", static_cast<long>(l), 1, in});
        break;
      case LayerKind::rms_norm: out.push_back({prefix + "weight", static_cast<long>(l), 1, in}); break;
      case LayerKind::relu:
      case LayerKind::gelu:
      case LayerKind::gelu_erf: break;
    }
  }
  return out;
}

std::vector<ParameterInfo> buffer_layout(const ModelSpec& spec) {
  const std::vector<long> widths = layer_widths(spec);
  std::vector<ParameterInfo> out;
  for (std::size_t l = 0; l < spec.layers.size(); ++l) {
    if (spec.layers[l].kind != LayerKind::batch_norm) continue;
    const std::string prefix = "layer" + std::to_string(l) + ".";
    out.push_back({prefix + "running_mean", static_cast<long>(l), 1, widths[l]});
    out.push_back({prefix + "running_var", static_cast<long>(l), 1, widths[l]});
  }
  return out;
}

std::vector<long> first_buffer(const ModelSpec& spec) {
  std::vector<long> first(spec.layers.size() + 1, 0);
  long b = 0;
  for (std::size_t l = 0; l < spec.layers.size(); ++l) {
    first[l] = b;
    if (spec.layers[l].kind == LayerKind::batch_norm) b += 2;
  }
  first[spec.layers.size()] = b;
  return first;
}

double initial_buffer_value(const ParameterInfo& b) { return b.name.ends_with("running_var") ? 1.0 : 0.0; }

bool is_norm(LayerKind kind) {
  return kind == LayerKind::layer_norm || kind == LayerKind::batch_norm || kind == LayerKind::group_norm ||
         kind == LayerKind::rms_norm;
}

bool has_batch_norm(const ModelSpec& spec) {
  for (const LayerSpec& l : spec.layers)
    if (l.kind == LayerKind::batch_norm) return true;
  return false;
}

NormShape norm_shape(const ModelSpec& spec, const LayerSpec& layer) {
  NormShape s;
  s.positions = spec.positions;
  s.eps = spec.norm_eps;
  switch (layer.kind) {
    case LayerKind::layer_norm: s.kind = NormKind::layer; break;
    case LayerKind::rms_norm: s.kind = NormKind::rms; break;
    case LayerKind::batch_norm: s.kind = NormKind::batch; break;
    case LayerKind::group_norm:
      s.kind = NormKind::group;
      s.groups = layer.groups;
      break;
    default: throw std::logic_error("norm_shape: not a normalizer");
  }
  return s;
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
