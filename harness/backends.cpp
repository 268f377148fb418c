// backends.cpp — the cpu backend always; cuda when built with nvcc and a
// device is present.
#include "harness/backends.h"

#include "kernels/cpu/cpu_backend.h"
#if GRADEQ_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace gradeq {

std::vector<BackendInfo> list_backends() {
  std::vector<BackendInfo> out{{"cpu", true, "host float32 kernels, bfloat16/float16 by rounding"}};
#if GRADEQ_HAVE_CUDA
  const CudaDeviceStatus s = cuda_device_status();
  out.push_back({"cuda", s.available, s.detail});
#else
  out.push_back({"cuda", false, "not built: nvcc was not found when gradeq was configured"});
#endif
  return out;
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
  if (name == "cuda") {
#if GRADEQ_HAVE_CUDA
    const CudaDeviceStatus s = cuda_device_status();
    if (!s.available) throw EnvironmentError("cuda backend unavailable: " + s.detail);
    return std::make_unique<CudaBackend>();
#else
    throw EnvironmentError("cuda backend unavailable: gradeq was built without CUDA (nvcc not found at configure time)");
#endif
  }
  throw std::invalid_argument("unknown backend '" + name + "' (choose cpu or cuda)");
}

}  // namespace gradeq
