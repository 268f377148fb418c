// embedding.cpp — a token embedding (nn.Embedding): y[r, :] = W[id_r, :],
// W [vocabulary, width]. Its input is a token model's ids: one-hot rows of
// the vocabulary's width, stored as their index, so that the weight's
// shape comes from the input width as a linear layer's does. Backward adds
// each row of dy into its token's row of dW; the scenario's padding token
// (its padding_idx) gets none. No gradient flows to the ids.
#include <type_traits>

#include "harness/core/ops/op_record.h"

namespace gradeq {
namespace {

template <class T>
long token_id(const T& x) {
  if constexpr (std::is_same_v<T, double>) {
    return static_cast<long>(x);
  } else {
    return static_cast<long>(x.value);
  }
}

struct EmbeddingMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    const ref::Matrix<T>& ids = *c.x[0];
    const ref::Matrix<T>& w = c.params[0];
    ref::Matrix<T> y(ids.rows(), w.cols());
    for (long r = 0; r < ids.rows(); ++r) y.row(r) = w.row(token_id(ids(r, 0)));
    return y;
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    const ref::Matrix<T>& ids = *c.x[0];
    const long padding = c.model.spec.padding_token;
    c.sums[0].add_rows_by_key(c.params[0].rows(), c.dy, [&](long r) {
      const long v = token_id(ids(r, 0));
      return v == padding ? -1L : v;
    });
  }
};

class Embedding final : public OpRecordWith<EmbeddingMath> {
 public:
  std::string_view name() const override { return "embedding"; }
  std::string_view argument() const override { return "width"; }
  void check(long width, std::span<const long>) const override {
    if (width < 1) throw std::invalid_argument(" needs a width >= 1");
  }
  long output_width(long width, std::span<const long>) const override { return width; }
  std::vector<ref::TensorInfo> parameters(long width, std::span<const long> in) const override {
    return {{"weight", in[0], width, ref::Init::small}};
  }
  bool reads_token_ids() const override { return true; }
  void loop_forward(const LoopCall& c) const override { c.backend.embedding_forward(c.x[0], c.params[0], c.y); }
  void loop_backward(const LoopCall& c) const override {
    c.backend.embedding_backward(c.x[0], c.dy, c.model.spec.padding_token, c.grads[0]);
  }
};

}  // namespace

const OpRecord& embedding_op() {
  static const Embedding op;
  return op;
}

}  // namespace gradeq
