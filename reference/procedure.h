// procedure.h — the accumulation procedure in plain math: one optimizer
// window made of micro-batches, and a trajectory of windows.
//
// The full batch is the same procedure with a single micro-batch, so R_full
// and R_acc differ only in the split. Each micro-batch b contributes
//     s_b * sum_{i in b} grad l_i,   s_b = loss_scale / normalizer_b,
// with normalizer_b = the window's item count (global normalization, correct
// for uneven micro-batches and padded tokens) or N * items_b (the
// equal-split shortcut). The gradient buffer is zeroed once per window and
// the step happens once, after the last micro-batch. No I/O, no harness types.
#pragma once

#include <vector>

#include "reference/losses.h"
#include "reference/model.h"
#include "reference/optimizers.h"
#include "reference/tensor.h"

namespace gradeq::ref {

// A batch of samples in float64 (every value float32-representable).
struct Batch {
  Matrix<double> inputs;     // [samples * positions, input_features]
  Matrix<double> targets;    // MSE targets [rows, outputs]; empty for cross-entropy
  std::vector<int> classes;  // cross-entropy class per row, kIgnoreClass = padding
  long positions = 1;

  long rows() const { return inputs.rows(); }
  long samples() const { return inputs.rows() / positions; }
  // Items this batch adds to a normalizer: rows (MSE) or unmasked tokens.
  long items(LossKind loss) const;
  // Samples [first, first + count).
  Batch slice(long first, long count) const;
};

enum class Normalization {
  global_count,  // s_b = 1 / (items in the whole window)
  equal_split,   // s_b = 1 / (N * items_b): equals global only when all items_b are equal
};

struct ProcedureConfig {
  Normalization normalization = Normalization::global_count;
  double loss_scale = 1.0;   // a power of two; gradients are unscaled once per window
  bool compute_copy = false; // the kernel computes with a copy of the weights in the compute dtype
  OptimizerSpec optimizer;
};

// The loss scale each micro-batch's gradient is multiplied by.
std::vector<double> micro_batch_scales(const ProcedureConfig& config, LossKind loss, const Batch& window,
                                       const std::vector<long>& micro_batch_samples);

template <class T>
struct WindowGradients {
  Tensors<T> grads;  // after unscaling: the window's gradient G
  T loss;            // sum_b s_b * S_b / loss_scale: the window's normalized loss
};

template <class T>
Matrix<T> lift_targets(const Batch& b) {
  return lift<T>(b.targets);
}

// zero -> for each micro-batch: forward, scaled loss, backward, accumulate -> unscale.
template <class T>
WindowGradients<T> accumulate_window(const ModelSpec& spec, const ProcedureConfig& config, const Tensors<T>& params,
                                     const Batch& window, const std::vector<long>& micro_batch_samples) {
  Tensors<T> weights = params;
  if (config.compute_copy)
    for (auto& w : weights) w = stored(w, Storage::compute);
  const std::vector<double> scales = micro_batch_scales(config, spec.loss, window, micro_batch_samples);

  WindowGradients<T> out{Tensors<T>(params.size()), T(0.0)};
  std::vector<T> losses;
  long first_sample = 0;
  for (std::size_t b = 0; b < micro_batch_samples.size(); ++b) {
    const Batch mb = window.slice(first_sample, micro_batch_samples[b]);
    first_sample += micro_batch_samples[b];
    const Tape<T> tape = forward(spec, weights, lift<T>(mb.inputs));
    const T scale(scales[b]);
    LossAndGrad<T> loss = spec.loss == LossKind::mse ? mse_loss(tape.output, lift_targets<T>(mb), scale)
                                                     : cross_entropy_loss(tape.output, mb.classes, scale);
    losses.push_back(loss.loss_sum * scale);
    const Tensors<T> g = backward(spec, weights, tape, stored(loss.dy, Storage::compute));
    for (std::size_t p = 0; p < g.size(); ++p) {
      if (b == 0) {
        out.grads[p] = stored(g[p], Storage::accumulate);
      } else {
        Matrix<T> sum = out.grads[p] + g[p];
        out.grads[p] = stored(sum, Storage::accumulate);
      }
    }
  }
  out.loss = reduce<T>(static_cast<long>(losses.size()), [&](long b) { return losses[b]; });
  if (config.loss_scale != 1.0) {
    const T unscale(1.0 / config.loss_scale);
    for (auto& g : out.grads) g = stored(Matrix<T>(g * unscale), Storage::accumulate);
    out.loss = out.loss * unscale;
  }
  return out;
}

template <class T>
void optimizer_step(const ProcedureConfig& config, Tensors<T>& params, const Tensors<T>& grads) {
  const T lr(config.optimizer.lr);
  for (std::size_t p = 0; p < params.size(); ++p) {
    sgd_step(params[p], grads[p], lr);
    params[p] = stored(params[p], Storage::master);
  }
}

template <class T>
struct WindowRecord {
  WindowGradients<T> gradients;
  Tensors<T> params_after;
};

// K windows: each accumulates its micro-batches, then steps once.
template <class T>
std::vector<WindowRecord<T>> run_trajectory(const ModelSpec& spec, const ProcedureConfig& config, Tensors<T> params,
                                            const std::vector<Batch>& windows,
                                            const std::vector<std::vector<long>>& splits) {
  std::vector<WindowRecord<T>> records;
  for (std::size_t w = 0; w < windows.size(); ++w) {
    WindowGradients<T> g = accumulate_window(spec, config, params, windows[w], splits[w]);
    optimizer_step(config, params, g.grads);
    records.push_back({std::move(g), params});
  }
  return records;
}

}  // namespace gradeq::ref
