// cpu_backend.h — the host backend: every op of the Backend interface in
// float32 arithmetic, storing bfloat16 / float16 tensors as float32 values
// rounded to that dtype (bit-identical to storing the narrow type).
// Deterministic by construction: every reduction has one fixed order, set
// by the shapes (for the GEMMs, Eigen's blocked kernels: by the shapes, the
// build's instruction set and the cache sizes Eigen's blocking reads), or
// in the adversarial order, by the shapes and the terms' signs.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "kernels/backend.h"

namespace gradeq {

// The order the host kernels sum in. natural: each loop's own order and
// Eigen's blocked GEMMs (backend "cpu"). adversarial: the products and the
// long reductions (bias, normalizer and loss sums, the global norm) in a
// correct but worst-case order, cpu::adversarial_sum (backend
// "cpu-adversarial", with im2col convolutions): a kernel that any bound
// holding for every order must pass, and that uses more of it than the
// natural order does (NUMERICS §10).
enum class SumOrder { natural, adversarial };

class CpuBackend : public Backend {
 public:
  // The adversarial order sums convolutions through im2col's GEMMs: it
  // takes no direct form (std::invalid_argument).
  explicit CpuBackend(ConvForm conv_form = ConvForm::im2col, SumOrder sum_order = SumOrder::natural);
  std::string name() const override {
    if (sum_order_ == SumOrder::adversarial) return "cpu-adversarial";
    return conv_form_ == ConvForm::direct ? "cpu-direct" : "cpu";
  }

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
  SumOrder sum_order_;
};

}  // namespace gradeq
