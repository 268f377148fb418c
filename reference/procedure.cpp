// procedure.cpp — batch slicing, the per-micro-batch loss scales and the
// micro-batch observer.
#include "reference/procedure.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace gradeq::ref {

namespace {
thread_local const MicroBatchObserver* active_micro_batch_observer = nullptr;
}  // namespace

const MicroBatchObserver* micro_batch_observer() { return active_micro_batch_observer; }

ScopedMicroBatchObserver::ScopedMicroBatchObserver(MicroBatchObserver observer)
    : observer_(std::move(observer)), previous_(active_micro_batch_observer) {
  active_micro_batch_observer = observer_ ? &observer_ : nullptr;
}

ScopedMicroBatchObserver::~ScopedMicroBatchObserver() { active_micro_batch_observer = previous_; }

long Batch::items(LossKind loss) const {
  switch (loss) {
    case LossKind::mse: return rows();
    case LossKind::cross_entropy: return cross_entropy_items(classes);
    case LossKind::causal_lm: return cross_entropy_items(shifted_labels(classes, positions));
  }
  return 0;
}

Batch Batch::slice(long first, long count) const {
  if (first < 0 || count < 0 || first + count > samples()) throw std::out_of_range("Batch::slice outside the batch");
  Batch b;
  b.positions = positions;
  b.inputs = row_slice(inputs, first * positions, count * positions);
  if (targets.size() > 0) b.targets = row_slice(targets, first * positions, count * positions);
  if (!classes.empty())
    b.classes.assign(classes.begin() + first * positions, classes.begin() + (first + count) * positions);
  return b;
}

long Batch::longest_real() const {
  if (classes.empty()) return positions;
  long longest = 0;
  for (long r = 0; r < rows(); ++r)
    if (classes[static_cast<std::size_t>(r)] != kIgnoreClass) longest = std::max(longest, r % positions + 1);
  return std::max(longest, 1L);
}

Batch Batch::padded_to(long to) const {
  if (to < longest_real() || to > positions) throw std::out_of_range("Batch::padded_to: would cut a real row");
  if (to == positions) return *this;
  Batch b;
  b.positions = to;
  const long n = samples();
  b.inputs.resize(n * to, inputs.cols());
  if (targets.size() > 0) b.targets.resize(n * to, targets.cols());
  for (long s = 0; s < n; ++s)
    for (long t = 0; t < to; ++t) {
      const long from = s * positions + t, r = s * to + t;
      b.inputs.row(r) = inputs.row(from);
      if (targets.size() > 0) b.targets.row(r) = targets.row(from);
      if (!classes.empty()) b.classes.push_back(classes[static_cast<std::size_t>(from)]);
    }
  return b;
}

Batch micro_batch_of(const Batch& window, long first, long count, const ProcedureConfig& config) {
  Batch mb = window.slice(first, count);
  switch (config.padding) {
    case Padding::fixed: return mb;
    case Padding::micro_batch: return mb.padded_to(mb.longest_real());
    case Padding::window: return mb.padded_to(window.longest_real());
  }
  return mb;
}

ModelSpec at_positions(const ModelSpec& spec, long positions) {
  ModelSpec s = spec;
  s.positions = positions;
  return s;
}

std::vector<double> micro_batch_scales(const ProcedureConfig& config, LossKind loss, const Batch& window,
                                       const std::vector<long>& micro_batch_samples) {
  std::vector<double> scales;
  const double n = static_cast<double>(micro_batch_samples.size());
  const long window_items = window.items(loss);
  long first = 0;
  for (long count : micro_batch_samples) {
    const long items = window.slice(first, count).items(loss);
    first += count;
    double normalizer = 0.0;
    switch (config.normalization) {
      case Normalization::global_count: normalizer = static_cast<double>(window_items); break;
      case Normalization::equal_split: normalizer = n * static_cast<double>(items); break;
    }
    // A window (or micro-batch) with no items contributes nothing.
    scales.push_back(normalizer > 0.0 ? 1.0 / normalizer : 0.0);
  }
  return scales;
}

}  // namespace gradeq::ref
