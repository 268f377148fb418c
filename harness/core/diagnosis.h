// diagnosis.h — what a failing verdict's tensors say about the bug, in the
// words a user acts on: a constant factor on every gradient of a window (a
// normalisation error), a learning rate off the schedule, a clip that
// differs where the gradient agrees, weights that differ where gradient,
// learning rate and clip agree (the optimizer step). It reads the checks a
// verdict holds and decides nothing: the verdict's status is already set.
#pragma once

#include <string>
#include <vector>

#include "harness/core/compare.h"

namespace gradeq {

// The smallest cosine between a run's gradient and the reference's, and
// the largest spread of their ratio over a window's gradient tensors, for
// a window's error to be called a constant factor.
inline constexpr double kFactorCosine = 0.9999;
inline constexpr double kFactorSpread = 1e-3;
// ... and how far from 1 the factor must be: a normaliser off by one item
// in a hundred is; the slight, uniform shrinking of a gradient rounded to
// bfloat16 (0.9996) is not a normalisation.
inline constexpr double kFactorAwayFromOne = 0.01;

// `checks` of one verdict; their names carry "acc: " / "full: " where the
// verdict judges two runs (kernel correctness). `run` and `reference` name
// what was compared where the names carry no prefix ("K_acc", "R_full").
// `without_gradient`: parameters the run had no gradient for (their weights
// differ for that reason, said by the verdict's problems).
std::vector<std::string> diagnose(const std::vector<TensorCheck>& checks, const std::string& run,
                                  const std::string& reference, const std::vector<std::string>& without_gradient = {});

}  // namespace gradeq
