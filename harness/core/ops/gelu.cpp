// gelu.cpp — GELU in its tanh form (nn.GELU(approximate='tanh')).
#include "harness/core/ops/activation.h"

namespace gradeq {
namespace {

struct GeluMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    return ref::gelu_forward(*c.x[0]);
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    if (c.needed[0]) c.dx[0] = ref::gelu_backward(*c.x[0], c.dy);
  }
};

class Gelu final : public ActivationRecord<GeluMath, Activation::gelu_tanh> {
 public:
  std::string_view name() const override { return "gelu"; }
};

}  // namespace

const OpRecord& gelu_op() {
  static const Gelu op;
  return op;
}

}  // namespace gradeq
