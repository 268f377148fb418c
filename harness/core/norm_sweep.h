// norm_sweep.h — how far each normalizer's accumulated gradient departs
// from the full batch, in float64, as the micro-batch shrinks at a fixed
// total batch. The study behind docs/BATCHNORM.md and the report's
// "Normalizers under accumulation" section. Reference only: it measures the
// mathematics of the procedure, not a kernel.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/core/progress.h"
#include "harness/core/scenario.h"

namespace gradeq {

struct NormSweepOptions {
  long total_batch = 64;   // samples per window
  long positions = 4;      // rows per sample (spatial positions of the stand-in)
  std::vector<long> micro_batch_sizes = {1, 2, 4, 8, 16, 32, 64};
  int seeds = 5;
  std::uint64_t seed = 1;
};

struct SweepStatistic {
  double mean = 0.0, spread = 0.0, max = 0.0;  // over seeds; spread = sample standard deviation
};
SweepStatistic summarize(const std::vector<double>& xs);

struct NormSweepRow {
  std::string norm;          // "batchnorm", "batchnorm (exact window)", "layernorm", ...
  long micro_batch = 0;      // samples per micro-batch
  long micro_batches = 0;    // N = total_batch / micro_batch
  SweepStatistic gradient;   // ||G_acc - G_full|| / ||G_full||, all parameters
  SweepStatistic loss;       // |L_acc - L_full| / |L_full|
  SweepStatistic running;    // ||S_acc - S_full|| / ||S_full - S_0||, BatchNorm running statistics
  bool has_running = false;
  long forward_passes = 1;   // passes over the window the procedure needs
};

struct NormSweep {
  NormSweepOptions options;
  std::string model;  // with NORM for the normalizer
  std::vector<NormSweepRow> rows;
};

// The normalizers the sweep compares, by name.
std::vector<std::string> norm_sweep_variants();
// The sweep's scenario for one normalizer, micro-batch size and seed.
ScenarioSpec norm_sweep_scenario(const NormSweepOptions& options, const std::string& norm, long micro_batch,
                                 std::uint64_t seed);

// Throws std::invalid_argument if a micro-batch size does not divide the
// total batch or is < 1, or seeds < 1.
NormSweep run_norm_sweep(const NormSweepOptions& options, const ProgressSink& progress = {});

}  // namespace gradeq
