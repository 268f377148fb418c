// groupnorm.cpp — GroupNorm: statistics over one sample's positions and one
// group of channels (nn.GroupNorm(groups, channels)).
#include "harness/core/ops/normalizer.h"

namespace gradeq {
namespace {

class GroupNorm final : public NormRecord<ref::NormKind::group> {
 public:
  std::string_view name() const override { return "groupnorm"; }
  std::string_view argument() const override { return "groups"; }
  std::string describe(long groups) const override { return "groupnorm(" + std::to_string(groups) + " groups)"; }
  void check(long groups, std::span<const long> in) const override {
    if (groups < 1 || in[0] % groups != 0)
      throw std::invalid_argument(": " + std::to_string(groups) + " groups do not divide " + std::to_string(in[0]) +
                                  " channels");
  }
};

}  // namespace

const OpRecord& groupnorm_op() {
  static const GroupNorm op;
  return op;
}

}  // namespace gradeq
