// forwarding_backend.h — a Backend that forwards every op to another one
// (every op of kernels/backend_ops.def, so a new op needs no edit here).
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
  std::size_t live_bytes() const override { return inner_.live_bytes(); }
  std::size_t peak_bytes() const override { return inner_.peak_bytes(); }
  void reset_peak_bytes() override { inner_.reset_peak_bytes(); }

#define GRADEQ_BACKEND_OP(R, NAME, PARAMETERS, ARGUMENTS) \
  R NAME PARAMETERS override { return inner_.NAME ARGUMENTS; }
#include "kernels/backend_ops.def"
#undef GRADEQ_BACKEND_OP
  void set_deterministic(bool on) override { inner_.set_deterministic(on); }
  bool deterministic() const override { return inner_.deterministic(); }

 protected:
  Backend& inner_;
};

}  // namespace gradeq
