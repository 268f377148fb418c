// norm_geometry.h — which elements of an x [rows, cols] share a
// normalizer's statistics, for every backend (__host__ __device__ under
// nvcc) and for the training loop that sizes the saved statistics. The
// float64 reference keeps its own description (reference/layers.h), so that
// the two are independent. Must not depend on anything outside kernels/.
#pragma once

#include "kernels/backend.h"
#include "kernels/dtype.h"

namespace gradeq {

struct NormGeometry {
  NormKind kind = NormKind::layer;
  long rows = 0, cols = 0;
  long groups_per_sample = 1;  // GroupNorm's channel groups
  long positions = 1;          // rows per sample
  long spatial = 1;            // columns per channel (an image's H W, NCHW): BatchNorm2d's and GroupNorm's affine is per channel

  // The channel of flat element e (its gamma's and beta's index), and the channel count.
  GRADEQ_HD long channel(long e) const { return (e % cols) / spatial; }
  GRADEQ_HD long channels() const { return cols / spatial; }

  // Statistics groups: one per row (layer, rms), per channel (batch), or
  // per sample and channel group (group).
  GRADEQ_HD long group_count() const {
    switch (kind) {
      case NormKind::layer:
      case NormKind::rms: return rows;
      case NormKind::batch: return cols / spatial;
      case NormKind::group: return rows / positions * groups_per_sample;
    }
    return 0;
  }
  // Elements in each group (all groups have the same size).
  GRADEQ_HD long group_size() const {
    switch (kind) {
      case NormKind::layer:
      case NormKind::rms: return cols;
      case NormKind::batch: return rows * spatial;
      case NormKind::group: return positions * (cols / groups_per_sample);
    }
    return 0;
  }
  // Flat row-major index of the i-th element of group g.
  GRADEQ_HD long element(long g, long i) const {
    switch (kind) {
      case NormKind::layer:
      case NormKind::rms: return g * cols + i;
      case NormKind::batch: return i / spatial * cols + g * spatial + i % spatial;
      case NormKind::group: {
        const long per_group = cols / groups_per_sample;
        const long sample = g / groups_per_sample, gg = g % groups_per_sample;
        return (sample * positions + i / per_group) * cols + gg * per_group + i % per_group;
      }
    }
    return 0;
  }
  // The group of flat element e.
  GRADEQ_HD long group_of(long e) const {
    const long r = e / cols, c = e % cols;
    switch (kind) {
      case NormKind::layer:
      case NormKind::rms: return r;
      case NormKind::batch: return c / spatial;
      case NormKind::group: return (r / positions) * groups_per_sample + c / (cols / groups_per_sample);
    }
    return 0;
  }
};

inline NormGeometry norm_geometry(const NormConfig& c, long rows, long cols) {
  return NormGeometry{c.kind, rows, cols, c.groups, c.positions, c.spatial};
}

}  // namespace gradeq
