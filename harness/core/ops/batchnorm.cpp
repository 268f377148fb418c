// batchnorm.cpp — BatchNorm in training mode: statistics per channel over
// every row of the batch, and running statistics updated as PyTorch does
// (nn.BatchNorm1d; over an image, nn.BatchNorm2d: per channel, over every
// sample and pixel). Its statistics couple the samples of a batch, which is
// why accumulation cannot reproduce the full batch (docs/BATCHNORM.md).
#include "harness/core/ops/normalizer.h"

namespace gradeq {
namespace {

class BatchNorm final : public NormRecord<ref::NormKind::batch> {
 public:
  std::string_view name() const override { return "batchnorm"; }
  bool couples_samples() const override { return true; }
  std::vector<ref::TensorInfo> node_buffers(const ref::Node& n) const override {
    return {{"running_mean", 1, channels(n), ref::Init::small, 0.0},
            {"running_var", 1, channels(n), ref::Init::small, 1.0}};
  }
};

}  // namespace

const OpRecord& batchnorm_op() {
  static const BatchNorm op;
  return op;
}

}  // namespace gradeq
