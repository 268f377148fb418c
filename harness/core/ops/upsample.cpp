// upsample.cpp — nearest-neighbour up-sampling by 2 of an image value
// (nn.Upsample(scale_factor=2, mode="nearest")): C x 2H x 2W from C x H x
// W, each pixel copied to its 2x2 block; backward sums the block's four
// gradients (reference/pool.h).
#include "harness/core/ops/op_record.h"
#include "reference/pool.h"

namespace gradeq {
namespace {

struct UpsampleMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    return ref::upsample_forward(c.node.in_images.at(0), *c.x[0]);
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    if (c.needed[0]) c.dx[0] = ref::upsample_backward(c.node.in_images.at(0), c.dy);
  }
};

class Upsample final : public OpRecordWith<UpsampleMath> {
 public:
  std::string_view name() const override { return "upsample"; }
  void check_node(const ref::Node& n) const override {
    if (!n.in_images.at(0).is_image())
      throw std::invalid_argument(": its input is not an image (give the scenario an image)");
  }
  long node_output_width(const ref::Node& n) const override { return 4 * n.in_images.at(0).size(); }
  ref::ImageShape output_image(const ref::Node& n) const override {
    const ref::ImageShape in = n.in_images.at(0);
    return {in.channels, 2 * in.height, 2 * in.width};
  }
  void loop_forward(const LoopCall& c) const override {
    const ref::ImageShape in = c.node.in_images.at(0);
    c.backend.upsample_forward(in.channels, in.height, in.width, c.x[0], c.y);
  }
  void loop_backward(const LoopCall& c) const override {
    const ref::ImageShape in = c.node.in_images.at(0);
    if (c.needed[0]) c.backend.upsample_backward(in.channels, in.height, in.width, c.dy, c.dx[0]);
  }
};

}  // namespace

const OpRecord& upsample_op() {
  static const Upsample op;
  return op;
}

}  // namespace gradeq
