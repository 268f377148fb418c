// bidirectional_attention.cpp — multi-head self-attention without the
// causal mask (an encoder's): every query of a sample sees every key of it
// but the padding (harness/core/ops/attention.h). Under right padding a
// causal query never reaches a padded key, so only this form shows a
// missing key-padding mask (docs/BUGS.md).
#include "harness/core/ops/attention.h"

namespace gradeq {
namespace {

class BidirectionalAttention final : public AttentionRecord<false> {
 public:
  std::string_view name() const override { return "bidirectional_attention"; }
};

}  // namespace

const OpRecord& bidirectional_attention_op() {
  static const BidirectionalAttention op;
  return op;
}

}  // namespace gradeq
