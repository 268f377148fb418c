// concat.cpp — the skip-concatenation combinator: y = [x, f(x)] on the
// feature axis, x first, where f is the branch nested under it
// ({ concat = [...] }; a U-Net's decoder reading its encoder's features).
// Its backward splits dy: the first columns go to x, the rest to the
// branch; the training loop adds the branch's gradient of x to x's. Two
// images of one size concatenate their channels (NCHW: torch.cat on
// dim 1).
#include "harness/core/ops/op_record.h"

namespace gradeq {
namespace {

struct ConcatMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    ref::Matrix<T> y(c.x[0]->rows(), c.x[0]->cols() + c.x[1]->cols());
    y.leftCols(c.x[0]->cols()) = *c.x[0];
    y.rightCols(c.x[1]->cols()) = *c.x[1];
    return y;
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    if (c.needed[0]) c.dx[0] = c.dy.leftCols(c.x[0]->cols());
    if (c.needed[1]) c.dx[1] = c.dy.rightCols(c.x[1]->cols());
  }
};

class Concat final : public OpRecordWith<ConcatMath> {
 public:
  std::string_view name() const override { return "concat"; }
  bool combines() const override { return true; }
  long output_width(long, std::span<const long> in) const override { return in[0] + in[1]; }
  // Two images of one size: their channels concatenated (torch.cat on
  // dim 1 of NCHW is this row's columns, x's then the branch's).
  ref::ImageShape output_image(const ref::Node& n) const override {
    const ref::ImageShape a = n.in_images.at(0), b = n.in_images.at(1);
    if (!a.is_image() || !b.is_image() || a.height != b.height || a.width != b.width) return {};
    return {a.channels + b.channels, a.height, a.width};
  }
  void loop_forward(const LoopCall& c) const override {
    c.backend.copy_columns(c.x[0], 0, c.y, 0, c.x[0].cols);
    c.backend.copy_columns(c.x[1], 0, c.y, c.x[0].cols, c.x[1].cols);
  }
  void loop_backward(const LoopCall& c) const override {
    if (c.needed[0]) c.backend.copy_columns(c.dy, 0, c.dx[0], 0, c.x[0].cols);
    if (c.needed[1]) c.backend.copy_columns(c.dy, c.x[0].cols, c.dx[1], 0, c.x[1].cols);
  }
};

}  // namespace

const OpRecord& concat_op() {
  static const Concat op;
  return op;
}

}  // namespace gradeq
