// gelu_erf.cpp — GELU in its exact erf form (nn.GELU(), PyTorch's default).
#include "harness/core/ops/activation.h"

namespace gradeq {
namespace {

struct GeluErfMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    return ref::gelu_erf_forward(*c.x[0]);
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    if (c.needed[0]) c.dx[0] = ref::gelu_erf_backward(*c.x[0], c.dy);
  }
};

class GeluErf final : public ActivationRecord<GeluErfMath, Activation::gelu_erf> {
 public:
  std::string_view name() const override { return "gelu_erf"; }
};

}  // namespace

const OpRecord& gelu_erf_op() {
  static const GeluErf op;
  return op;
}

}  // namespace gradeq
