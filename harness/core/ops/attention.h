// attention.h — what the two attention records share: multi-head
// self-attention's core (reference/attention.h; the Backend's
// attention_forward / attention_backward) over the output of a QKV
// projection [rows, 3D], writing [rows, D] for the output projection. In a
// token model the node also reads the ids, and keys at the padding token
// are not seen. The row max and sum are the node's saved statistics
// (saved_mean, saved_rstd): rows x heads of each.
#pragma once

#include <string>

#include "harness/core/ops/op_record.h"
#include "reference/attention.h"

namespace gradeq {

template <bool Causal>
struct AttentionMath {
  static ref::AttentionShape shape(const ref::Model& model, const ref::Node& node) {
    return {node.argument, model.spec.positions, Causal, model.spec.padding_token};
  }
  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    return ref::attention_forward(shape(c.model, c.node), *c.x[0], c.x.size() > 1 ? c.x[1] : nullptr);
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    if (c.needed[0])
      c.dx[0] = ref::attention_backward(shape(c.model, c.node), *c.x[0], c.x.size() > 1 ? c.x[1] : nullptr, c.dy);
  }
};

template <bool Causal>
class AttentionRecord : public OpRecordWith<AttentionMath<Causal>> {
 public:
  std::string_view argument() const override { return "heads"; }
  std::string describe(long heads) const override {
    return std::string(this->name()) + "(" + std::to_string(heads) + " heads)";
  }
  void check(long heads, std::span<const long> in) const override {
    if (heads < 1 || in[0] % 3 != 0 || (in[0] / 3) % heads != 0)
      throw std::invalid_argument(": it reads a QKV projection of 3 D features, D a multiple of its " +
                                  std::to_string(heads) + " heads; its input has " + std::to_string(in[0]));
  }
  long output_width(long, std::span<const long> in) const override { return in[0] / 3; }
  bool masks_padding_keys() const override { return true; }
  bool reads_later_positions() const override { return !Causal; }
  long saved_groups(const ref::Model&, const ref::Node& node, long rows) const override { return rows * node.argument; }
  static AttentionConfig config(const LoopCall& c) {
    const ref::AttentionShape s = AttentionMath<Causal>::shape(c.model, c.node);
    return {s.heads, s.positions, s.causal, s.padding_token};
  }
  static Tensor ids(const LoopCall& c) { return c.x.size() > 1 ? c.x[1] : Tensor{}; }
  void loop_forward(const LoopCall& c) const override {
    c.backend.attention_forward(config(c), c.x[0], ids(c), c.y, c.saved_mean, c.saved_rstd);
  }
  void loop_backward(const LoopCall& c) const override {
    c.backend.attention_backward(config(c), c.x[0], ids(c), c.y, c.dy, c.saved_mean, c.saved_rstd, c.dx[0]);
  }
};

}  // namespace gradeq
