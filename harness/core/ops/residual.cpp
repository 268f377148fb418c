// residual.cpp — the residual combinator: y = x + f(x), where f is the
// branch nested under it ({ residual = [...] }). Its backward hands dy to
// both: the branch, and the stream that skips it, where the training loop
// adds the branch's gradient of x to it (a kernel that writes instead of
// adding loses the skip's gradient).
#include "harness/core/ops/op_record.h"

namespace gradeq {
namespace {

struct ResidualMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    return *c.x[0] + *c.x[1];
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    for (std::size_t i = 0; i < 2; ++i)
      if (c.needed[i]) c.dx[i] = c.dy;
  }
};

class Residual final : public OpRecordWith<ResidualMath> {
 public:
  std::string_view name() const override { return "residual"; }
  bool combines() const override { return true; }
  void check(long, std::span<const long> in) const override {
    if (in[0] != in[1])
      throw std::invalid_argument(": its branch maps " + std::to_string(in[0]) + " features to " +
                                  std::to_string(in[1]) + "; x + f(x) needs the same width");
  }
  // y = f(x), then y += x: one rounding to y's dtype, as an add kernel.
  void loop_forward(const LoopCall& c) const override {
    c.backend.convert(c.x[1], c.y);
    c.backend.accumulate(std::span<const Tensor>(&c.y, 1), std::span<const Tensor>(&c.x[0], 1), {});
  }
  void loop_backward(const LoopCall& c) const override {
    for (std::size_t i = 0; i < 2; ++i)
      if (c.needed[i]) c.backend.convert(c.dy, c.dx[i]);
  }
};

}  // namespace

const OpRecord& residual_op() {
  static const Residual op;
  return op;
}

}  // namespace gradeq
