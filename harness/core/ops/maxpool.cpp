// maxpool.cpp — max pooling on an image value (nn.MaxPool2d(k, stride),
// no padding): "maxpool:k", then stride= (default k). Ties go to the
// window's first largest value, row by row, as in PyTorch; where the
// errors could reorder a window's values the bounds cover either choice
// (reference/pool.h).
#include "harness/core/ops/op_record.h"
#include "reference/pool.h"

namespace gradeq {
namespace {

ref::PoolShape shape(const ref::Node& n) {
  return {n.in_images.at(0), n.argument, n.argument, n.options.at(0), n.options.at(0)};
}

PoolConfig config(const ref::Node& n) {
  const ref::PoolShape s = shape(n);
  return {s.in.channels, s.in.height, s.in.width, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w};
}

struct MaxPoolMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    return ref::maxpool_forward(shape(c.node), *c.x[0]);
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    if (c.needed[0]) c.dx[0] = ref::maxpool_backward(shape(c.node), *c.x[0], c.dy);
  }
};

class MaxPool final : public OpRecordWith<MaxPoolMath> {
 public:
  std::string_view name() const override { return "maxpool"; }
  std::string_view argument() const override { return "kernel"; }
  std::vector<ref::OptionInfo> options() const override { return {{"stride", ref::kSameAsArgument, false, 1}}; }
  void check_node(const ref::Node& n) const override { shape(n).check(); }
  long node_output_width(const ref::Node& n) const override { return shape(n).out().size(); }
  ref::ImageShape output_image(const ref::Node& n) const override { return shape(n).out(); }
  void loop_forward(const LoopCall& c) const override { c.backend.maxpool_forward(config(c.node), c.x[0], c.y); }
  void loop_backward(const LoopCall& c) const override {
    if (c.needed[0]) c.backend.maxpool_backward(config(c.node), c.x[0], c.dy, c.dx[0]);
  }
};

}  // namespace

const OpRecord& maxpool_op() {
  static const MaxPool op;
  return op;
}

}  // namespace gradeq
