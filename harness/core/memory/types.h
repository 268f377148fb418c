// types.h — memory by category: what a run holds at its peak (measured or
// predicted), the fit of fixed plus per-sample bytes that `gradeq plan` and
// the report use, a scenario's memory as the gate reports it, and sizes as
// text (docs/MEMORY.md). The loop's allocation plan and prediction are in
// loop_plan.h, the reference's estimate and the fit to the memory
// available in reference_estimate.h; the measurement, which runs the
// training loop and so sits above it, in harness/core/measured_memory.h.
//
// Gradient accumulation's promise is that the peak holds one micro-batch of
// activations whatever N is: everything here is in bytes at the largest
// micro-batch of a run.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace gradeq {

enum class MemoryCategory : std::size_t {
  parameters,       // master weights, their compute-dtype copies, BatchNorm running statistics
  gradients,        // accumulation buffers (and the Kahan staging and compensation)
  optimizer_state,  // momentum / Adam moments, only those the optimizer uses
  activations,      // per-sample tensors: layer inputs and outputs, their gradients, saved statistics, targets
  scratch,          // what the backend holds beyond the loop's tensors at the peak (GEMM workspace, staging)
};
inline constexpr std::size_t kMemoryCategories = 5;
inline constexpr std::array<MemoryCategory, kMemoryCategories> kAllMemoryCategories = {
    MemoryCategory::parameters, MemoryCategory::gradients, MemoryCategory::optimizer_state,
    MemoryCategory::activations, MemoryCategory::scratch};

std::string memory_category_name(MemoryCategory c);

// How far a measured byte count may sit from its prediction, relative to
// the measurement (docs/NUMERICS.md §13): allocation is exact arithmetic on
// integers, so this allows only for a backend that rounds its allocations
// up (alignment, a caching allocator's size classes). Rules that compare
// two runs of the same loop on the same backend (peak independent of N,
// checkpointing's bitwise gradients) allow nothing.
inline constexpr double kMemoryTolerance = 0.05;  // "parameters", "optimizer state", ...

struct MemoryUsage {
  std::array<double, kMemoryCategories> bytes{};  // each category at the peak
  double peak = 0.0;                              // the sum: the backend's peak over the run

  double& operator[](MemoryCategory c) { return bytes[static_cast<std::size_t>(c)]; }
  double operator[](MemoryCategory c) const { return bytes[static_cast<std::size_t>(c)]; }
  double total() const;
};

// peak(b) = fixed + per_sample * b, fitted to measured peaks.
struct MemoryFit {
  double fixed = 0.0, per_sample = 0.0;
  // Largest relative distance of a measured point from the line.
  double worst_residual = 0.0;

  double at(double samples) const { return fixed + per_sample * samples; }
};

// Least squares through (samples, bytes) points, at least two distinct sizes.
MemoryFit fit_memory(const std::vector<std::pair<long, double>>& points);

// A scenario's memory as the gate reports it: the peaks of its kernel runs
// (K_acc, K_full) and their predictions from a fit to one-micro-batch runs
// at the largest micro-batch b and at about b / 2. The accumulated run's
// prediction is the promise that N does not matter; the full batch's, that
// the peak is fixed plus linear in the samples.
struct ScenarioMemory {
  MemoryUsage accumulated, full_batch;  // measured
  long micro_batch = 0, window = 0;     // samples: the largest micro-batch, the largest window
  bool predicted = false;               // the fit below was measured
  MemoryFit fit;
  MemoryUsage loop;                     // loop_memory() at the largest micro-batch (no scratch)

  double predicted_accumulated() const { return fit.at(static_cast<double>(micro_batch)); }
  double predicted_full_batch() const { return fit.at(static_cast<double>(window)); }
  // The larger relative distance of the two peaks from their predictions.
  double worst_relative_error() const;
  bool holds() const { return !predicted || worst_relative_error() <= kMemoryTolerance; }
};

// Parses a size: a number with an optional binary (KiB, MiB, GiB, TiB, or
// K, M, G, T) or decimal (kB, MB, GB, TB) unit, or B; "8GiB", "512 MiB",
// "16G", "1.5e9". Throws std::invalid_argument naming the text otherwise.
double parse_bytes(const std::string& text);
// "1.50 GiB", "312 KiB", "900 B".
std::string format_bytes(double bytes);

}  // namespace gradeq
