// position_embedding.cpp — a learned position embedding (GPT-2's wpe,
// added to the token embedding): y[r, :] = x[r, :] + P[t, :], t the row's
// position in its sample, P [table rows, width] with at least the model's
// positions per sample (`position_embedding:1024` for GPT-2's table).
// Backward: dx = dy, and each position's rows of dy, over the samples,
// add into its row of dP: a reduction as long as the batch's sample count
// (NUMERICS §3, "The embedding").
#include "harness/core/ops/op_record.h"

namespace gradeq {
namespace {

struct PositionEmbeddingMath {
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    const ref::Matrix<T>& x = *c.x[0];
    const ref::Matrix<T>& p = c.params[0];
    const long positions = c.model.spec.positions;
    ref::Matrix<T> y(x.rows(), x.cols());
    for (long r = 0; r < x.rows(); ++r)
      for (long j = 0; j < x.cols(); ++j) y(r, j) = x(r, j) + p(r % positions, j);
    return y;
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    const long positions = c.model.spec.positions;
    c.sums[0].add_rows_by_key(c.params[0].rows(), c.dy, [&](long r) { return r % positions; });
    if (c.needed[0]) c.dx[0] = c.dy;
  }
};

class PositionEmbedding final : public OpRecordWith<PositionEmbeddingMath> {
 public:
  std::string_view name() const override { return "position_embedding"; }
  std::string_view argument() const override { return "table rows"; }
  void check(long rows, std::span<const long>) const override {
    if (rows < 1) throw std::invalid_argument(" needs a table of >= 1 rows");
  }
  void check_spec(long rows, const ref::ModelSpec& spec) const override {
    if (rows < spec.positions)
      throw std::invalid_argument(": its table of " + std::to_string(rows) + " rows is shorter than the " +
                                  std::to_string(spec.positions) + " positions per sample");
  }
  std::vector<ref::TensorInfo> parameters(long rows, std::span<const long> in) const override {
    return {{"weight", rows, in[0], ref::Init::small}};
  }
  void loop_forward(const LoopCall& c) const override {
    c.backend.position_embedding_forward(c.x[0], c.params[0], c.model.spec.positions, c.y);
  }
  void loop_backward(const LoopCall& c) const override {
    c.backend.position_embedding_backward(c.dy, c.model.spec.positions, c.grads[0]);
    if (c.needed[0]) c.backend.convert(c.dy, c.dx[0]);
  }
};

}  // namespace

const OpRecord& position_embedding_op() {
  static const PositionEmbedding op;
  return op;
}

}  // namespace gradeq
