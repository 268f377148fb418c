// conv2d.cpp — a 2-D convolution (nn.Conv2d(C_in, C_out, k, stride,
// padding, dilation, groups)) on an image value: "conv2d:C_out:k", then
// stride=, padding=, dilation=, groups= as needed (PyTorch's defaults 1,
// 0, 1, 1). Its math is reference/conv.h.
#include "harness/core/ops/op_record.h"
#include "reference/conv.h"

namespace gradeq {
namespace {

enum Option { kKernel, kStride, kPadding, kDilation, kGroups };

ref::ConvShape shape(const ref::Node& n) {
  ref::ConvShape s;
  s.in = n.in_images.at(0);
  s.out_channels = n.argument;
  s.kernel = n.options.at(kKernel);
  s.stride = n.options.at(kStride);
  s.padding = n.options.at(kPadding);
  s.dilation = n.options.at(kDilation);
  s.groups = n.options.at(kGroups);
  return s;
}

Conv2dConfig config(const ref::Node& n) {
  const ref::ConvShape s = shape(n);
  return {s.in.channels, s.in.height, s.in.width, s.out_channels, s.kernel, s.stride, s.padding, s.dilation, s.groups};
}

struct Conv2dMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    return ref::conv2d_forward(shape(c.node), *c.x[0], c.params[0], c.params[1]);
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    ref::conv2d_backward_weight(shape(c.node), *c.x[0], c.dy, c.sums[0], c.sums[1]);
    if (c.needed[0]) c.dx[0] = ref::conv2d_backward_data(shape(c.node), c.params[0], c.dy);
  }
};

class Conv2d final : public OpRecordWith<Conv2dMath> {
 public:
  std::string_view name() const override { return "conv2d"; }
  std::string_view argument() const override { return "output channels"; }
  std::vector<ref::OptionInfo> options() const override {
    return {{"kernel", 1, true, 1}, {"stride", 1, false, 1}, {"padding", 0, false, 0}, {"dilation", 1, false, 1},
            {"groups", 1, false, 1}};
  }
  void check_node(const ref::Node& n) const override { shape(n).check(); }
  long node_output_width(const ref::Node& n) const override { return shape(n).out().size(); }
  ref::ImageShape output_image(const ref::Node& n) const override { return shape(n).out(); }
  std::vector<ref::TensorInfo> node_parameters(const ref::Node& n) const override {
    const ref::ConvShape s = shape(n);
    return {{"weight", s.out_channels, s.taps(), ref::Init::fan_in}, {"bias", 1, s.out_channels, ref::Init::small}};
  }
  void loop_forward(const LoopCall& c) const override {
    c.backend.conv2d_forward(config(c.node), c.x[0], c.params[0], c.params[1], c.y);
  }
  void loop_backward(const LoopCall& c) const override {
    c.backend.conv2d_backward_weight(config(c.node), c.dy, c.x[0], c.grads[0], c.grads[1]);
    if (c.needed[0]) c.backend.conv2d_backward_data(config(c.node), c.dy, c.params[0], c.dx[0]);
  }
};

}  // namespace

const OpRecord& conv2d_op() {
  static const Conv2d op;
  return op;
}

}  // namespace gradeq
