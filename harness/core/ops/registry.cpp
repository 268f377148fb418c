// registry.cpp — lookup of the records listed by the build.
#include "harness/core/ops/registry.h"

#include <algorithm>
#include <charconv>
#include <optional>
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
      for (const ref::OptionInfo& o : op->options())
        out += o.positional ? ":<" + std::string(o.name) + ">" : "[:" + std::string(o.name) + "=N]";
    }
  }
  return out;
}

namespace {

// A whole number >= 0 in digits only, or nullopt.
std::optional<long> whole_number(std::string_view digits) {
  long v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || v < 0 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  return v;
}

}  // namespace

std::vector<long> parse_options(const OpRecord& op, long argument, std::string_view rest) {
  const std::vector<ref::OptionInfo> info = op.options();
  std::vector<long> out;
  for (const ref::OptionInfo& o : info)
    out.push_back(o.default_value == ref::kSameAsArgument ? argument : o.default_value);
  std::vector<bool> given(info.size(), false);
  std::size_t positional = 0;
  while (!rest.empty()) {
    const std::size_t colon = rest.find(':');
    const std::string_view part = rest.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    const std::size_t eq = part.find('=');
    std::size_t i = info.size();
    if (eq == std::string_view::npos) {
      while (positional < info.size() && !info[positional].positional) ++positional;
      i = positional++;
      if (i >= info.size())
        throw std::invalid_argument(": '" + std::string(part) + "' is one option more than " + std::string(op.name()) +
                                    " takes");
    } else {
      for (std::size_t j = 0; j < info.size(); ++j)
        if (info[j].name == part.substr(0, eq)) i = j;
      if (i == info.size() || info[i].positional)
        throw std::invalid_argument(": " + std::string(op.name()) + " has no option '" +
                                    std::string(part.substr(0, eq)) + "'");
    }
    const std::optional<long> v = whole_number(eq == std::string_view::npos ? part : part.substr(eq + 1));
    if (!v || *v < info[i].minimum || *v > (1L << 30))
      throw std::invalid_argument(": its " + std::string(info[i].name) + " must be a whole number >= " +
                                  std::to_string(info[i].minimum) + ", digits only");
    if (given[i]) throw std::invalid_argument(": its " + std::string(info[i].name) + " is given twice");
    given[i] = true;
    out[i] = *v;
  }
  for (std::size_t i = 0; i < info.size(); ++i)
    if (info[i].positional && !given[i])
      throw std::invalid_argument(": expected " + std::string(op.name()) + ":<" + std::string(op.argument()) +
                                  ">:<" + std::string(info[i].name) + ">");
  return out;
}

ref::LayerSpec parse_layer(std::string_view text) {
  const std::size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const OpRecord* op = op_named(name);
  const std::string quoted = std::string("'").append(text).append("'");
  if (!op || op->combines())
    throw std::invalid_argument(quoted + " is not an op: expected one of " + op_syntax());
  ref::LayerSpec layer{op, 0, {}, {}};
  if (op->argument().empty()) {
    if (colon != std::string_view::npos)
      throw std::invalid_argument(quoted + ": " + std::string(name) + " takes no argument");
    return layer;
  }
  const std::string syntax = std::string(name) + ":<" + std::string(op->argument()) + ">";
  if (colon == std::string_view::npos) throw std::invalid_argument(quoted + ": expected " + syntax);
  const std::size_t more = text.find(':', colon + 1);
  const std::string_view digits = text.substr(colon + 1, more == std::string_view::npos ? more : more - colon - 1);
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), layer.argument);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || layer.argument < 1)
    throw std::invalid_argument(quoted + ": expected " + syntax + " with a positive integer");
  if (more != std::string_view::npos || !op->options().empty()) {
    try {
      layer.options = parse_options(*op, layer.argument,
                                    more == std::string_view::npos ? std::string_view{} : text.substr(more + 1));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(quoted + e.what());
    }
  }
  return layer;
}

ref::LayerSpec layer_of(std::string_view name, long argument) {
  const OpRecord* op = op_named(name);
  if (!op || op->combines()) throw std::logic_error(std::string("layer_of: no op named ").append(name));
  return {op, argument, {}, {}};
}

ref::LayerSpec combinator_of(std::string_view name, std::vector<ref::LayerSpec> body) {
  const OpRecord* op = op_named(name);
  if (!op || !op->combines()) throw std::logic_error(std::string("combinator_of: no combinator named ").append(name));
  return {op, 0, std::move(body), {}};
}

std::string layer_text(const ref::LayerSpec& layer) {
  const std::string name(layer.op->name());
  if (layer.op->argument().empty() || layer.op->combines()) return name;
  std::string out = name + ":" + std::to_string(layer.argument);
  const std::vector<ref::OptionInfo> info = layer.op->options();
  for (std::size_t i = 0; i < info.size() && i < layer.options.size(); ++i) {
    const long fallback = info[i].default_value == ref::kSameAsArgument ? layer.argument : info[i].default_value;
    if (info[i].positional) {
      out += ":" + std::to_string(layer.options[i]);
    } else if (layer.options[i] != fallback) {
      out += ":" + std::string(info[i].name) + "=" + std::to_string(layer.options[i]);
    }
  }
  return out;
}

std::optional<NormConfig> norm_config(const ref::Model& model, const ref::Node& node) {
  const std::optional<ref::NormShape> shape = node.op->norm_shape(model, node);
  if (!shape) return std::nullopt;
  NormConfig c;
  c.positions = shape->positions;
  c.spatial = shape->spatial;
  c.eps = static_cast<float>(shape->eps);
  c.momentum = static_cast<float>(model.spec.bn_momentum);
  c.groups = shape->groups;
  c.kind = shape->kind;
  return c;
}

}  // namespace gradeq
