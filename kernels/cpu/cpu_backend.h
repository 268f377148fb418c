// cpu_backend.h — the host backend: every op of the Backend interface in
// float32 arithmetic, storing bfloat16 / float16 tensors as float32 values
// rounded to that dtype (bit-identical to storing the narrow type).
// Deterministic by construction: every reduction has one fixed order, set
// by the shapes (for the GEMMs, Eigen's blocked kernels: by the shapes, the
// build's instruction set and the cache sizes Eigen's blocking reads).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "kernels/backend.h"

namespace gradeq {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(ConvForm conv_form = ConvForm::im2col) : conv_form_(conv_form) {}
  std::string name() const override { return conv_form_ == ConvForm::direct ? "cpu-direct" : "cpu"; }

  Tensor allocate(long rows, long cols, DType dtype) override;
  void release(Tensor& t) override;
  void upload(const Tensor& dst, std::span<const float> host) override;
  void download(const Tensor& src, std::span<float> host) override;
  std::size_t live_bytes() const override;  // tensors (at their dtype's size) and the GEMM scratch
  std::size_t peak_bytes() const override { return peak_bytes_; }
  void reset_peak_bytes() override;

  // The ops of kernels/backend_ops.def; one file per op or family beside this one.
#define GRADEQ_BACKEND_OP(R, NAME, PARAMETERS, ARGUMENTS) R NAME PARAMETERS override;
#include "kernels/backend_ops.def"
#undef GRADEQ_BACKEND_OP

  // One thread, fixed loop orders: always deterministic. Turning the mode
  // off permits non-determinism; nothing here needs it.
  void set_deterministic(bool) override {}
  bool deterministic() const override { return true; }
  bool survives_fork() const override { return true; }  // host memory only

 private:
  // n floats of the scratch the GEMM products use, grown (and counted in
  // the peak) as needed; valid until the next call.
  float* scratch(std::size_t n);

  std::map<const void*, std::pair<std::unique_ptr<float[]>, std::size_t>> allocations_;
  std::size_t live_bytes_ = 0;  // tensors only
  std::size_t peak_bytes_ = 0;
  std::vector<float> scratch_;  // the weight gradient's float32 product, reused
  ConvForm conv_form_;
};

}  // namespace gradeq
