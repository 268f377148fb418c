// backends.cpp — the cpu backend and its cpu-direct and cpu-adversarial
// forms always; cuda and
// cuda-direct when built with nvcc and a device is present; then the
// backends a program registered.
#include "harness/core/backends.h"

#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#if GRADEQ_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace gradeq {
namespace {

struct Registered {
  std::string name, description;
  BackendFactory factory;
};

std::vector<Registered>& registry() {
  static std::vector<Registered> r;
  return r;
}

const Registered* find_registered(const std::string& name) {
  for (const Registered& r : registry())
    if (r.name == name) return &r;
  return nullptr;
}

bool valid_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
}

}  // namespace

void register_backend(const std::string& name, const std::string& description, BackendFactory factory) {
  if (!valid_name(name))
    throw std::invalid_argument("register_backend: '" + name +
                                "' is not a backend name (1-64 letters, digits, '-', '_' or '.')");
  if (!factory) throw std::invalid_argument("register_backend(" + name + "): no factory");
  if (is_host_backend(name) || name == "cuda" || name == "cuda-direct" || find_registered(name))
    throw std::invalid_argument("register_backend: a backend named '" + name + "' exists already");
  registry().push_back({name, description, std::move(factory)});
}

bool is_host_backend(const std::string& name) {
  return name == "cpu" || name == "cpu-direct" || name == "cpu-adversarial";
}

std::vector<BackendInfo> list_backends() {
  std::vector<BackendInfo> out{{"cpu", true, "host float32 kernels, bfloat16/float16 by rounding"},
                               {"cpu-direct", true, "the host kernels with convolutions in the direct form (no im2col)"},
                               {"cpu-adversarial", true,
                                "the host kernels with products and long sums in a worst-case order (slow)"}};
#if GRADEQ_HAVE_CUDA
  const CudaDeviceStatus s = cuda_device_status();
  out.push_back({"cuda", s.available, s.detail});
  out.push_back({"cuda-direct", s.available, s.available ? "the cuda kernels with convolutions in the direct form "
                                                           "(split-K weight gradient, no im2col)" : s.detail});
#else
  out.push_back({"cuda", false, "not built: nvcc was not found when gradeq was configured"});
  out.push_back({"cuda-direct", false, "not built: nvcc was not found when gradeq was configured"});
#endif
  for (const Registered& r : registry()) out.push_back({r.name, true, r.description});
  return out;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const BackendInfo& b : list_backends()) names.push_back(b.name);
  return names;
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
  if (name == "cpu-direct") return std::make_unique<CpuBackend>(ConvForm::direct);
  if (name == "cpu-adversarial") return std::make_unique<CpuBackend>(ConvForm::im2col, SumOrder::adversarial);
  if (name == "cuda" || name == "cuda-direct") {
#if GRADEQ_HAVE_CUDA
    const CudaDeviceStatus s = cuda_device_status();
    if (!s.available) throw EnvironmentError(name + " backend unavailable: " + s.detail);
    return std::make_unique<CudaBackend>(name == "cuda" ? ConvForm::im2col : ConvForm::direct);
#else
    throw EnvironmentError(name + " backend unavailable: gradeq was built without CUDA (nvcc not found at configure time)");
#endif
  }
  if (const Registered* r = find_registered(name)) {
    std::unique_ptr<Backend> b = r->factory();
    if (!b) throw EnvironmentError("backend '" + name + "': its factory made no backend");
    return b;
  }
  std::string known;
  for (const std::string& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown backend '" + name + "' (choose " + known + ")");
}

}  // namespace gradeq
