// kinds.h — the normalizer geometries and the losses, named once for the
// reference and the kernels (kernels/backend.h uses these).
#pragma once

namespace gradeq::ref {

// Which elements share a normalizer's statistics.
enum class NormKind {
  layer,  // one row (all features of one token)
  rms,    // one row, no mean subtraction, no beta
  group,  // one sample's rows x one channel group
  batch,  // one channel over all rows
};

enum class LossKind {
  mse,            // per row: mean over columns of (y - t)^2
  cross_entropy,  // per row: -log softmax(y)[class]; targets hold the class, -100 = ignore
  causal_lm,      // next-token cross-entropy: targets hold the labels unshifted (token ids, -100 =
                  // ignore); row t of a sample is scored against its label t + 1, the last row
                  // against none (ref::shifted_labels); the loop shifts, the kernels see cross_entropy
};

}  // namespace gradeq::ref
