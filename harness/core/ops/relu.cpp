// relu.cpp — max(x, 0).
#include "harness/core/ops/activation.h"

namespace gradeq {
namespace {

struct ReluMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    return ref::relu_forward(*c.x[0]);
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    if (c.needed[0]) c.dx[0] = ref::relu_backward(*c.x[0], c.dy);
  }
};

class Relu final : public ActivationRecord<ReluMath, Activation::relu> {
 public:
  std::string_view name() const override { return "relu"; }
};

}  // namespace

const OpRecord& relu_op() {
  static const Relu op;
  return op;
}

}  // namespace gradeq
