// cuda_backend.h — the CUDA backend: every op of the Backend interface on
// one GPU, cuBLAS for the GEMMs (float32 compute, beta = 1 into the
// gradient buffer for the weight gradient), hand-written kernels for the
// rest. bfloat16 / float16 tensors are stored as __nv_bfloat16 / __half;
// element math is shared with the host backend (kernels/element_math.h).
// In deterministic mode (the default) every reduction has a fixed order,
// so results are bitwise identical run to run; the racy B19 mutant
// (kernels/mutants/racy_bias_cuda.cu) is not.
// Built only when nvcc is found; must not be included by host-only code
// except through harness/core/backends.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace gradeq {

struct CudaDeviceStatus {
  bool available = false;
  std::string detail;  // the device's name and capability, or why there is none
};

// Asks the driver, without creating a context on failure paths.
CudaDeviceStatus cuda_device_status();

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(ConvForm conv_form = ConvForm::im2col);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return conv_form_ == ConvForm::direct ? "cuda-direct" : "cuda"; }

  Tensor allocate(long rows, long cols, DType dtype) override;
  void release(Tensor& t) override;
  void upload(const Tensor& dst, std::span<const float> host) override;
  void download(const Tensor& src, std::span<float> host) override;
  std::size_t live_bytes() const override;  // tensors and the workspace (scratch, reduction partials)
  std::size_t peak_bytes() const override;
  void reset_peak_bytes() override;

  // The ops of kernels/backend_ops.def; one file per op or family beside this one.
#define GRADEQ_BACKEND_OP(R, NAME, PARAMETERS, ARGUMENTS) R NAME PARAMETERS override;
#include "kernels/backend_ops.def"
#undef GRADEQ_BACKEND_OP

  // On by default. Off: the bias gradient of tall batches adds per-slice
  // partial sums with atomicAdd and cuBLAS may use atomics: faster, correct
  // within the same bounds, not bitwise reproducible run to run.
  void set_deterministic(bool on) override;
  bool deterministic() const override { return deterministic_; }

 protected:
  // The bias gradient db += column sums of dy, a fixed-order reduction.
  // Virtual so that the race mutant (B19, kernels/mutants) can replace it.
  virtual void bias_gradient(const Tensor& dy, const Tensor& db);
  // A float32 scratch buffer of at least `count` elements (reused).
  float* scratch(long count, int slot = 0);

 private:
  // Column-major C[m, n] = op(A) op(B) + beta C through cublasGemmEx.
  void gemm(bool transpose_a, bool transpose_b, long m, long n, long k, const Tensor& a, long lda, const Tensor& b,
            long ldb, float beta, const Tensor& c);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::map<const void*, std::size_t> allocations_;
  std::size_t live_bytes_ = 0, peak_bytes_ = 0;  // live: tensors only
  bool deterministic_ = true;
  ConvForm conv_form_;
};

}  // namespace gradeq
