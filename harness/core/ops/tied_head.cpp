// tied_head.cpp — a language model's head tied to its token embedding
// (`lm_head.weight = wte.weight`): logits = x W^T, W the embedding's
// weight [vocabulary, width], no bias. One parameter with two uses: the
// head's weight gradient dy^T x and the embedding's per-token sums both
// add into the one gradient buffer (NUMERICS §3, "A tied weight").
#include "harness/core/ops/op_record.h"

namespace gradeq {
namespace {

struct TiedHeadMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    return ref::gemm(*c.x[0], ref::transposed(c.params[0]));
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    c.sums[0].add_product(ref::transposed(c.dy), *c.x[0]);
    if (c.needed[0]) c.dx[0] = ref::linear_backward_data(c.params[0], c.dy);
  }
};

class TiedHead final : public OpRecordWith<TiedHeadMath> {
 public:
  std::string_view name() const override { return "tied_head"; }
  bool ties_token_embedding() const override { return true; }
  void loop_forward(const LoopCall& c) const override { c.backend.linear_forward(c.x[0], c.params[0], Tensor{}, c.y); }
  void loop_backward(const LoopCall& c) const override {
    c.backend.linear_backward_weight(c.dy, c.x[0], c.grads[0], Tensor{});
    if (c.needed[0]) c.backend.linear_backward_data(c.dy, c.params[0], c.dx[0]);
  }
};

}  // namespace

const OpRecord& tied_head_op() {
  static const TiedHead op;
  return op;
}

}  // namespace gradeq
