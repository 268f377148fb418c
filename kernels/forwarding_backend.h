// forwarding_backend.h — a Backend that forwards every op to another one.
// Derive from it to replace the ops you own and inherit the rest: the
// mutants do (kernels/mutants), and so can a user testing one fused kernel
// against an otherwise trusted backend.
#pragma once

#include "kernels/backend.h"

namespace gradeq {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }

  Tensor allocate(long rows, long cols, DType dtype) override { return inner_.allocate(rows, cols, dtype); }
  void release(Tensor& t) override { inner_.release(t); }
  void upload(const Tensor& dst, std::span<const float> host) override { inner_.upload(dst, host); }
  void download(const Tensor& src, std::span<float> host) override { inner_.download(src, host); }
  void fill(const Tensor& t, float value) override { inner_.fill(t, value); }
  void convert(const Tensor& src, const Tensor& dst) override { inner_.convert(src, dst); }
  void copy_columns(const Tensor& src, long src_first, const Tensor& dst, long dst_first, long count) override {
    inner_.copy_columns(src, src_first, dst, dst_first, count);
  }
  std::size_t live_bytes() const override { return inner_.live_bytes(); }
  std::size_t peak_bytes() const override { return inner_.peak_bytes(); }
  void reset_peak_bytes() override { inner_.reset_peak_bytes(); }

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override {
    inner_.linear_forward(x, w, b, y);
  }
  void linear_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx) override {
    inner_.linear_backward_data(dy, w, dx);
  }
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override {
    inner_.linear_backward_weight(dy, x, dw, db);
  }
  void activation_forward(Activation a, const Tensor& x, const Tensor& y) override { inner_.activation_forward(a, x, y); }
  void activation_backward(Activation a, const Tensor& x, const Tensor& dy, const Tensor& dx) override {
    inner_.activation_backward(a, x, dy, dx);
  }
  void norm_forward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                    const Tensor& saved_mean, const Tensor& saved_rstd, const Tensor& running_mean,
                    const Tensor& running_var) override {
    inner_.norm_forward(c, x, gamma, beta, y, saved_mean, saved_rstd, running_mean, running_var);
  }
  void norm_backward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& dy,
                     const Tensor& saved_mean, const Tensor& saved_rstd, const Tensor& dx, const Tensor& dgamma,
                     const Tensor& dbeta) override {
    inner_.norm_backward(c, x, gamma, dy, saved_mean, saved_rstd, dx, dgamma, dbeta);
  }
  double loss_forward_backward(LossKind k, const Tensor& y, const Tensor& targets, float scale,
                               const Tensor& dy) override {
    return inner_.loss_forward_backward(k, y, targets, scale, dy);
  }
  void zero(std::span<const Tensor> ts) override { inner_.zero(ts); }
  void scale(std::span<const Tensor> ts, float s) override { inner_.scale(ts, s); }
  void accumulate(std::span<const Tensor> dst, std::span<const Tensor> src,
                  std::span<const Tensor> compensation) override {
    inner_.accumulate(dst, src, compensation);
  }
  float global_norm(std::span<const Tensor> ts) override { return inner_.global_norm(ts); }
  bool all_finite(std::span<const Tensor> ts) override { return inner_.all_finite(ts); }
  void optimizer_step(const OptimizerStep& step, std::span<const Tensor> params, std::span<const Tensor> grads,
                      std::span<const Tensor> first_moment, std::span<const Tensor> second_moment) override {
    inner_.optimizer_step(step, params, grads, first_moment, second_moment);
  }
  void set_deterministic(bool on) override { inner_.set_deterministic(on); }
  bool deterministic() const override { return inner_.deterministic(); }

 protected:
  Backend& inner_;
};

}  // namespace gradeq
