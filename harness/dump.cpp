// dump.cpp — .npy writer and the scenario dump.
#include "harness/dump.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace gradeq {
namespace {

template <class T>
void write_npy_impl(const std::filesystem::path& path, const std::vector<long>& shape, std::span<const T> values,
                    const char* descr) {
  long count = 1;
  for (long d : shape) count *= d;
  if (count != static_cast<long>(values.size())) throw std::invalid_argument("write_npy: shape and data disagree");
  std::ostringstream header;
  header << "{'descr': '" << descr << "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) header << shape[i] << (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
  header << "), }";
  std::string h = header.str();
  // Magic (6) + version (2) + length (2) + header must be a multiple of 64.
  const std::size_t unpadded = 10 + h.size() + 1;
  h.append((64 - unpadded % 64) % 64, ' ');
  h.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + path.string());
  out.write("\x93NUMPY\x01\x00", 8);
  const std::uint16_t len = static_cast<std::uint16_t>(h.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size_bytes()));
  if (!out) throw std::runtime_error("error writing " + path.string());
}

std::string file_name(const std::string& tensor) {
  std::string s = tensor;
  for (char& c : s)
    if (c == '/' || c == ':' || c == ' ') c = '_';
  return s + ".npy";
}

}  // namespace

void write_npy(const std::filesystem::path& p, const std::vector<long>& shape, std::span<const double> v) {
  write_npy_impl(p, shape, v, "<f8");
}
void write_npy(const std::filesystem::path& p, const std::vector<long>& shape, std::span<const float> v) {
  write_npy_impl(p, shape, v, "<f4");
}
void write_npy(const std::filesystem::path& p, const std::vector<long>& shape, std::span<const std::int32_t> v) {
  write_npy_impl(p, shape, v, "<i4");
}

int dump_scenario(const std::filesystem::path& dir, const Scenario& scenario, const Runs& runs) {
  std::filesystem::create_directories(dir);
  nlohmann::json manifest;
  const ScenarioSpec& spec = scenario.spec;
  manifest["scenario"] = spec.name;
  manifest["model"] = ref::describe(spec.model);
  manifest["split"] = describe_split(spec.split);
  manifest["micro_batch_samples"] = spec.split;
  manifest["data"] = data_kind_name(spec.data);
  manifest["seed"] = spec.seed;
  manifest["compute_dtype"] = std::string(dtype_name(spec.precision.compute));
  manifest["accumulate_dtype"] = std::string(dtype_name(spec.precision.accumulate));
  nlohmann::json files = nlohmann::json::array();
  auto add = [&](const std::string& name, const std::string& role, const std::vector<long>& shape, auto values,
                 const char* dtype) {
    const std::string file = file_name(name);
    write_npy(dir / file, shape, values);
    files.push_back({{"name", name}, {"file", file}, {"role", role}, {"shape", shape}, {"dtype", dtype}});
  };
  for (std::size_t w = 0; w < scenario.windows.size(); ++w) {
    const ref::Batch& b = scenario.windows[w];
    const std::string prefix = "window" + std::to_string(w) + "/";
    add(prefix + "inputs", "input", {b.inputs.rows(), b.inputs.cols()},
        std::span<const double>(b.inputs.data(), static_cast<std::size_t>(b.inputs.size())), "float64");
    if (b.targets.size() > 0)
      add(prefix + "targets", "target", {b.targets.rows(), b.targets.cols()},
          std::span<const double>(b.targets.data(), static_cast<std::size_t>(b.targets.size())), "float64");
    if (!b.classes.empty()) {
      std::vector<std::int32_t> classes(b.classes.begin(), b.classes.end()), mask;
      for (int c : b.classes) mask.push_back(c != ref::kIgnoreClass);
      add(prefix + "classes", "target", {static_cast<long>(classes.size())}, std::span<const std::int32_t>(classes), "int32");
      add(prefix + "mask", "mask", {static_cast<long>(mask.size())}, std::span<const std::int32_t>(mask), "int32");
    }
  }
  const std::vector<ref::ParameterInfo>& layout = scenario.schema.parameters;
  for (std::size_t p = 0; p < layout.size(); ++p) {
    const auto& m = scenario.initial_params[p];
    add("initial/" + layout[p].name, "parameter", {m.rows(), m.cols()},
        std::span<const double>(m.data(), static_cast<std::size_t>(m.size())), "float64");
  }
  // Tensors of every window: "R_acc/w0/grad/layer0.weight".
  auto add_reference = [&](const std::string& run, const ReferenceRun& r, bool bounds) {
    for (std::size_t w = 0; w < r.windows.size(); ++w)
      for (const ReferenceTensor& t : r.windows[w].tensors) {
        const std::string name = run + "/w" + std::to_string(w) + "/" + t.name;
        add(name, "result", {t.rows, t.cols}, std::span<const double>(t.value), "float64");
        if (bounds) add(name + ".kernel_bound", "bound", {t.rows, t.cols}, std::span<const double>(t.kernel_bound), "float64");
      }
  };
  auto add_kernel = [&](const std::string& run, const KernelRun& r) {
    for (std::size_t w = 0; w < r.windows.size(); ++w)
      for (const RunTensor& t : r.windows[w].tensors) {
        std::vector<float> v(t.values.begin(), t.values.end());
        add(run + "/w" + std::to_string(w) + "/" + t.name, "result", {t.rows, t.cols}, std::span<const float>(v), "float32");
      }
  };
  add_reference("R_full", runs.r_full, false);
  add_reference("R_acc", runs.r_acc, false);
  add_kernel("K_full", runs.k_full);
  add_kernel("K_acc", runs.k_acc);
  // What the kernel verdicts compared against: the reference window by
  // window from the kernel's own state, with its per-element kernel bounds.
  add_reference("R_acc_at_K_acc", runs.r_acc_at_k_acc, true);
  add_reference("R_full_at_K_acc", runs.r_full_at_k_acc, true);
  manifest["files"] = files;
  std::ofstream out(dir / "manifest.json");
  out << manifest.dump(2) << "\n";
  if (!out) throw std::runtime_error("cannot write " + (dir / "manifest.json").string());
  return static_cast<int>(files.size()) + 1;
}

}  // namespace gradeq
