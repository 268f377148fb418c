// global_avgpool.cpp — the mean of each channel over the whole image
// (nn.AdaptiveAvgPool2d(1)): C x 1 x 1 from C x H x W, the average pool of
// one H x W window (reference/pool.h).
#include "harness/core/ops/op_record.h"
#include "reference/pool.h"

namespace gradeq {
namespace {

ref::PoolShape shape(const ref::Node& n) { return ref::global_pool(n.in_images.at(0)); }

PoolConfig config(const ref::Node& n) {
  const ref::PoolShape s = shape(n);
  return {s.in.channels, s.in.height, s.in.width, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w};
}

struct GlobalAvgPoolMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    return ref::avgpool_forward(shape(c.node), *c.x[0]);
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    if (c.needed[0]) c.dx[0] = ref::avgpool_backward(shape(c.node), c.dy);
  }
};

class GlobalAvgPool final : public OpRecordWith<GlobalAvgPoolMath> {
 public:
  std::string_view name() const override { return "global_avgpool"; }
  void check_node(const ref::Node& n) const override { shape(n).check(); }
  long node_output_width(const ref::Node& n) const override { return shape(n).out().size(); }
  ref::ImageShape output_image(const ref::Node& n) const override { return shape(n).out(); }
  void loop_forward(const LoopCall& c) const override { c.backend.avgpool_forward(config(c.node), c.x[0], c.y); }
  void loop_backward(const LoopCall& c) const override {
    if (c.needed[0]) c.backend.avgpool_backward(config(c.node), c.dy, c.dx[0]);
  }
};

}  // namespace

const OpRecord& global_avgpool_op() {
  static const GlobalAvgPool op;
  return op;
}

}  // namespace gradeq
