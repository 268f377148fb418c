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
  void check_node(const ref::Node& n) const override {
    if (n.argument < 1 || channels(n) % n.argument != 0)
      throw std::invalid_argument(": " + std::to_string(n.argument) + " groups do not divide " +
                                  std::to_string(channels(n)) + " channels");
  }
};

}  // namespace

const OpRecord& groupnorm_op() {
  static const GroupNorm op;
  return op;
}

}  // namespace gradeq
