// linear.cpp — y = x W^T + b (PyTorch's nn.Linear): W [out, in], b [1, out].
#include "harness/core/ops/op_record.h"

namespace gradeq {
namespace {

struct LinearMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    return ref::linear_forward(*c.x[0], c.params[0], c.params[1]);
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    ref::linear_backward_weight(*c.x[0], c.dy, c.sums[0], c.sums[1]);
    if (c.needed[0]) c.dx[0] = ref::linear_backward_data(c.params[0], c.dy);
  }
};

class Linear final : public OpRecordWith<LinearMath> {
 public:
  std::string_view name() const override { return "linear"; }
  std::string_view argument() const override { return "output features"; }
  void check(long features, std::span<const long>) const override {
    if (features < 1) throw std::invalid_argument(" needs >= 1 output features");
  }
  long output_width(long features, std::span<const long>) const override { return features; }
  std::vector<ref::TensorInfo> parameters(long features, std::span<const long> in) const override {
    return {{"weight", features, in[0], ref::Init::fan_in}, {"bias", 1, features, ref::Init::small}};
  }
  void loop_forward(const LoopCall& c) const override { c.backend.linear_forward(c.x[0], c.params[0], c.params[1], c.y); }
  void loop_backward(const LoopCall& c) const override {
    c.backend.linear_backward_weight(c.dy, c.x[0], c.grads[0], c.grads[1]);
    if (c.needed[0]) c.backend.linear_backward_data(c.dy, c.params[0], c.dx[0]);
  }
};

}  // namespace

const OpRecord& linear_op() {
  static const Linear op;
  return op;
}

}  // namespace gradeq
