// registry.cpp — lookup of the records listed by the build.
#include "harness/core/ops/registry.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace gradeq {

std::vector<const OpRecord*> registered_ops();  // generated: harness/core/CMakeLists.txt

const std::vector<const OpRecord*>& all_ops() {
  static const std::vector<const OpRecord*> ops = [] {
    std::vector<const OpRecord*> v = registered_ops();
    std::sort(v.begin(), v.end(), [](const OpRecord* a, const OpRecord* b) { return a->name() < b->name(); });
    return v;
  }();
  return ops;
}

const OpRecord* op_named(std::string_view name) {
  for (const OpRecord* op : all_ops())
    if (op->name() == name) return op;
  return nullptr;
}

const OpRecord& record_of(const ref::Op& op) {
  const auto* record = dynamic_cast<const OpRecord*>(&op);
  if (!record) throw std::logic_error(std::string(op.name()).insert(0, "op ") + " is not a record of the registry");
  return *record;
}

std::string op_syntax() {
  std::string out;
  for (const OpRecord* op : all_ops()) {
    if (!out.empty()) out += ", ";
    if (op->combines()) {
      out.append("{ ").append(op->name()).append(" = [...] }");
    } else if (op->argument().empty()) {
      out += op->name();
    } else {
      out += std::string(op->name()) + ":<" + std::string(op->argument()) + ">";
    }
  }
  return out;
}

ref::LayerSpec parse_layer(std::string_view text) {
  const std::size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const OpRecord* op = op_named(name);
  const std::string quoted = std::string("'").append(text).append("'");
  if (!op || op->combines())
    throw std::invalid_argument(quoted + " is not an op: expected one of " + op_syntax());
  ref::LayerSpec layer{op, 0, {}};
  if (op->argument().empty()) {
    if (colon != std::string_view::npos)
      throw std::invalid_argument(quoted + ": " + std::string(name) + " takes no argument");
    return layer;
  }
  const std::string syntax = std::string(name) + ":<" + std::string(op->argument()) + ">";
  if (colon == std::string_view::npos) throw std::invalid_argument(quoted + ": expected " + syntax);
  const std::string_view digits = text.substr(colon + 1);
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), layer.argument);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || layer.argument < 1)
    throw std::invalid_argument(quoted + ": expected " + syntax + " with a positive integer");
  return layer;
}

ref::LayerSpec layer_of(std::string_view name, long argument) {
  const OpRecord* op = op_named(name);
  if (!op || op->combines()) throw std::logic_error(std::string("layer_of: no op named ").append(name));
  return {op, argument, {}};
}

ref::LayerSpec combinator_of(std::string_view name, std::vector<ref::LayerSpec> body) {
  const OpRecord* op = op_named(name);
  if (!op || !op->combines()) throw std::logic_error(std::string("combinator_of: no combinator named ").append(name));
  return {op, 0, std::move(body)};
}

std::string layer_text(const ref::LayerSpec& layer) {
  const std::string name(layer.op->name());
  return layer.op->argument().empty() || layer.op->combines() ? name : name + ":" + std::to_string(layer.argument);
}

std::optional<NormConfig> norm_config(const ref::Model& model, const ref::Node& node) {
  const std::optional<ref::NormShape> shape = node.op->norm_shape(model, node);
  if (!shape) return std::nullopt;
  NormConfig c;
  c.positions = shape->positions;
  c.eps = static_cast<float>(shape->eps);
  c.momentum = static_cast<float>(model.spec.bn_momentum);
  c.groups = shape->groups;
  c.kind = shape->kind;
  return c;
}

}  // namespace gradeq
