// cuda_check.h — every CUDA runtime and cuBLAS call goes through these
// macros: a failure raises gradeq::BackendError naming the call, the file
// and the line, instead of continuing with a broken device state. Every
// kernel launch is followed by GRADEQ_LAUNCH_CHECK(). A fault inside a
// kernel surfaces at the next synchronizing call; with GRADEQ_CUDA_SYNC=1 in
// the environment every launch is synchronized and checked where it is.
#pragma once

#include <cstdlib>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/check.h"
#include "kernels/dtype.h"

namespace gradeq::cuda {

// The cuBLAS / CUDA data type of a dtype.
inline cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::f32: break;
  }
  return CUDA_R_32F;
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    backend_failure(file, line, std::string(call) + ": " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    backend_failure(file, line, std::string(call) + ": cuBLAS status " + cublasGetStatusName(status) + ": " +
                                   cublasGetStatusString(status));
}

inline bool synchronous_launches() {
  static const bool on = [] {
    const char* v = std::getenv("GRADEQ_CUDA_SYNC");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return on;
}

inline void check_launch(const char* file, int line) {
  check_cuda(cudaGetLastError(), "kernel launch", file, line);
  if (synchronous_launches()) check_cuda(cudaDeviceSynchronize(), "kernel (GRADEQ_CUDA_SYNC)", file, line);
}

}  // namespace gradeq::cuda

#define GRADEQ_CUDA_CHECK(call) ::gradeq::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define GRADEQ_CUBLAS_CHECK(call) ::gradeq::cuda::check_cublas((call), #call, __FILE__, __LINE__)
#define GRADEQ_LAUNCH_CHECK() ::gradeq::cuda::check_launch(__FILE__, __LINE__)
