// avgpool.cpp — average pooling on an image value (nn.AvgPool2d(k,
// stride), no padding): "avgpool:k", then stride= (default k: windows side
// by side). Its math is reference/pool.h.
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

struct AvgPoolMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    return ref::avgpool_forward(shape(c.node), *c.x[0]);
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    if (c.needed[0]) c.dx[0] = ref::avgpool_backward(shape(c.node), c.dy);
  }
};

class AvgPool final : public OpRecordWith<AvgPoolMath> {
 public:
  std::string_view name() const override { return "avgpool"; }
  std::string_view argument() const override { return "kernel"; }
  std::vector<ref::OptionInfo> options() const override { return {{"stride", ref::kSameAsArgument, false, 1}}; }
  void check_node(const ref::Node& n) const override { shape(n).check(); }
  long node_output_width(const ref::Node& n) const override { return shape(n).out().size(); }
  ref::ImageShape output_image(const ref::Node& n) const override { return shape(n).out(); }
  void loop_forward(const LoopCall& c) const override { c.backend.avgpool_forward(config(c.node), c.x[0], c.y); }
  void loop_backward(const LoopCall& c) const override {
    if (c.needed[0]) c.backend.avgpool_backward(config(c.node), c.dy, c.dx[0]);
  }
};

}  // namespace

const OpRecord& avgpool_op() {
  static const AvgPool op;
  return op;
}

}  // namespace gradeq
