// own_backend.h — a user's backend: the host backend with one op replaced,
// the weight gradient of a linear layer (dw += dy^T x, db += column sums
// of dy), written from scratch as a kernel author would.
#pragma once

#include <gradeq/gradeq.h>

namespace own {

class OwnBackend : public gradeq::ForwardingBackend {
 public:
  OwnBackend() : ForwardingBackend(host_) {}
  std::string name() const override { return "own"; }
  void linear_backward_weight(const gradeq::Tensor& dy, const gradeq::Tensor& x, const gradeq::Tensor& dw,
                              const gradeq::Tensor& db) override;

 private:
  gradeq::CpuBackend host_;
};

}  // namespace own
