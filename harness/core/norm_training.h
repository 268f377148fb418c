// norm_training.h — BatchNorm against GroupNorm and LayerNorm over a
// training run (`gradeq sweep norms --windows K`). The same small conv net,
// from the same initial weights, trains K windows of an effective batch two
// ways: as one batch, and accumulated over N micro-batches of b samples.
// Per normalizer and micro-batch size it measures how far the two
// trajectories end apart, each one's training loss, held-out loss and
// accuracy (evaluation mode: BatchNorm normalizes with its running
// statistics), and BatchNorm's running-statistics drift. The data is a
// labelled image task made from the seed.
//
// Both trajectories are the float64 reference with its bounds (T =
// Bounded), so "within its bounds' reach" is a check: for a normalizer that
// treats samples independently, every parameter of the accumulated
// trajectory must stay within the two runs' float64 bounds of the
// one-batch trajectory, window after window (the math-equivalence bound,
// harness/core/tolerance.h). BatchNorm is the named expected divergence:
// measured, never a failure. docs/BATCHNORM.md reads the results.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/core/progress.h"
#include "harness/core/scenario.h"

namespace gradeq {

struct NormTrainingOptions {
  long windows = 40;                  // K optimizer steps
  long effective_batch = 32;          // samples per window
  std::vector<long> micro_batch_sizes = {32, 16, 8, 4, 2};
  long held_out = 256;                // samples of the held-out set
  ref::ImageShape image{3, 8, 8};
  long classes = 4;
  double learning_rate = 0.05;        // SGD, momentum 0.9
  std::vector<std::string> norms = {"batchnorm", "groupnorm:4", "layernorm"};
  std::uint64_t seed = 1;
};

// After each window, one trajectory's state judged on the data.
struct TrainingPoint {
  double train_loss = 0.0;     // the window's loss (before its step), as trained
  double held_out_loss = 0.0;  // after the step, evaluation mode
  double held_out_accuracy = 0.0;
};

struct NormTrainingCurve {
  std::string norm;        // layer text, e.g. "groupnorm:4"
  long micro_batch = 0;    // b
  long micro_batches = 0;  // N = effective batch / b
  std::vector<TrainingPoint> accumulated;
  // Per window, accumulated against one batch:
  std::vector<double> distance;     // ||theta_acc - theta_full|| / ||theta_full - theta_0||
  std::vector<double> worst_ratio;  // max over parameters of |theta_acc - theta_full| / (math bound)
  std::vector<double> running_drift;  // ||S_acc - S_full|| / ||S_full - S_0|| (BatchNorm), else empty
  bool expected_divergence = false;   // BatchNorm: accumulation is not the one-batch procedure
  // Every window's worst ratio at most 1 (and finite): the trajectories stay
  // within their bounds' reach. Meaningful where no divergence is expected.
  bool within_reach() const;
};

struct NormTraining {
  NormTrainingOptions options;
  std::string model;    // with NORM for the normalizer
  std::string task;     // what the synthetic data is
  // Per normalizer, the one-batch trajectory (shared by every micro-batch size).
  std::vector<std::string> norms;
  std::vector<std::vector<TrainingPoint>> one_batch;
  std::vector<NormTrainingCurve> curves;
  double seconds = 0.0;
  // No curve that expects equivalence left its bounds' reach.
  bool passed() const;
};

// The sweep's scenario for one normalizer and micro-batch size (data from
// the seed, replaced by the labelled task in run_norm_training).
ScenarioSpec norm_training_scenario(const NormTrainingOptions& options, const std::string& norm, long micro_batch);

// Throws std::invalid_argument on options it cannot run: a micro-batch size
// that does not divide the effective batch, BatchNorm statistics of one
// value, fewer than 1 window, a normalizer that is not a layer.
NormTraining run_norm_training(const NormTrainingOptions& options, const ProgressSink& progress = {});

}  // namespace gradeq
