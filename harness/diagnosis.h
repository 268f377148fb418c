// diagnosis.h — what a failing verdict's tensors say about the bug, in the
// words a user acts on: a constant factor on every gradient of a window (a
// normalisation error), a learning rate off the schedule, a clip that
// differs where the gradient agrees, weights that differ where gradient,
// learning rate and clip agree (the optimizer step). It reads the checks a
// verdict holds and decides nothing: the verdict's status is already set.
#pragma once

#include <string>
#include <vector>

#include "harness/compare.h"

namespace gradeq {

// The smallest cosine between a run's gradient and the reference's, and
// the largest spread of their ratio over a window's gradient tensors, for
// a window's error to be called a constant factor.
inline constexpr double kFactorCosine = 0.9999;
inline constexpr double kFactorSpread = 1e-3;

// `checks` of one verdict; their names carry "acc: " / "full: " where the
// verdict judges two runs (kernel correctness). `run` and `reference` name
// what was compared where the names carry no prefix ("K_acc", "R_full").
std::vector<std::string> diagnose(const std::vector<TensorCheck>& checks, const std::string& run,
                                  const std::string& reference);

}  // namespace gradeq
