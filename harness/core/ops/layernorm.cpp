// layernorm.cpp — LayerNorm over each row's features (nn.LayerNorm).
#include "harness/core/ops/normalizer.h"

namespace gradeq {
namespace {

class LayerNorm final : public NormRecord<ref::NormKind::layer> {
 public:
  std::string_view name() const override { return "layernorm"; }
};

}  // namespace

const OpRecord& layernorm_op() {
  static const LayerNorm op;
  return op;
}

}  // namespace gradeq
