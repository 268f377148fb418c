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
  std::string name() const override { return "cpu"; }

  Tensor allocate(long rows, long cols, DType dtype) override;
  void release(Tensor& t) override;
  void upload(const Tensor& dst, std::span<const float> host) override;
  void download(const Tensor& src, std::span<float> host) override;
  void fill(const Tensor& t, float value) override;
  void convert(const Tensor& src, const Tensor& dst) override;
  void copy_columns(const Tensor& src, long src_first, const Tensor& dst, long dst_first, long count) override;
  std::size_t live_bytes() const override;  // tensors (at their dtype's size) and the GEMM scratch
  std::size_t peak_bytes() const override { return peak_bytes_; }
  void reset_peak_bytes() override;

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override;
  void linear_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx) override;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override;

  void activation_forward(Activation a, const Tensor& x, const Tensor& y) override;
  void activation_backward(Activation a, const Tensor& x, const Tensor& dy, const Tensor& dx) override;

  void norm_forward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                    const Tensor& saved_mean, const Tensor& saved_rstd, const Tensor& running_mean,
                    const Tensor& running_var) override;
  void norm_backward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& dy,
                     const Tensor& saved_mean, const Tensor& saved_rstd, const Tensor& dx, const Tensor& dgamma,
                     const Tensor& dbeta) override;

  double loss_forward_backward(LossKind k, const Tensor& y, const Tensor& targets, float scale,
                               const Tensor& dy) override;

  void zero(std::span<const Tensor> ts) override;
  void scale(std::span<const Tensor> ts, float s) override;
  void accumulate(std::span<const Tensor> dst, std::span<const Tensor> src,
                  std::span<const Tensor> compensation) override;
  float global_norm(std::span<const Tensor> ts) override;
  bool all_finite(std::span<const Tensor> ts) override;

  void optimizer_step(const OptimizerStep& step, std::span<const Tensor> params, std::span<const Tensor> grads,
                      std::span<const Tensor> first_moment, std::span<const Tensor> second_moment) override;

  // One thread, fixed loop orders: always deterministic. Turning the mode
  // off permits non-determinism; nothing here needs it.
  void set_deterministic(bool) override {}
  bool deterministic() const override { return true; }
  bool survives_fork() const override { return true; }  // host memory only

 private:
  std::map<const void*, std::pair<std::unique_ptr<float[]>, std::size_t>> allocations_;
  std::size_t live_bytes_ = 0;  // tensors only
  std::size_t peak_bytes_ = 0;
  std::vector<float> scratch_;  // the weight gradient's float32 product, reused
};

}  // namespace gradeq
