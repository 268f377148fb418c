// rmsnorm.cpp — RMSNorm over each row's features: x / rms(x) * gamma, no
// mean and no beta (nn.RMSNorm).
#include "harness/core/ops/normalizer.h"

namespace gradeq {
namespace {

class RmsNorm final : public NormRecord<ref::NormKind::rms> {
 public:
  std::string_view name() const override { return "rmsnorm"; }
};

}  // namespace

const OpRecord& rmsnorm_op() {
  static const RmsNorm op;
  return op;
}

}  // namespace gradeq
