// precision_sweep.h — how the gradient accumulation buffer's dtype and
// Kahan compensation change the accumulated gradient's error as the number
// of micro-batches grows, next to the bound the error model gives for each.
// The study behind the report's "Accumulation precision" section. It runs
// the backend under test (the host backend for `gradeq sweep precision`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/core/norm_sweep.h"
#include "harness/core/scenario.h"
#include "kernels/backend.h"

namespace gradeq {

struct PrecisionSweepOptions {
  long micro_batch = 2;  // samples per micro-batch
  std::vector<long> micro_batches = {1, 4, 16, 64, 256, 512};
  int seeds = 3;
  std::uint64_t seed = 1;
};

struct PrecisionSweepRow {
  DType accumulate = DType::f32;
  bool compensated = false;
  long micro_batches = 0;
  SweepStatistic error;  // ||K_acc - R_full|| / ||R_full||, the window's gradient
  SweepStatistic bound;  // ||bound|| / ||R_full||, the error model's per-element bounds
  double worst_ratio = 0.0;  // largest per-element error / bound over seeds
  SweepStatistic norm_shift;  // | ||K_acc|| - ||R_full|| | / ||R_full||: the gradient-norm shift
};

struct PrecisionSweep {
  PrecisionSweepOptions options;
  std::string model;
  std::string backend;
  std::vector<PrecisionSweepRow> rows;
};

std::string accumulation_name(DType accumulate, bool compensated);
ScenarioSpec precision_sweep_scenario(const PrecisionSweepOptions& o, DType accumulate, bool compensated,
                                      long micro_batches, std::uint64_t seed);
// Throws std::invalid_argument for sizes < 1 or seeds < 1.
PrecisionSweep run_precision_sweep(const PrecisionSweepOptions& options, Backend& backend,
                                   const ProgressSink& progress = {});

}  // namespace gradeq
