// normalizer.h — what the four normalizer records share: statistics over
// groups of elements (reference/layers.h: for_each_norm_group), y = gamma
// x_hat + beta, gamma and beta [1, features] (RMSNorm: gamma alone), and
// the backend's norm_forward / norm_backward. Each record says which
// elements share statistics (K) and what else it has (groupnorm's
// argument, batchnorm's running statistics).
#pragma once

#include "harness/core/ops/op_record.h"
#include "kernels/norm_geometry.h"

namespace gradeq {

template <ref::NormKind K>
struct NormMath {
  static constexpr bool kHasBeta = K != ref::NormKind::rms;

  template <class T>
  static ref::Matrix<T> forward(const ref::OpForward<T>& c) {
    const ref::NormShape shape = *c.node.op->norm_shape(c.model, c.node);
    c.statistics = c.supplied ? **c.supplied : ref::norm_statistics(shape, *c.x[0]);
    const ref::Matrix<T> no_beta;
    ref::Matrix<T> y = ref::norm_forward(shape, *c.x[0], c.params[0], kHasBeta ? c.params[1] : no_beta, *c.statistics);
    if (c.running && !c.supplied)
      ref::batchnorm_update_running(c.running[0], c.running[1], *c.statistics, c.model.spec.bn_momentum);
    return y;
  }
  template <class T>
  static void backward(const ref::OpBackward<T>& c) {
    const ref::NormShape shape = *c.node.op->norm_shape(c.model, c.node);
    const ref::NormStatistics<T>& st = *c.statistics;
    c.dx[0] = ref::norm_backward(shape, *c.x[0], c.params[0], c.dy, st,
                                 c.supplied ? *c.supplied : ref::norm_coupling(shape, *c.x[0], c.params[0], c.dy, st),
                                 c.sums[0], kHasBeta ? &c.sums[1] : nullptr);
  }
};

template <ref::NormKind K>
class NormRecord : public OpRecordWith<NormMath<K>> {
 public:
  // BatchNorm and GroupNorm over an image are per channel (BatchNorm2d,
  // GroupNorm on NCHW): each channel's H W columns share its affine (and
  // BatchNorm's statistics). LayerNorm and RMSNorm keep one per column.
  static constexpr bool kPerChannel = K == ref::NormKind::batch || K == ref::NormKind::group;
  static long spatial(const ref::Node& n) {
    return kPerChannel && n.in_images.at(0).is_image() ? n.in_images[0].plane() : 1;
  }
  static long channels(const ref::Node& n) { return n.in_widths.at(0) / spatial(n); }

  std::vector<ref::TensorInfo> node_parameters(const ref::Node& n) const override {
    std::vector<ref::TensorInfo> p{{"weight", 1, channels(n), ref::Init::gain}};
    if (NormMath<K>::kHasBeta) p.push_back({"bias", 1, channels(n), ref::Init::shift});
    return p;
  }
  bool normalizes() const override { return true; }
  int generator_weight() const override { return this->couples_samples() ? 0 : 1; }
  std::optional<ref::NormShape> norm_shape(const ref::Model& model, const ref::Node& node) const override {
    ref::NormShape s;
    s.kind = K;
    s.groups = K == ref::NormKind::group ? node.argument : 1;
    s.positions = model.spec.positions;
    s.spatial = spatial(node);
    s.eps = model.spec.norm_eps;
    return s;
  }
  long saved_groups(const ref::Model& model, const ref::Node& node, long rows) const override {
    return norm_geometry(*norm_config(model, node), rows, node.in_widths[0]).group_count();
  }
  void loop_forward(const LoopCall& c) const override {
    const NormConfig config = *norm_config(c.model, c.node);
    const bool running = c.update_running && c.node.buffers > 0;
    c.backend.norm_forward(config, c.x[0], c.params[0], NormMath<K>::kHasBeta ? c.params[1] : Tensor{}, c.y,
                           c.saved_mean, c.saved_rstd, running ? c.buffers[0] : Tensor{},
                           running ? c.buffers[1] : Tensor{});
  }
  void loop_backward(const LoopCall& c) const override {
    const NormConfig config = *norm_config(c.model, c.node);
    c.backend.norm_backward(config, c.x[0], c.params[0], c.dy, c.saved_mean, c.saved_rstd, c.dx[0], c.grads[0],
                            NormMath<K>::kHasBeta ? c.grads[1] : Tensor{});
  }
};

}  // namespace gradeq
