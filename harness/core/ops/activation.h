// activation.h — the shape every element-wise activation record shares:
// y = f(x), dx = f'(x) dy, no parameters. Math is the reference's pair of
// functions, A the backend's name for the same activation.
#pragma once

#include "harness/core/ops/op_record.h"

namespace gradeq {

template <class Math, Activation A>
class ActivationRecord : public OpRecordWith<Math> {
 public:
  void loop_forward(const LoopCall& c) const override { c.backend.activation_forward(A, c.x[0], c.y); }
  void loop_backward(const LoopCall& c) const override { c.backend.activation_backward(A, c.x[0], c.dy, c.dx[0]); }
  int generator_weight() const override { return 1; }
};

}  // namespace gradeq
