// window_set.cpp — the window-set format: the manifest and its files,
// written (write_window_set) and read with every check on what an external
// run hands in (read_window_set).
#include "harness/core/window_set.h"

#include <cmath>
#include <fstream>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "harness/core/config.h"
#include "harness/core/npy.h"

namespace gradeq {
namespace {

[[noreturn]] void bad(const std::string& where, const std::string& what) { throw WindowSetError(where + ": " + what); }

std::string torch_name(const std::string& gradeq_name) {
  // "layer3.weight" -> "3.weight", "layer1.0.bias" -> "1.0.bias": the same
  // tensor in a torch.nn.Sequential of the same layers, where a combinator
  // is a Sequential of its branch (docs/VERIFY.md).
  return gradeq_name.starts_with("layer") ? gradeq_name.substr(5) : gradeq_name;
}

// The model's graph as a reader sees it: per node, its place in its list
// ("layer"), its op, the module of a torch.nn.Sequential of the same
// layers ("torch_module", where a combinator is a Sequential of its
// branch), its widths, its argument, a normalizer's eps and a BatchNorm's
// momentum, and a combinator's branch ("body"), nested.
nlohmann::json nodes_json(const ref::Model& model, const std::vector<ref::LayerSpec>& layers, std::size_t& next) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t j = 0; j < layers.size(); ++j) {
    const ref::LayerSpec& l = layers[j];
    nlohmann::json body;
    if (l.op->combines()) body = nodes_json(model, l.body, next);
    const ref::Node& node = model.nodes[next++];
    nlohmann::json n = {{"layer", j},
                        {"kind", std::string(l.op->name())},
                        {"torch_module", torch_name(node.prefix)},
                        {"in_features", node.in_widths[0]},
                        {"out_features", node.out_width}};
    if (!l.op->argument().empty()) n["argument"] = l.argument;
    if (l.op->normalizes()) n["eps"] = model.spec.norm_eps;
    if (l.op->couples_samples()) n["momentum"] = model.spec.bn_momentum;
    if (l.op->combines()) n["body"] = body;
    out.push_back(n);
  }
  return out;
}

nlohmann::json model_json(const ScenarioSpec& s) {
  const ref::Model model(s.model);
  std::size_t next = 0;
  return {{s.model.token_input ? "vocabulary" : "input_features", s.model.input_features}, {"positions", s.model.positions},
          {"loss", ref::loss_name(s.model.loss)}, {"layers", nodes_json(model, s.model.layers, next)}};
}

nlohmann::json tensors_json(const std::vector<ref::ParameterInfo>& infos) {
  nlohmann::json out = nlohmann::json::array();
  for (const ref::ParameterInfo& p : infos)
    out.push_back({{"name", p.name}, {"shape", {p.rows, p.cols}}, {"torch", torch_name(p.name)}});
  return out;
}

}  // namespace

std::string window_set_file(const std::string& run, std::size_t window, const std::string& tensor) {
  std::string s = run + "_w" + std::to_string(window) + "_" + tensor;
  for (char& c : s)
    if (c == '/' || c == ':' || c == ' ') c = '_';
  return s + ".npy";
}

// ---------------------------------------------------------------- writer

int write_window_set(const std::filesystem::path& dir, const Scenario& scenario, const Runs& runs,
                     std::uint64_t run_seed) {
  std::filesystem::create_directories(dir);
  int files = 0;
  const auto write = [&](const std::string& file, const std::vector<long>& shape, const auto& values) {
    write_npy(dir / file, shape, std::span(values));
    ++files;
    return file;
  };
  const ScenarioSpec& spec = scenario.spec;
  nlohmann::json m = {{"format", kWindowSetFormat},
                      {"schema_version", kWindowSetSchemaVersion},
                      {"run_seed", run_seed},
                      {"scenario", scenario_to_json(spec)},
                      {"model", model_json(spec)},
                      {"parameters", tensors_json(scenario.schema.parameters)},
                      {"buffers", tensors_json(scenario.schema.buffers)}};
  nlohmann::json windows = nlohmann::json::array();
  for (std::size_t w = 0; w < scenario.windows.size(); ++w) {
    const ref::Batch& b = scenario.windows[w];
    const std::string prefix = "window" + std::to_string(w) + "_";
    nlohmann::json j = {{"split", spec.split[w]}, {"rows", b.rows()}};
    j["inputs"] = write(prefix + "inputs.npy", {b.inputs.rows(), b.inputs.cols()},
                        std::vector<double>(b.inputs.data(), b.inputs.data() + b.inputs.size()));
    if (b.targets.size() > 0)
      j["targets"] = write(prefix + "targets.npy", {b.targets.rows(), b.targets.cols()},
                           std::vector<double>(b.targets.data(), b.targets.data() + b.targets.size()));
    if (!b.classes.empty()) {
      j["classes"] = write(prefix + "classes.npy", {static_cast<long>(b.classes.size())},
                           std::vector<std::int32_t>(b.classes.begin(), b.classes.end()));
      std::vector<std::int32_t> mask;  // 1 for a token that counts, 0 for padding
      for (int c : b.classes) mask.push_back(c != ref::kIgnoreClass);
      j["mask"] = write(prefix + "mask.npy", {static_cast<long>(mask.size())}, mask);
    }
    windows.push_back(j);
  }
  m["windows"] = windows;
  nlohmann::json initial = nlohmann::json::object();
  const std::vector<ref::ParameterInfo>& layout = scenario.schema.parameters;
  for (std::size_t p = 0; p < layout.size(); ++p) {
    const auto& v = scenario.initial_params[p];
    initial[layout[p].name] =
        write("initial_" + layout[p].name + ".npy", {v.rows(), v.cols()}, std::vector<double>(v.data(), v.data() + v.size()));
  }
  m["initial"] = {{"parameters", initial}};

  nlohmann::json run_list = nlohmann::json::object();
  const auto kernel = [&](const std::string& name, const KernelRun& r, const char* split) {
    nlohmann::json ws = nlohmann::json::array();
    for (std::size_t w = 0; w < r.windows.size(); ++w) {
      nlohmann::json tensors = nlohmann::json::object();
      const KernelWindow& k = r.windows[w];
      for (const RecordEntry& e : scenario.schema.entries) {
        const RunTensor* t = find_optional(k, e.name);
        if (!t) continue;  // a skipped window's step, a missing gradient
        const std::string file = window_set_file(name, w, t->name);
        tensors[t->name] = is_float64(e) ? write(file, {t->rows, t->cols}, t->values)
                                         : write(file, {t->rows, t->cols},
                                                 std::vector<float>(t->values.begin(), t->values.end()));
      }
      nlohmann::json j = {{"skipped", k.skipped}, {"loss", k.loss}, {"fed", k.fed}, {"tensors", tensors}};
      if (!k.missing_gradients.empty()) j["missing_gradients"] = k.missing_gradients;
      ws.push_back(j);
    }
    run_list[name] = {{"role", "kernel"}, {"split", split}, {"windows", ws}};
  };
  const auto reference = [&](const std::string& name, const ReferenceRun& r, const char* split) {
    nlohmann::json ws = nlohmann::json::array();
    for (std::size_t w = 0; w < r.windows.size(); ++w) {
      nlohmann::json tensors = nlohmann::json::object();
      for (const ReferenceTensor& t : r.windows[w].tensors)
        tensors[t.name] = write(window_set_file(name, w, t.name), {t.rows, t.cols}, t.value);
      ws.push_back({{"skipped", r.windows[w].skipped}, {"loss", r.windows[w].loss}, {"tensors", tensors}});
    }
    run_list[name] = {{"role", "reference"}, {"split", split}, {"windows", ws}};
  };
  kernel("K_acc", runs.k_acc, "accumulated");
  if (!runs.k_full.windows.empty()) kernel("K_full", runs.k_full, "full");
  reference("R_acc", runs.r_acc, "accumulated");
  reference("R_full", runs.r_full, "full");
  m["runs"] = run_list;

  // The bounds the verdicts used, per element: kernel correctness (each
  // kernel run against the reference from its own state) and accumulation
  // equivalence (K_acc against R_full from K_acc's state).
  nlohmann::json bounds = nlohmann::json::object();
  const auto write_kernel_bounds = [&](const std::string& name, const ReferenceRun& r) {
    nlohmann::json ws = nlohmann::json::array();
    for (std::size_t w = 0; w < r.windows.size(); ++w) {
      nlohmann::json tensors = nlohmann::json::object();
      for (const ReferenceTensor& t : r.windows[w].tensors)
        tensors[t.name] = write(window_set_file("bound_" + name, w, t.name), {t.rows, t.cols}, kernel_bounds(t));
      ws.push_back({{"tensors", tensors}});
    }
    bounds[name] = {{"verdict", "kernel correctness"}, {"windows", ws}};
  };
  write_kernel_bounds("K_acc", runs.r_acc_at_k_acc);
  if (!runs.k_full.windows.empty()) write_kernel_bounds("K_full", runs.r_full_at_k_full);
  nlohmann::json ws = nlohmann::json::array();
  for (std::size_t w = 0; w < runs.r_full_at_k_acc.windows.size(); ++w) {
    nlohmann::json tensors = nlohmann::json::object();
    for (const ReferenceTensor& full : runs.r_full_at_k_acc.windows[w].tensors) {
      const ReferenceTensor* acc = find_optional(runs.r_acc_at_k_acc.windows[w], full.name);
      if (!acc) continue;
      tensors[full.name] = write(window_set_file("bound_accumulation", w, full.name), {full.rows, full.cols},
                                 accumulation_bounds(*acc, full));
    }
    ws.push_back({{"tensors", tensors}});
  }
  bounds["accumulation"] = {{"verdict", "accumulation equivalence"}, {"windows", ws}};
  m["bounds"] = bounds;

  std::ofstream out(dir / "manifest.json");
  out << m.dump(2) << "\n";
  if (!out) throw std::runtime_error("cannot write " + (dir / "manifest.json").string());
  return files + 1;
}

// ---------------------------------------------------------------- reader

namespace {

// A tensor's values must be numbers of the dtype its run stores it in:
// float32 for weights and state, the accumulation dtype for gradients.
// NaN and Inf are numbers of every dtype here (they fail the verdict).
bool of_dtype(double v, DType d) {
  if (!std::isfinite(v)) return true;
  const float f = static_cast<float>(v);
  return static_cast<double>(f) == v && round_to(f, d) == f;
}

DType dtype_of_entry(const RecordEntry& e, const PrecisionSpec& p) { return is_gradient(e.kind) ? p.accumulate : DType::f32; }

void expect_shape(const NpyArray& a, const std::vector<long>& shape, const std::string& file, const std::string& what) {
  if (a.shape == shape) return;
  const auto text = [](const std::vector<long>& s) {
    std::string out = "(";
    for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + ")";
  };
  bad(file, what + " has shape " + text(a.shape) + ", expected " + text(shape));
}

void expect_floats(const NpyArray& a, const std::string& file) {
  if (a.descr != "<f4" && a.descr != "<f8") bad(file, "is " + npy_dtype_name(a.descr) + "; float32 or float64 expected");
}

// Data a run starts from (inputs, initial parameters and state) must be
// finite: a NaN there is the export's fault, not the run's.
void expect_finite(const NpyArray& a, const std::string& file, const std::string& rule) {
  for (double v : a.values)
    if (!std::isfinite(v)) bad(file, "holds NaN or Inf: " + rule);
}

// The files of a window set. Every .npy in its directory must be named by
// the manifest, so that a tensor the run does not record, or a misspelt
// name, is refused rather than ignored.
class Reader {
 public:
  explicit Reader(std::filesystem::path dir) : dir_(std::move(dir)) {}

  // A file the manifest names: a plain name in the directory, which exists.
  NpyArray array(const nlohmann::json& name, const std::string& what) {
    if (!name.is_string()) bad("manifest.json", what + " must name a file");
    const std::string file = name.get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos || file == "..")
      bad("manifest.json", what + ": '" + file + "' is not a file name in the directory");
    named_.insert(file);
    if (!std::filesystem::is_regular_file(dir_ / file)) bad(file, "is missing (" + what + ")");
    try {
      return read_npy(dir_ / file);
    } catch (const NpyError& e) {
      throw WindowSetError(e.what());
    }
  }
  // The same, float32 or float64 and of the given shape.
  NpyArray floats(const nlohmann::json& name, const std::string& what, const std::vector<long>& shape,
                  const std::string& tensor) {
    NpyArray a = array(name, what);
    const std::string file = name.get<std::string>();
    expect_floats(a, file);
    expect_shape(a, shape, file, tensor);
    return a;
  }
  // Every file name in j, at any depth: files the set holds that verify
  // does not read.
  void remember_all(const nlohmann::json& j) {
    if (j.is_string()) named_.insert(j.get<std::string>());
    if (j.is_array() || j.is_object())
      for (const auto& v : j) remember_all(v);
  }
  void refuse_extra_files() const {
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      const std::string file = entry.path().filename().string();
      if (entry.path().extension() == ".npy" && !named_.count(file))
        bad(file, "is not named by manifest.json (an extra file: a tensor the run does not record, or a misspelt name)");
    }
  }

 private:
  std::filesystem::path dir_;
  std::set<std::string> named_;
};

// The manifest, its format and schema version (3 is 4 without combinators
// in the model), its keys all known and its required sections present.
nlohmann::json read_manifest(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) throw WindowSetError(dir.string() + ": not a directory");
  const std::filesystem::path manifest_path = dir / "manifest.json";
  std::ifstream in(manifest_path);
  if (!in) throw WindowSetError(manifest_path.string() + ": missing (a window set needs its manifest)");
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    bad("manifest.json", std::string("is not JSON: ") + e.what());
  }
  if (!m.is_object() || m.value("format", "") != kWindowSetFormat)
    bad("manifest.json", std::string("\"format\" must be \"") + kWindowSetFormat + "\"");
  if (!m.contains("schema_version") || !m.at("schema_version").is_number_integer() ||
      (m.at("schema_version").get<long>() != kWindowSetSchemaVersion && m.at("schema_version").get<long>() != 3))
    bad("manifest.json", "schema_version " + (m.contains("schema_version") ? m.at("schema_version").dump() : "missing") +
                             ": this gradeq reads versions 3 and " + std::to_string(kWindowSetSchemaVersion) +
                             " (version 2 recorded the gradient after the clip: export the run again with this "
                             "gradeq's python/gradeq_export)");
  for (const auto& [key, value] : m.items()) {
    static const std::set<std::string> known = {"format", "schema_version", "run_seed", "scenario", "model",
                                                "parameters", "buffers", "windows", "initial", "runs", "bounds",
                                                "tied_gradient"};
    if (!known.count(key)) bad("manifest.json", "unknown key '" + key + "'");
  }
  for (const char* key : {"scenario", "windows", "initial", "runs"})
    if (!m.contains(key)) bad("manifest.json", std::string("has no \"") + key + "\"");
  return m;
}

// "scenario": the scenario as config keys. Its data are the set's files,
// whatever generated them.
ScenarioSpec read_scenario(const nlohmann::json& scenario) {
  ScenarioSpec spec;
  try {
    spec = scenario_from_json(scenario, "manifest.json: scenario");
  } catch (const WindowSetError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw WindowSetError(e.what());
  }
  spec.data = DataKind::files;
  return spec;
}

// "tied_gradient": how the run adds a weight's gradient where it has two
// uses (a tied head): "added_per_use" (each use's kernel adds into the
// buffer: gradeq's own loop, the default) or "summed_first" (autograd sums
// the uses, then one add into .grad: what python/gradeq_export writes).
bool uses_summed_first(const nlohmann::json& m) {
  if (!m.contains("tied_gradient")) return false;
  const nlohmann::json& v = m.at("tied_gradient");
  if (v == "summed_first") return true;
  if (v == "added_per_use") return false;
  bad("manifest.json", "tied_gradient is \"summed_first\" (autograd: the uses' gradients summed, then added into "
                       ".grad) or \"added_per_use\" (each use adds into the buffer), not " + v.dump());
}

// "model", "parameters", "buffers": derived from the scenario for readers,
// so where given they must agree with it. A parameter's "torch" is the name
// the exporter found in the user's module (blocks.0.mlp.fc.weight): any
// unique string.
void check_model(const nlohmann::json& m, const Scenario& s) {
  if (m.contains("model") && m.at("model") != model_json(s.spec))
    bad("manifest.json", "\"model\" contradicts the scenario's layers (it must read " + model_json(s.spec).dump() + ")");
  if (m.contains("parameters")) {
    const nlohmann::json& listed = m.at("parameters");
    const nlohmann::json expected = tensors_json(s.schema.parameters);
    bool agrees = listed.is_array() && listed.size() == expected.size();
    std::set<std::string> torch_names;
    for (std::size_t p = 0; agrees && p < listed.size(); ++p) {
      const nlohmann::json& e = listed[p];
      agrees = e.is_object() && e.value("name", nlohmann::json()) == expected[p].at("name") &&
               e.value("shape", nlohmann::json()) == expected[p].at("shape") && e.contains("torch") &&
               e.at("torch").is_string() && !e.at("torch").get<std::string>().empty() &&
               torch_names.insert(e.at("torch").get<std::string>()).second;
    }
    if (!agrees)
      bad("manifest.json", "\"parameters\" contradicts the scenario's model: it must list, in order, " +
                               nlohmann::json(expected).dump() +
                               " (names and shapes; \"torch\" may be any non-empty name, each once)");
  }
  if (m.contains("buffers") && m.at("buffers") != tensors_json(s.schema.buffers))
    bad("manifest.json", "\"buffers\" contradicts the scenario's model");
}

// A cross-entropy window's "classes" (each one of the model's outputs or
// the padding class -100) and, where given, its "mask", which must say
// what the classes say.
std::vector<int> read_classes(Reader& reader, const nlohmann::json& j, const std::string& at, long rows, long outputs) {
  if (!j.contains("classes")) bad("manifest.json", at + " needs \"classes\" (cross-entropy)");
  if (j.contains("targets")) bad("manifest.json", at + " has \"targets\", but the loss is cross-entropy");
  const NpyArray c = reader.array(j.at("classes"), at + " classes");
  const std::string cf = j.at("classes").get<std::string>();
  if (c.descr != "<i4" && c.descr != "<i8") bad(cf, "is " + npy_dtype_name(c.descr) + "; int32 or int64 classes expected");
  expect_shape(c, {rows}, cf, "classes");
  std::vector<int> classes;
  for (double v : c.values) {
    if (v != ref::kIgnoreClass && (v < 0 || v >= outputs))
      bad(cf, "class " + std::to_string(static_cast<long>(v)) + " is outside [0, " + std::to_string(outputs) +
                  ") and is not the padding class -100");
    classes.push_back(static_cast<int>(v));
  }
  if (j.contains("mask")) {
    const NpyArray mask = reader.array(j.at("mask"), at + " mask");
    const std::string mf = j.at("mask").get<std::string>();
    expect_shape(mask, {rows}, mf, "mask");
    for (std::size_t i = 0; i < mask.values.size(); ++i)
      if (mask.values[i] != (classes[i] != ref::kIgnoreClass ? 1.0 : 0.0))
        bad(mf, "row " + std::to_string(i) + " contradicts the classes (mask 1 = a token that counts, 0 = class -100)");
  }
  return classes;
}

// "windows[w]": the window's inputs, and its targets (mse) or classes
// (cross-entropy), as many rows as the scenario's split and positions say.
ref::Batch read_window(Reader& reader, const nlohmann::json& j, std::size_t w, const ScenarioSpec& spec, long outputs) {
  const std::string at = "windows[" + std::to_string(w) + "]";
  if (!j.is_object() || !j.contains("inputs")) bad("manifest.json", at + " needs \"inputs\"");
  if (j.contains("split") && j.at("split") != nlohmann::json(spec.split[w]))
    bad("manifest.json", at + ".split " + j.at("split").dump() + " contradicts the scenario's split of the window " +
                             nlohmann::json(spec.split[w]).dump());
  const long samples = std::accumulate(spec.split[w].begin(), spec.split[w].end(), 0L);
  const long rows = samples * spec.model.positions;
  if (j.contains("rows") && j.at("rows") != nlohmann::json(rows))
    bad("manifest.json", at + ".rows contradicts the split and positions (" + std::to_string(rows) + ")");
  ref::Batch b;
  b.positions = spec.model.positions;
  // A token model's inputs are its ids, one column of whole numbers.
  const long columns = ref::Model(spec.model).stored_width(0);
  const NpyArray x = reader.floats(j.at("inputs"), at + " inputs", {rows, columns}, "inputs");
  b.inputs = Eigen::Map<const ref::Matrix<double>>(x.values.data(), rows, columns);
  if (spec.model.loss == ref::LossKind::mse) {
    if (!j.contains("targets")) bad("manifest.json", at + " needs \"targets\" (mse)");
    if (j.contains("classes")) bad("manifest.json", at + " has \"classes\", but the loss is mse");
    const NpyArray t = reader.floats(j.at("targets"), at + " targets", {rows, outputs}, "targets");
    b.targets = Eigen::Map<const ref::Matrix<double>>(t.values.data(), rows, outputs);
  } else {
    b.classes = read_classes(reader, j, at, rows, outputs);
  }
  expect_finite(x, j.at("inputs").get<std::string>(), "inputs must be finite");
  if (spec.model.token_input)
    for (long r = 0; r < rows; ++r) {
      const double id = b.inputs(r, 0);
      if (!(id >= 0.0 && id < static_cast<double>(spec.model.input_features) && id == std::floor(id)))
        bad(j.at("inputs").get<std::string>(), "row " + std::to_string(r) + ": token id " + std::to_string(id) +
                                                   " is not a whole number in [0, vocabulary = " +
                                                   std::to_string(spec.model.input_features) + ")");
    }
  return b;
}

// "windows": one per window of the scenario's split.
std::vector<ref::Batch> read_windows(Reader& reader, const nlohmann::json& windows, const ScenarioSpec& spec) {
  if (!windows.is_array() || windows.size() != spec.split.size())
    bad("manifest.json", "\"windows\" must list " + std::to_string(spec.split.size()) +
                             " windows, one per window of the scenario's split");
  const long outputs = ref::Model(spec.model).output_width();
  std::vector<ref::Batch> out;
  for (std::size_t w = 0; w < windows.size(); ++w) out.push_back(read_window(reader, windows[w], w, spec, outputs));
  return out;
}

// "initial.parameters": every parameter of the model before the first
// window, finite, and nothing else.
ref::Tensors<double> read_initial_parameters(Reader& reader, const nlohmann::json& initial, const RunSchema& schema) {
  if (!initial.is_object() || !initial.contains("parameters") || !initial.at("parameters").is_object())
    bad("manifest.json", "\"initial\" needs \"parameters\", one file per parameter");
  const nlohmann::json& files = initial.at("parameters");
  for (const auto& [key, value] : files.items()) {
    bool found = false;
    for (const ref::ParameterInfo& p : schema.parameters) found = found || p.name == key;
    if (!found) bad("manifest.json", "initial parameter '" + key + "' is not a parameter of the model");
  }
  ref::Tensors<double> out;
  for (const ref::ParameterInfo& p : schema.parameters) {
    if (!files.contains(p.name)) bad("manifest.json", "no initial value of " + p.name);
    const nlohmann::json& file = files.at(p.name);
    const NpyArray a = reader.floats(file, "initial " + p.name, {p.rows, p.cols}, p.name);
    expect_finite(a, file.get<std::string>(), "initial parameters must be finite");
    out.push_back(Eigen::Map<const ref::Matrix<double>>(a.values.data(), p.rows, p.cols));
  }
  return out;
}

// "initial.state": the optimizer state, running statistics and counters
// the first window starts from, for a run that did not start fresh. Given
// entries are read; the others take their fresh values (zeros; running
// variance 1; the scenario's loss scale). Parameters come from
// "initial.parameters".
KernelWindow read_initial_state(Reader& reader, const nlohmann::json& state, const Scenario& s) {
  if (!state.is_object()) bad("manifest.json", "\"initial.state\" must map entries to files");
  KernelWindow start;
  std::set<std::string> used;
  for (const RecordEntry& e : s.schema.entries) {
    if (recorded_by_step(e.kind)) continue;
    std::vector<double> values(static_cast<std::size_t>(e.rows * e.cols), 0.0);
    if (e.kind == RecordKind::parameter) {
      const ref::Matrix<double>& p = s.initial_params[e.index];
      values.assign(p.data(), p.data() + p.size());
    } else if (state.contains(e.name)) {
      used.insert(e.name);
      const NpyArray a = reader.floats(state.at(e.name), "initial state " + e.name, {e.rows, e.cols}, e.name);
      expect_finite(a, state.at(e.name).get<std::string>(), "the initial state must be finite");
      values = a.values;
    } else if (e.kind == RecordKind::statistic) {
      values.assign(values.size(), s.schema.buffers[e.index].start);
    } else if (e.kind == RecordKind::counter && e.counter == Counter::loss_scale) {
      values.assign(1, s.spec.procedure.loss_scaling.scale);
    }
    start.tensors.push_back({e.name, e.kind, e.rows, e.cols, values});
  }
  for (const auto& [key, value] : state.items())
    if (!used.count(key))
      bad("manifest.json", "initial state '" + key + "' is not optimizer state, a running statistic or a counter of "
                           "this scenario");
  return start;
}

// "initial": the parameters, and the state where the run did not start fresh.
void read_initial(Reader& reader, const nlohmann::json& initial, Scenario& s) {
  s.initial_params = read_initial_parameters(reader, initial, s.schema);
  for (const auto& [key, value] : initial.items())
    if (key != "parameters" && key != "state") bad("manifest.json", "unknown key 'initial." + key + "'");
  if (initial.contains("state")) s.initial_state = read_initial_state(reader, initial.at("state"), s);
}

// A run's window's "fed": per micro-batch, indices of the window's samples
// (-1: a sample not in the window). Judged, not refused: a sample fed
// twice or never is a failing loop (procedure_problems).
std::vector<std::vector<long>> read_fed(const nlohmann::json& j, const std::string& at, long samples) {
  const std::string where = at + ".fed";
  if (!j.contains("fed") || !j.at("fed").is_array())
    bad(where, "is missing: per micro-batch, the indices of the window's samples it fed (-1: not the window's)");
  std::vector<std::vector<long>> fed;
  for (const nlohmann::json& micro_batch : j.at("fed")) {
    if (!micro_batch.is_array()) bad(where, "must be a list of micro-batches, each a list of sample indices");
    std::vector<long> indices;
    for (const nlohmann::json& i : micro_batch) {
      if (!i.is_number_integer() || i.get<long>() < -1 || i.get<long>() >= samples)
        bad(where, "index " + i.dump() + " is not a sample of the window (0 to " + std::to_string(samples - 1) +
                       ", or -1 for a sample that is not the window's)");
      indices.push_back(i.get<long>());
    }
    fed.push_back(std::move(indices));
  }
  return fed;
}

// A run's window's "missing_gradients": trained parameters whose gradient
// the run did not produce.
std::vector<std::string> read_missing_gradients(const nlohmann::json& j, const std::string& at, const RunSchema& schema) {
  std::vector<std::string> out;
  if (!j.contains("missing_gradients")) return out;
  for (const nlohmann::json& p : j.at("missing_gradients")) {
    const std::string param = p.get<std::string>();
    bool trained = false;
    for (const RecordEntry& e : schema.entries) trained = trained || e.name == "grad/" + param;
    if (!trained) bad(at + ".missing_gradients", "'" + param + "' is not a trained parameter of the model");
    out.push_back(param);
  }
  return out;
}

// A run's window's "tensors": one per entry of the schema, but none of a
// missing gradient and none recorded by the step of a skipped window; each
// of the dtype the run stores it in.
void read_run_tensors(Reader& reader, const nlohmann::json& tensors, const std::string& at, const std::string& what,
                      const Scenario& scenario, KernelWindow& kw) {
  const auto missing = [&](const std::string& entry) {
    for (const std::string& p : kw.missing_gradients)
      if (entry == "grad/" + p || entry == "clipped_grad/" + p) return true;
    return false;
  };
  std::set<std::string> known;
  for (const RecordEntry& e : scenario.schema.entries) known.insert(e.name);
  for (const auto& [key, value] : tensors.items())
    if (!known.count(key)) bad(at, "tensor '" + key + "' is not recorded by this scenario (see its parameters)");
  for (const RecordEntry& e : scenario.schema.entries) {
    const bool by_step = recorded_by_step(e.kind);
    if (missing(e.name)) {
      if (tensors.contains(e.name)) bad(at, "lists " + e.name + " as missing but has it");
      continue;
    }
    if (!tensors.contains(e.name)) {
      if (by_step && kw.skipped) continue;
      bad(at, "has no tensor '" + e.name + "'" + (by_step ? "" : " (every window records it)"));
    }
    if (by_step && kw.skipped)
      bad(at, "is skipped but has '" + e.name + "' (a skipped step has no gradient, clip or learning rate)");
    const nlohmann::json& ref = tensors.at(e.name);
    const nlohmann::json& file = ref.is_object() && ref.contains("file") ? ref.at("file") : ref;
    const NpyArray a = reader.floats(file, what + " " + e.name, {e.rows, e.cols}, e.name);
    const std::string fname = file.get<std::string>();
    const DType d = dtype_of_entry(e, scenario.spec.precision);
    for (std::size_t i = 0; i < a.values.size() && !is_float64(e); ++i)
      if (!of_dtype(a.values[i], d))
        bad(fname, e.name + " element [" + std::to_string(i / static_cast<std::size_t>(e.cols)) + ", " +
                       std::to_string(i % static_cast<std::size_t>(e.cols)) + "] = " + std::to_string(a.values[i]) +
                       " is not a " + std::string(dtype_name(d)) + " number (the run stores it in " +
                       std::string(dtype_name(d)) + "; declare compute_dtype/accumulate_dtype as the run had them)");
    if (e.kind == RecordKind::counter && e.counter == Counter::skipped && (a.values[0] != 0.0) != kw.skipped)
      bad(fname, "state/skipped contradicts the window's \"skipped\"");
    kw.tensors.push_back({e.name, e.kind, e.rows, e.cols, a.values});
  }
}

// "runs.<name>.windows[w]": whether the step was skipped, the loss, what
// was fed, the gradients that are missing and the tensors.
KernelWindow read_run_window(Reader& reader, const nlohmann::json& j, const std::string& name, std::size_t w,
                             const Scenario& scenario) {
  const std::string at = "manifest.json: runs." + name + ".windows[" + std::to_string(w) + "]";
  if (!j.is_object() || !j.contains("tensors") || !j.at("tensors").is_object()) bad(at, "needs an object of tensors");
  KernelWindow kw;
  if (j.contains("skipped")) {
    if (!j.at("skipped").is_boolean()) bad(at, "skipped must be true or false");
    kw.skipped = j.at("skipped").get<bool>();
  }
  if (j.contains("loss") && j.at("loss").is_number()) kw.loss = j.at("loss").get<double>();
  for (const auto& [key, value] : j.items())
    if (key != "skipped" && key != "loss" && key != "fed" && key != "tensors" && key != "missing_gradients")
      bad(at, "unknown key '" + key + "'");
  kw.fed = read_fed(j, at, scenario.windows[w].samples());
  kw.missing_gradients = read_missing_gradients(j, at, scenario.schema);
  read_run_tensors(reader, j.at("tensors"), at, name + " window " + std::to_string(w), scenario, kw);
  return kw;
}

// "runs.<name>": a kernel run, one entry per window of the split.
KernelRun read_run(Reader& reader, const nlohmann::json& run, const std::string& name, const Scenario& scenario) {
  const std::string where = "manifest.json: runs." + name;
  if (!run.is_object() || !run.contains("windows") || !run.at("windows").is_array())
    bad(where, "must be an object with a list of windows");
  const nlohmann::json& windows = run.at("windows");
  if (windows.size() != scenario.windows.size())
    bad(where, std::to_string(windows.size()) + " windows, the scenario's split has " +
                   std::to_string(scenario.windows.size()));
  KernelRun out;
  for (std::size_t w = 0; w < windows.size(); ++w) out.windows.push_back(read_run_window(reader, windows[w], name, w, scenario));
  return out;
}

// "runs": K_acc, the run to verify, and K_full where given. The dumped
// reference runs are not read, since verify recomputes them, but their
// files belong to the set.
void read_runs(Reader& reader, const nlohmann::json& runs, WindowSet& set) {
  if (!runs.is_object() || !runs.contains("K_acc"))
    bad("manifest.json", "\"runs\" needs \"K_acc\": the accumulated run to verify");
  for (const auto& [key, value] : runs.items())
    if (key != "K_acc" && key != "K_full" && key != "R_acc" && key != "R_full")
      bad("manifest.json", "unknown run '" + key + "' (K_acc, K_full; R_acc and R_full as dumped)");
  set.k_acc = read_run(reader, runs.at("K_acc"), "K_acc", set.scenario);
  if (runs.contains("K_full")) set.k_full = read_run(reader, runs.at("K_full"), "K_full", set.scenario);
  for (const char* r : {"R_acc", "R_full"})
    if (runs.contains(r)) reader.remember_all(runs.at(r));
}

WindowSet read_sections(const std::filesystem::path& dir) {
  const nlohmann::json m = read_manifest(dir);
  WindowSet set;
  Scenario& s = set.scenario;
  s.spec = read_scenario(m.at("scenario"));
  s.spec.procedure.sum_uses_first = uses_summed_first(m);
  s.schema = run_schema(s.spec);
  check_model(m, s);
  Reader reader(dir);
  s.windows = read_windows(reader, m.at("windows"), s.spec);
  read_initial(reader, m.at("initial"), s);
  read_runs(reader, m.at("runs"), set);
  // "bounds": written for readers; verify recomputes them, but their files
  // belong to the set.
  if (m.contains("bounds")) reader.remember_all(m.at("bounds"));
  reader.refuse_extra_files();
  return set;
}

}  // namespace

WindowSet read_window_set(const std::filesystem::path& dir) {
  // A value of the wrong JSON type anywhere in the manifest is bad input,
  // named as such, never an internal error.
  try {
    return read_sections(dir);
  } catch (const nlohmann::json::exception& e) {
    throw WindowSetError("manifest.json: a value of the wrong type (" + std::string(e.what()) + ")");
  } catch (const std::filesystem::filesystem_error& e) {
    throw WindowSetError(std::string("cannot read the window set: ") + e.what());
  }
}

}  // namespace gradeq
