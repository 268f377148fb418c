// config.cpp — TOML scenarios, strictly validated.
#include "harness/core/config.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <toml++/toml.h>

#include "harness/core/ops/registry.h"
#include "kernels/dtype.h"

namespace gradeq {
namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) { throw std::invalid_argument(where + ": " + what); }

long positive_integer(const toml::node& n, const std::string& where, const std::string& key) {
  const auto v = n.value<long long>();
  if (!v || !n.is_integer()) fail(where, key + " must be an integer");
  if (*v < 1) fail(where, key + " must be >= 1, got " + std::to_string(*v));
  return static_cast<long>(*v);
}

std::string text(const toml::node& n, const std::string& where, const std::string& key) {
  const auto v = n.value<std::string>();
  if (!v) fail(where, key + " must be a string");
  return *v;
}

template <class Enum>
Enum choose(const std::string& value, const std::vector<std::pair<std::string, Enum>>& options, const std::string& where,
            const std::string& key) {
  std::string names;
  for (const auto& [name, e] : options) {
    if (name == value) return e;
    names += (names.empty() ? "" : ", ") + name;
  }
  fail(where, key + " = \"" + value + "\" is not one of: " + names);
}

// "name:<count>" -> count, for linear:<features> and groupnorm:<groups>:
// decimal digits only (no sign, no spaces, no leading zero), >= 1.
long layer_count(const std::string& s, std::size_t prefix, const std::string& where, const std::string& expected) {
  const std::string n = s.substr(prefix);
  long value = 0;
  const auto [end, error] = std::from_chars(n.data(), n.data() + n.size(), value);
  const bool digits = !n.empty() && std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || error != std::errc() || end != n.data() + n.size() || n[0] == '0')
    fail(where, "layer \"" + s + "\": expected " + expected + " (a whole number >= 1, digits only)");
  if (value > kMaxElements) fail(where, "layer \"" + s + "\": at most " + std::to_string(kMaxElements));
  return value;
}

ref::LayerSpec layer(const std::string& s, const std::string& where) {
  const std::string name = s.substr(0, s.find(':'));
  const OpRecord* op = op_named(name);
  if (!op || op->combines() || (op->argument().empty() && name.size() < s.size()))
    fail(where, "layer = \"" + s + "\" is not one of: " + op_syntax());
  if (op->argument().empty()) return {op, 0, {}, {}};
  const std::string syntax = name + ":<" + std::string(op->argument()) + ">";
  if (name.size() == s.size()) fail(where, "layer \"" + s + "\": expected " + syntax);
  const std::size_t more = s.find(':', name.size() + 1);
  if (more == std::string::npos && op->options().empty()) return {op, layer_count(s, name.size() + 1, where, syntax), {}, {}};
  ref::LayerSpec l{op, layer_count(s.substr(0, more), name.size() + 1, where, syntax), {}, {}};
  try {
    l.options = parse_options(*op, l.argument, more == std::string::npos ? std::string_view{} : std::string_view(s).substr(more + 1));
  } catch (const std::invalid_argument& e) {
    fail(where, "layer \"" + s + "\"" + e.what());
  }
  return l;
}

// A layer list: op strings, and combinators as one-key tables
// { residual = [...] }, nested. `path` names the list in messages:
// "layers", "layers[2].residual".
std::vector<ref::LayerSpec> layer_list(const toml::node& n, const std::string& where, const std::string& path) {
  const toml::array* list = n.as_array();
  if (!list || list->empty())
    fail(where, path + " must be a non-empty list like [\"linear:8\", \"relu\", \"linear:2\"]");
  std::vector<ref::LayerSpec> out;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const toml::node& l = (*list)[i];
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (const toml::table* t = l.as_table()) {
      if (t->size() != 1) fail(where, at + ": a combinator is a table of one key, like { residual = [...] }");
      std::string name;
      const toml::node* body = nullptr;
      for (const auto& [key, value] : *t) {
        name = std::string(key.str());
        body = &value;
      }
      const OpRecord* op = op_named(name);
      if (!op || !op->combines()) fail(where, at + ": '" + name + "' is not a combinator (one of: " + op_syntax() + ")");
      out.push_back({op, 0, layer_list(*body, where, at + "." + name), {}});
      continue;
    }
    if (!l.is_string()) fail(where, at + " must be a string like \"linear:8\" or a table like { residual = [...] }");
    out.push_back(layer(*l.value<std::string>(), where + ", " + at));
  }
  return out;
}

nlohmann::json layers_json(const std::vector<ref::LayerSpec>& layers) {
  nlohmann::json out = nlohmann::json::array();
  for (const ref::LayerSpec& l : layers)
    out.push_back(l.op->combines() ? nlohmann::json{{std::string(l.op->name()), layers_json(l.body)}}
                                   : nlohmann::json(layer_text(l)));
  return out;
}

Split split_of(const toml::node& n, const std::string& where) {
  const toml::array* windows = n.as_array();
  if (!windows || windows->empty()) fail(where, "split must be a non-empty list of windows, e.g. [[4, 4], [3, 5]]");
  Split split;
  for (std::size_t w = 0; w < windows->size(); ++w) {
    const toml::array* mbs = (*windows)[w].as_array();
    const std::string at = where + ", split window " + std::to_string(w);
    if (!mbs || mbs->empty()) fail(at, "each window must be a non-empty list of micro-batch sizes");
    std::vector<long> sizes;
    for (const toml::node& m : *mbs) sizes.push_back(positive_integer(m, at, "micro-batch size"));
    split.push_back(sizes);
  }
  return split;
}

DType dtype_of(const std::string& s, const std::string& where, const std::string& key) {
  return choose<DType>(s, {{"float32", DType::f32}, {"bfloat16", DType::bf16}, {"float16", DType::f16}}, where, key);
}

ScenarioSpec scenario(const toml::table& t, const std::string& where_base, std::size_t index) {
  std::string where = where_base + ", scenario " + std::to_string(index);
  static const std::set<std::string> known = {
      "name", "input_features", "positions", "layers", "loss", "data", "split", "learning_rate", "seed",
      "normalization", "compute_dtype", "accumulate_dtype", "optimizer", "momentum", "dampening", "nesterov",
      "weight_decay", "betas", "eps", "clip_max_norm", "warmup_steps", "total_steps", "loss_scale",
      "dynamic_loss_scale", "growth_interval", "compensated", "norm_eps", "batchnorm_momentum", "tf32",
      "reduced_precision_reduction", "checkpoint_every", "growth_factor", "backoff_factor", "batchnorm_mode",
      "frozen", "accumulation", "vocabulary", "padding_token", "padding", "head_chunk", "image"};
  for (const auto& [key, value] : t)
    if (!known.count(std::string(key.str()))) fail(where, "unknown key '" + std::string(key.str()) + "'");
  for (const char* required : {"name", "layers", "split"})
    if (!t.contains(required)) fail(where, std::string("missing key '") + required + "'");
  const bool dense = t.contains("input_features") || t.contains("image");
  if (dense == t.contains("vocabulary"))
    fail(where, "give either 'input_features' or 'image' (dense inputs) or 'vocabulary' (token ids), not both or "
                "neither");

  ScenarioSpec s;
  s.name = text(*t.get("name"), where, "name");
  if (valid_scenario_name(s.name)) where += " (" + s.name + ")";  // a bad name is said by validate(), not echoed
  if (const toml::node* n = t.get("vocabulary")) {
    s.model.token_input = true;
    s.model.input_features = positive_integer(*n, where, "vocabulary");
  } else if (const toml::node* n = t.get("image")) {
    const toml::array* a = n->as_array();
    if (!a || a->size() != 3) fail(where, "image must be [channels, height, width], e.g. [3, 16, 16]");
    s.model.image = {positive_integer((*a)[0], where, "image channels"), positive_integer((*a)[1], where, "image height"),
                     positive_integer((*a)[2], where, "image width")};
    if (s.model.image.size() > kMaxElements) fail(where, "image: at most " + std::to_string(kMaxElements) + " values per sample");
    s.model.input_features = s.model.image.size();
    if (const toml::node* f = t.get("input_features"))
      if (positive_integer(*f, where, "input_features") != s.model.input_features)
        fail(where, "input_features must be the image's C H W = " + std::to_string(s.model.input_features) +
                        " (or left out)");
  } else {
    s.model.input_features = positive_integer(*t.get("input_features"), where, "input_features");
  }
  if (const toml::node* n = t.get("padding_token")) {
    if (!s.model.token_input) fail(where, "padding_token: only a model whose input is tokens (vocabulary) has one");
    const auto id = n->value<long long>();
    if (!id || !n->is_integer() || *id < 0) fail(where, "padding_token must be a token id, an integer >= 0");
    const long v = static_cast<long>(*id);
    if (v >= s.model.input_features) fail(where, "padding_token: must be a token id, in [0, vocabulary)");
    s.model.padding_token = v;
  }
  if (const toml::node* n = t.get("positions")) s.model.positions = positive_integer(*n, where, "positions");
  if (const toml::node* n = t.get("head_chunk")) {
    const toml::table* chunk = n->as_table();
    const auto has = [&](const char* key) { return chunk && chunk->contains(key); };
    if (!chunk || chunk->size() != 2 || !has("rows") || !has("vocabulary"))
      fail(where, "head_chunk must be { rows = R, vocabulary = C }: the tied head and its loss in blocks of R rows "
                  "by chunks of C vocabulary columns");
    s.model.head_chunk_rows = positive_integer(*chunk->get("rows"), where, "head_chunk.rows");
    s.model.head_chunk_vocabulary = positive_integer(*chunk->get("vocabulary"), where, "head_chunk.vocabulary");
  }
  s.model.layers = layer_list(*t.get("layers"), where, "layers");
  if (const toml::node* n = t.get("loss"))
    s.model.loss = choose<ref::LossKind>(text(*n, where, "loss"),
                                         {{"mse", ref::LossKind::mse},
                                          {"cross_entropy", ref::LossKind::cross_entropy},
                                          {"causal_lm", ref::LossKind::causal_lm}},
                                         where, "loss");
  if (const toml::node* n = t.get("data"))
    s.data = choose<DataKind>(text(*n, where, "data"),
                              {{"normal", DataKind::normal},
                               {"wide_range", DataKind::wide_range},
                               {"padded_sequences", DataKind::padded_sequences},
                               {"dyadic", DataKind::dyadic}},
                              where, "data");
  s.split = split_of(*t.get("split"), where);
  if (const toml::node* n = t.get("learning_rate")) {
    const auto v = n->value<double>();
    if (!v) fail(where, "learning_rate must be a number");
    s.procedure.optimizer.lr = *v;
  }
  if (const toml::node* n = t.get("seed")) s.seed = static_cast<std::uint64_t>(positive_integer(*n, where, "seed"));
  if (const toml::node* n = t.get("normalization"))
    s.procedure.normalization = choose<ref::Normalization>(
        text(*n, where, "normalization"),
        {{"global_count", ref::Normalization::global_count}, {"equal_split", ref::Normalization::equal_split}}, where,
        "normalization");
  if (const toml::node* n = t.get("compute_dtype")) s.precision.compute = dtype_of(text(*n, where, "compute_dtype"), where, "compute_dtype");
  if (const toml::node* n = t.get("accumulate_dtype"))
    s.precision.accumulate = dtype_of(text(*n, where, "accumulate_dtype"), where, "accumulate_dtype");
  ref::OptimizerSpec& o = s.procedure.optimizer;
  if (const toml::node* n = t.get("optimizer"))
    o.kind = choose<ref::OptimizerKind>(
        text(*n, where, "optimizer"),
        {{"sgd", ref::OptimizerKind::sgd}, {"adam", ref::OptimizerKind::adam}, {"adamw", ref::OptimizerKind::adamw}},
        where, "optimizer");
  auto number = [&](const char* key, double& to) {
    if (const toml::node* n = t.get(key)) {
      const auto v = n->value<double>();
      if (!v) fail(where, std::string(key) + " must be a number");
      to = *v;
    }
  };
  auto flag = [&](const char* key, bool& to) {
    if (const toml::node* n = t.get(key)) {
      const auto v = n->value<bool>();
      if (!v || !n->is_boolean()) fail(where, std::string(key) + " must be true or false");
      to = *v;
    }
  };
  number("momentum", o.momentum);
  number("dampening", o.dampening);
  flag("nesterov", o.nesterov);
  number("weight_decay", o.weight_decay);
  number("eps", o.eps);
  if (const toml::node* n = t.get("betas")) {
    const toml::array* b = n->as_array();
    if (!b || b->size() != 2 || !(*b)[0].value<double>() || !(*b)[1].value<double>())
      fail(where, "betas must be a list of two numbers, e.g. [0.9, 0.999]");
    o.beta1 = *(*b)[0].value<double>();
    o.beta2 = *(*b)[1].value<double>();
  }
  if (t.contains("clip_max_norm")) {
    s.procedure.clip.enabled = true;
    number("clip_max_norm", s.procedure.clip.max_norm);
  }
  if (t.contains("warmup_steps") != t.contains("total_steps"))
    fail(where, "warmup_steps and total_steps go together (linear warmup, then cosine to total_steps)");
  if (t.contains("warmup_steps")) {
    s.procedure.schedule.warmup_cosine = true;
    s.procedure.schedule.warmup_steps = static_cast<long>(t.get("warmup_steps")->value<long long>().value_or(-1));
    s.procedure.schedule.total_steps = positive_integer(*t.get("total_steps"), where, "total_steps");
    if (!t.get("warmup_steps")->is_integer()) fail(where, "warmup_steps must be an integer");
  }
  number("loss_scale", s.procedure.loss_scaling.scale);
  flag("dynamic_loss_scale", s.procedure.loss_scaling.dynamic);
  if (const toml::node* n = t.get("growth_interval"))
    s.procedure.loss_scaling.growth_interval = positive_integer(*n, where, "growth_interval");
  number("growth_factor", s.procedure.loss_scaling.growth_factor);
  number("backoff_factor", s.procedure.loss_scaling.backoff_factor);
  if (const toml::node* n = t.get("batchnorm_mode"))
    s.procedure.batch_norm = choose<ref::BatchNormMode>(
        text(*n, where, "batchnorm_mode"),
        {{"per_micro_batch", ref::BatchNormMode::per_micro_batch}, {"exact_window", ref::BatchNormMode::exact_window}},
        where, "batchnorm_mode");
  if (const toml::node* n = t.get("padding"))
    s.procedure.padding = choose<ref::Padding>(
        text(*n, where, "padding"),
        {{"fixed", ref::Padding::fixed}, {"micro_batch", ref::Padding::micro_batch}, {"window", ref::Padding::window}},
        where, "padding");
  if (const toml::node* n = t.get("frozen")) {
    const toml::array* names = n->as_array();
    if (!names) fail(where, "frozen must be a list of parameter names, e.g. [\"layer0.weight\", \"layer0.bias\"]");
    const std::vector<ref::ParameterInfo> layout = ref::parameter_layout(s.model);
    for (const toml::node& f : *names) {
      const std::string name = text(f, where, "frozen");
      std::size_t p = 0;
      while (p < layout.size() && layout[p].name != name) ++p;
      std::string known;
      for (const ref::ParameterInfo& i : layout) known += (known.empty() ? "" : ", ") + i.name;
      if (p == layout.size()) fail(where, "frozen: '" + name + "' is not a parameter of the model (" + known + ")");
      if (s.procedure.is_frozen(p)) fail(where, "frozen: '" + name + "' is listed twice");
      s.procedure.frozen.push_back(p);
    }
    std::sort(s.procedure.frozen.begin(), s.procedure.frozen.end());
  }
  flag("compensated", s.procedure.compensated);
  if (const toml::node* n = t.get("accumulation"))
    s.procedure.staged = choose<bool>(text(*n, where, "accumulation"), {{"fused", false}, {"staged", true}}, where,
                                      "accumulation");
  if (s.procedure.staged && s.procedure.compensated)
    fail(where, "accumulation = \"staged\" with compensated = true: Kahan-compensated accumulation stages each "
                "micro-batch's gradient in float32 already; choose one");
  if (const toml::node* n = t.get("checkpoint_every")) s.checkpoint_every = positive_integer(*n, where, "checkpoint_every");
  // A key that does not apply to what the scenario is would be ignored:
  // refused instead, saying why.
  const auto not_for = [&](const char* key, bool applies, const std::string& why) {
    if (t.contains(key) && !applies) fail(where, std::string("key '") + key + "' does not apply: " + why);
  };
  const bool sgd = o.kind == ref::OptimizerKind::sgd;
  for (const char* key : {"betas", "eps"}) not_for(key, !sgd, "the optimizer is sgd (betas and eps are adam's and adamw's)");
  for (const char* key : {"momentum", "dampening", "nesterov"})
    not_for(key, sgd, std::string("the optimizer is ") + (o.kind == ref::OptimizerKind::adam ? "adam" : "adamw") +
                          " (momentum, dampening and nesterov are sgd's)");
  for (const char* key : {"growth_interval", "growth_factor", "backoff_factor"})
    not_for(key, s.procedure.loss_scaling.dynamic, "dynamic_loss_scale is not true");
  not_for("batchnorm_mode", ref::has_batch_norm(s.model), "the model has no batchnorm");
  const bool any_norm = ref::any_op(s.model, [](const ref::Op& op) { return op.normalizes(); });
  not_for("norm_eps", any_norm, "the model has no normalizer");
  not_for("batchnorm_momentum", ref::has_batch_norm(s.model), "the model has no batchnorm");
  flag("tf32", s.precision.tf32);
  flag("reduced_precision_reduction", s.precision.reduced_precision_reduction);
  number("norm_eps", s.model.norm_eps);
  number("batchnorm_momentum", s.model.bn_momentum);
  try {
    validate(s);
  } catch (const std::invalid_argument& e) {
    fail(where, e.what());
  }
  return s;
}

// A JSON value as the TOML node the reader takes: the same keys, the same
// checks. Integers stay integers, so "an integer" means the same in both.
toml::array toml_array(const nlohmann::json& j, const std::string& where);

template <class Container>
void push_toml(Container& out, const nlohmann::json& v, const std::string& where) {
  if (v.is_boolean()) {
    out.push_back(v.get<bool>());
  } else if (v.is_number_unsigned() || v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      fail(where, "integer " + v.dump() + " is too large");
    out.push_back(v.get<std::int64_t>());
  } else if (v.is_number_float()) {
    out.push_back(v.get<double>());
  } else if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    out.push_back(toml_array(v, where));
  } else if (v.is_object()) {  // a combinator in a layer list: { "residual": [...] }
    toml::table t;
    for (const auto& [key, value] : v.items()) {
      toml::array one;
      push_toml(one, value, where);
      t.insert(key, std::move(one[0]));
    }
    out.push_back(std::move(t));
  } else {
    fail(where, "unexpected value " + v.dump().substr(0, 60));
  }
}

toml::array toml_array(const nlohmann::json& j, const std::string& where) {
  toml::array a;
  for (const nlohmann::json& v : j) push_toml(a, v, where);
  return a;
}

}  // namespace

nlohmann::json scenario_to_json(const ScenarioSpec& s) {
  const nlohmann::json layers = layers_json(s.model.layers);
  const ref::ProcedureConfig& p = s.procedure;
  const ref::OptimizerSpec& o = p.optimizer;
  nlohmann::json j = {
      {"name", s.name},
      {s.model.token_input ? "vocabulary" : "input_features", s.model.input_features},
      {"positions", s.model.positions},
      {"layers", layers},
      {"loss", ref::loss_name(s.model.loss)},
      {"norm_eps", s.model.norm_eps},
      {"batchnorm_momentum", s.model.bn_momentum},
      {"data", data_kind_name(s.data)},
      {"split", s.split},
      {"seed", s.seed},
      {"normalization", p.normalization == ref::Normalization::global_count ? "global_count" : "equal_split"},
      {"compute_dtype", std::string(dtype_name(s.precision.compute))},
      {"accumulate_dtype", std::string(dtype_name(s.precision.accumulate))},
      {"compensated", p.compensated},
      {"accumulation", p.staged ? "staged" : "fused"},
      {"tf32", s.precision.tf32},
      {"reduced_precision_reduction", s.precision.reduced_precision_reduction},
      {"optimizer", o.kind == ref::OptimizerKind::sgd ? "sgd" : o.kind == ref::OptimizerKind::adam ? "adam" : "adamw"},
      {"learning_rate", o.lr},
      {"weight_decay", o.weight_decay},
      {"loss_scale", p.loss_scaling.scale},
      {"dynamic_loss_scale", p.loss_scaling.dynamic},
  };
  if (s.data == DataKind::files) {  // not generated: neither a data kind nor a seed to write
    j.erase("data");
    j.erase("seed");
  }
  // Every key that applies, defaults included (the reader refuses the others).
  if (p.loss_scaling.dynamic) {
    j["growth_interval"] = p.loss_scaling.growth_interval;
    j["growth_factor"] = p.loss_scaling.growth_factor;
    j["backoff_factor"] = p.loss_scaling.backoff_factor;
  }
  nlohmann::json frozen = nlohmann::json::array();
  const std::vector<ref::ParameterInfo> layout = ref::parameter_layout(s.model);
  for (std::size_t f : p.frozen) frozen.push_back(layout[f].name);
  j["frozen"] = frozen;
  if (ref::has_batch_norm(s.model))
    j["batchnorm_mode"] = p.batch_norm == ref::BatchNormMode::per_micro_batch ? "per_micro_batch" : "exact_window";
  if (!ref::any_op(s.model, [](const ref::Op& op) { return op.normalizes(); })) j.erase("norm_eps");
  if (!ref::has_batch_norm(s.model)) j.erase("batchnorm_momentum");
  if (o.kind == ref::OptimizerKind::sgd) {
    j["momentum"] = o.momentum;
    j["dampening"] = o.dampening;
    j["nesterov"] = o.nesterov;
  } else {
    j["betas"] = {o.beta1, o.beta2};
    j["eps"] = o.eps;
  }
  if (p.clip.enabled) j["clip_max_norm"] = p.clip.max_norm;
  if (s.checkpoint_every > 0) j["checkpoint_every"] = s.checkpoint_every;
  if (s.model.padding_token >= 0) j["padding_token"] = s.model.padding_token;
  if (s.model.image.is_image()) j["image"] = {s.model.image.channels, s.model.image.height, s.model.image.width};
  if (s.model.head_chunk_rows > 0)
    j["head_chunk"] = {{"rows", s.model.head_chunk_rows}, {"vocabulary", s.model.head_chunk_vocabulary}};
  if (s.data == DataKind::padded_sequences)
    j["padding"] = p.padding == ref::Padding::fixed         ? "fixed"
                   : p.padding == ref::Padding::micro_batch ? "micro_batch"
                                                            : "window";
  if (p.schedule.warmup_cosine) {
    j["warmup_steps"] = p.schedule.warmup_steps;
    j["total_steps"] = p.schedule.total_steps;
  }
  return j;
}

ScenarioSpec scenario_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail(where, "the scenario must be an object of config keys");
  toml::table t;
  for (const auto& [key, value] : j.items()) {
    toml::array one;
    push_toml(one, value, where + ", key '" + key + "'");
    t.insert(key, *one.get(0));
  }
  return scenario(t, where, 0);
}

std::vector<ScenarioSpec> parse_scenarios(const std::string& toml_text, const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << source_name << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    throw std::invalid_argument(os.str());
  }
  for (const auto& [key, value] : root)
    if (key.str() != "scenario") fail(source_name, "unknown top-level key '" + std::string(key.str()) + "' (expected [[scenario]])");
  const toml::array* list = root.get_as<toml::array>("scenario");
  if (!list || list->empty()) fail(source_name, "no [[scenario]] tables");
  std::vector<ScenarioSpec> out;
  std::set<std::string> names;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const toml::table* t = (*list)[i].as_table();
    if (!t) fail(source_name, "scenario " + std::to_string(i) + " is not a table");
    out.push_back(scenario(*t, source_name, i));
    if (!names.insert(out.back().name).second) fail(source_name, "two scenarios are named '" + out.back().name + "'");
  }
  return out;
}

std::vector<ScenarioSpec> load_scenarios(const std::string& path) {
  // A config is a small text file: not a device, a pipe or a directory.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw std::invalid_argument("config file " + path + " is not a regular file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxConfigBytes)
    throw std::invalid_argument("config file " + path + " is larger than " + std::to_string(kMaxConfigBytes >> 20) +
                                " MiB: not a scenario file");
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read config file " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_scenarios(buffer.str(), path);
}

}  // namespace gradeq
