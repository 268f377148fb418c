// reference_estimate.cpp — the reference's peak estimate and the fit to a limit.
#include "harness/core/memory/reference_estimate.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>

#include "reference/bounded.h"
#include "reference/model.h"

namespace gradeq {

double estimated_peak_bytes(const ScenarioSpec& s) {
  const ref::Model model(s.model);
  const std::vector<long>& widths = model.widths;
  // The full-batch run and the accumulated one run at once (the largest
  // window's rows and its largest micro-batch's), or in turn (the larger).
  double rows = 0.0, micro_batch_rows = 0.0;
  for (const auto& window : s.split) {
    const auto positions = static_cast<double>(s.model.positions);
    rows = std::max(rows, static_cast<double>(std::accumulate(window.begin(), window.end(), 0L)) * positions);
    micro_batch_rows = std::max(micro_batch_rows, static_cast<double>(*std::max_element(window.begin(), window.end())) * positions);
  }
  double width_sum = 0.0, width_max = 0.0;
  for (long w : widths) {
    width_sum += static_cast<double>(w);
    width_max = std::max(width_max, static_cast<double>(w));
  }
  double params = 0.0;
  for (const ref::ParameterInfo& p : model.parameters) params += static_cast<double>(p.rows) * static_cast<double>(p.cols);
  const double bounded = sizeof(ref::Bounded);
  // A pass holds the rows of one micro-batch, or of one slice of it
  // (reference_slice_samples).
  const double kernel_rows = rows;
  if (s.reference_slice_samples > 0) {
    const double slice_rows = static_cast<double>(s.reference_slice_samples) * static_cast<double>(s.model.positions);
    rows = std::min(rows, slice_rows);
    micro_batch_rows = std::min(micro_batch_rows, slice_rows);
  }
  // The tape (each layer's input and the output: one bounded value per row
  // and width, freed layer by layer as backward passes), and beside it the
  // gradient flowing back, the layer's input gradient and one temporary:
  // three bounded values per row and width of the widest layer. In both
  // runs (in turn, the larger). Fit to peak RSS with a margin of 15 %: the
  // scenarios where activations are most of the peak measured 1.03-1.08x
  // without it (docs/PERFORMANCE.md §5).
  const double runs = s.reference_runs_in_turn ? 1.0 : 2.0;
  const double activations = 1.15 * (width_sum + 3.0 * width_max) *
                             (s.reference_runs_in_turn ? std::max(rows, micro_batch_rows) : rows + micro_batch_rows) *
                             bounded;
  const double gemm_temporaries = 12.0 * 8.0 * rows * width_max;  // the matrix form's float64 parts
  // A pass in slices sums its reductions over rows (ref::RowSum): 11
  // float64 sums per weight element, and each bias's and normalizer
  // parameter's terms, 32 bytes per row and element.
  double row_sums = 0.0;
  if (s.reference_slice_samples > 0)
    for (const ref::ParameterInfo& p : model.parameters)
      row_sums += p.rows == 1 ? 32.0 * kernel_rows * static_cast<double>(p.cols)
                              : 11.0 * 8.0 * static_cast<double>(p.rows) * static_cast<double>(p.cols);
  // Two reference runs at a time (harness/core/equivalence.cpp; one when in turn), each holding
  // about 9 parameter-sized bounded tensors (the state: parameters and
  // moments; the compute copies of the weights, the accumulation buffer, a
  // micro-batch's fresh gradients, the window's gradients, the clipped
  // gradient and the step's temporaries), and every window's records of the
  // parameter-sized tensors it records (gradient, clipped gradient,
  // parameters, each moment): value, kernel and reference bound in each of
  // the five reference runs, the kernel runs' values, the comparisons: 183
  // bytes per recorded element and window measured, 220 with a margin. Fit
  // to peak RSS measured at 768/3072 with 1, 2 and 4 windows, with and
  // without a clip, and on the scale suite; docs/PERFORMANCE.md §5.
  const ref::OptimizerSpec& o = s.procedure.optimizer;
  const double moments = o.kind == ref::OptimizerKind::sgd ? (o.momentum > 0.0 ? 1.0 : 0.0) : 2.0;
  const double recorded = 2.0 + moments + (s.procedure.clip.enabled ? 1.0 : 0.0);  // the clipped gradient too
  const double windows = static_cast<double>(s.split.size());
  const double state = runs * 9.0 * params * bounded + 220.0 * windows * recorded * params;
  const double kernel = 3.0 * 4.0 * kernel_rows * width_sum + 8.0 * 4.0 * params;
  // A weight gradient after a normalizer: the matrix form follows each
  // statistics group's two shared sources (mean, 1/sigma) through dW = dy^T x,
  // a [sources x output] coefficient sum and term count for each operand
  // (reference/matmul_sources.cpp, pair_sums; kept for every slice of a pass in
  // slices): 2 operands x 2 x 8 bytes x 2 sources x groups per column x in x
  // out. Not where the rule folds them all: more than 16 sources meet each
  // output. Exact zeros in x (after a ReLU) and dy (padded tokens) leave
  // fewer, but a token normalizer's rows still give each output far more
  // (outputs_that_fold); only a nearly dead unit's outputs keep sums, for
  // its row or column alone.
  double shared = 0.0, groups_per_column = 0.0;
  const double samples = kernel_rows / static_cast<double>(s.model.positions);
  for (const ref::Node& node : model.nodes) {
    if (const std::optional<ref::NormShape> norm = node.op->norm_shape(model, node)) {
      const double groups = norm->kind == ref::NormKind::batch   ? 1.0
                            : norm->kind == ref::NormKind::group ? samples
                                                                 : kernel_rows;
      groups_per_column = std::max(groups_per_column, groups);
    } else if (node.parameters > 0 &&
               model.parameters[static_cast<std::size_t>(node.first_parameter)].init == ref::Init::fan_in &&
               2.0 * groups_per_column <= 16.0) {
      shared += 2.0 * 2.0 * 8.0 * 2.0 * groups_per_column * static_cast<double>(node.in_widths[0]) *
                static_cast<double>(node.out_width);
    }
  }
  // The process itself (its code and libraries, resident before any
  // scenario: 222 MiB measured with the CUDA libraries linked).
  return activations + gemm_temporaries + row_sums + state + kernel + shared + 256.0 * (1 << 20);
}

double available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  double kib = 0.0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024.0;
  return 0.0;
}

void fit_to_memory(ScenarioSpec& spec, double max_memory_bytes) {
  spec.reference_runs_in_turn = false;
  spec.reference_slice_samples = 0;
  if (max_memory_bytes <= 0.0 || estimated_peak_bytes(spec) <= max_memory_bytes) return;
  spec.reference_runs_in_turn = true;
  if (estimated_peak_bytes(spec) <= max_memory_bytes) return;
  // Then micro-batches in slices: first of the largest micro-batch's
  // samples (the full batch then costs what a micro-batch does), halved
  // until the scenario fits. Not through BatchNorm, whose statistics span
  // the micro-batch.
  long largest = 0;
  for (const auto& window : spec.split) largest = std::max(largest, *std::max_element(window.begin(), window.end()));
  if (!ref::has_batch_norm(spec.model)) {
    for (long slice = largest; slice >= 1; slice /= 2) {
      spec.reference_slice_samples = slice;
      if (estimated_peak_bytes(spec) <= max_memory_bytes) return;
    }
  }
  const double need = estimated_peak_bytes(spec);
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  char text[400];
  std::snprintf(text, sizeof text,
                "scenario %s needs about %.2f GiB at its peak even with its reference runs in turn%s (its "
                "parameters and the rows of what one pass holds x the layers' widths, in the bounded reference), "
                "more than the %.2f GiB allowed (--max-memory; default: the memory available)",
                spec.name.c_str(), need / GiB,
                spec.reference_slice_samples > 0 ? " and its passes in slices of 1 sample"
                                                 : " (through BatchNorm a pass cannot be sliced)",
                max_memory_bytes / GiB);
  throw std::invalid_argument(text);
}

}  // namespace gradeq
