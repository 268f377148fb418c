// attention.cpp — causal multi-head self-attention (a GPT's): query i of a
// sample sees its keys j <= i (harness/core/ops/attention.h).
#include "harness/core/ops/attention.h"

namespace gradeq {
namespace {

class Attention final : public AttentionRecord<true> {
 public:
  std::string_view name() const override { return "attention"; }
};

}  // namespace

const OpRecord& attention_op() {
  static const Attention op;
  return op;
}

}  // namespace gradeq
