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

#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
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
  // The longest sample's real length: its last non-ignored row + 1 (every
  // row when there are no classes to ignore).
  long longest_real() const;
  // Each sample cut to its first `to` positions (to >= longest_real()):
  // what a data collator hands over when it pads to a shorter length.
  Batch padded_to(long to) const;
};

// How a window's samples are padded when they are cut into micro-batches
// (a data collator's choice). The real tokens are the same in each; only
// the number of padded rows per sample differs.
enum class Padding {
  fixed,        // every micro-batch to the model's positions per sample
  micro_batch,  // each micro-batch to its own longest sample (DataCollatorWithPadding)
  window,       // every micro-batch to the window's longest sample
};

enum class Normalization {
  global_count,  // s_b = 1 / (items in the whole window)
  equal_split,   // s_b = 1 / (N * items_b): equals global only when all items_b are equal
};

// How BatchNorm behaves under accumulation.
enum class BatchNormMode {
  per_micro_batch,  // what frameworks do: statistics and coupling per micro-batch,
                    // N running-statistics updates per window
  exact_window,     // statistics and backward coupling over the whole window
                    // (extra passes over the window), one running update per window
};

// Loss scaling (float16 training): each micro-batch's loss gradient is
// multiplied by S and the window's gradient by 1/S, once, before clipping.
// Dynamic: S is constant within a window; a window whose scaled gradients
// overflow is skipped (no step, no schedule advance) and S backs off;
// after growth_interval good steps S grows (torch.cuda.amp.GradScaler).
struct LossScaling {
  double scale = 1.0;  // a power of two; the initial scale when dynamic
  bool dynamic = false;
  double growth_factor = 2.0, backoff_factor = 0.5;
  long growth_interval = 2000;
};

struct ProcedureConfig {
  Normalization normalization = Normalization::global_count;
  LossScaling loss_scaling;
  bool compute_copy = false;  // the kernel computes with a copy of the weights in the compute dtype
  // Kahan-compensated accumulation: each micro-batch's gradient lands in a
  // float32 staging buffer, then is added to the accumulation buffer with a
  // compensation term of the buffer's dtype.
  bool compensated = false;
  // Staged accumulation: each micro-batch's gradient is computed into a
  // zeroed buffer of the compute dtype, then added to the accumulation
  // buffer by the multi-tensor accumulate (DeepSpeed's grad_accum_dtype,
  // Megatron's unfused path); fused (false): backward adds straight into
  // the accumulation buffer (a weight-gradient GEMM with beta = 1).
  bool staged = false;
  BatchNormMode batch_norm = BatchNormMode::per_micro_batch;
  Padding padding = Padding::fixed;
  // A parameter with several uses (a tied weight), under fused
  // accumulation: each use's gradient added into the buffer as its kernel
  // makes it (false: the training loop, beta = 1 at each use), or the uses'
  // gradients summed in float32 first and added once (true: autograd,
  // which sums a leaf's incoming gradients before AccumulateGrad adds them
  // into .grad; gradeq verify's runs).
  bool sum_uses_first = false;
  // Data parallelism over `ranks` processes (no_sync semantics): a window's
  // micro-batches are cut into `ranks` consecutive groups of equal count,
  // one per rank; each rank adds its group into its own buffer, and the
  // buffers are summed once, after the last micro-batch, by one all-reduce
  // (float32 additions in any order), stored in the accumulation dtype. A
  // window of one micro-batch is the single-process full batch whatever
  // `ranks` is. Normalizers stay global (the window's item count).
  long ranks = 1;
  // Sharded (ZeRO-2 / FSDP style): each rank owns 1/ranks of every
  // tensor's elements (consecutive), steps only that shard, and the clip
  // norm is combined from the shards' float32 norms (sqrt of the sum of
  // their squares). Elementwise it is the same update as replicated.
  bool sharded = false;
  OptimizerSpec optimizer;
  ClipSpec clip;
  ScheduleSpec schedule;
  // How the reference computes, not what: a micro-batch of more samples
  // than this (0: no limit) is computed in consecutive slices of at most
  // this many samples, one forward and backward over each, its reductions
  // over rows (weight gradients, biases, normalizer parameters, the loss)
  // summed over the slices and decided once (RowSum). One slice's
  // activations are held at a time; the results are the whole pass's up to
  // float64 summation order, as long as no shared source spans two slices
  // (none does: normalizer statistics and softmax denominators belong to a
  // row or a sample). A micro-batch with BatchNorm, whose statistics span
  // all of its rows, cannot be sliced.
  long slice_samples = 0;
  // Parameters the optimizer leaves alone (requires_grad = False): their
  // gradients are neither clipped, counted in the clip's norm, nor stepped
  // with, and they keep no optimizer state. Indices into the model's
  // parameter layout, ascending.
  std::vector<std::size_t> frozen;
  bool is_frozen(std::size_t parameter) const {
    for (std::size_t f : frozen)
      if (f == parameter) return true;
    return false;
  }
};

// 1 / normalizer for each micro-batch (the loss scale not included).
// Micro-batch [first, first + count) of a window as the loop is handed it,
// padded as config.padding says. The full batch is the micro-batch of all
// the window's samples.
Batch micro_batch_of(const Batch& window, long first, long count, const ProcedureConfig& config);

// The model as it runs on a batch of `positions` rows per sample (the
// padding can make that shorter than spec.positions): the same nodes and
// parameters, with the position-dependent ops reading the batch's length.
ModelSpec at_positions(const ModelSpec& spec, long positions);

std::vector<double> micro_batch_scales(const ProcedureConfig& config, LossKind loss, const Batch& window,
                                       const std::vector<long>& micro_batch_samples);

template <class T>
struct WindowGradients {
  Tensors<T> grads;         // after unscaling: the window's gradient G
  T loss;                   // sum_b S_b / normalizer_b: the window's normalized loss
  long forward_passes = 1;  // passes over the window's data the procedure needed
  // Whether a stored value may / must exceed its dtype's range (float16
  // overflow under loss scaling), as the error model sees it.
  bool overflow_possible = false, overflow_certain = false;
};

template <class T>
Tensors<T> initial_buffers(const ModelSpec& spec) {
  Tensors<T> buffers;
  for (const ParameterInfo& b : buffer_layout(spec)) buffers.push_back(Matrix<T>::Constant(b.rows, b.cols, T(b.start)));
  return buffers;
}

namespace detail {

// One parameter's gradient buffer: each element receives the micro-batches'
// gradients in order (accumulated<T> / compensated<T>, one term at a time,
// so that no micro-batch's gradient is kept after it is added).
template <class T>
class GradientBuffer {
 public:
  GradientBuffer(long rows, long cols, bool compensated) : rows_(rows), cols_(cols) {
    const auto n = static_cast<std::size_t>(rows * cols);
    if constexpr (std::is_same_v<T, Bounded>) {
      if (compensated) {
        compensated_.assign(n, CompensatedBuffer(Storage::accumulate));
      } else {
        plain_.assign(n, AccumulationBuffer(Storage::accumulate));
      }
    } else {
      sums_.assign(n, 0.0);
    }
  }
  void add(const Matrix<T>& g) {
    for (long i = 0; i < g.size(); ++i) {
      const auto k = static_cast<std::size_t>(i);
      if constexpr (std::is_same_v<T, Bounded>) {
        if (compensated_.empty()) {
          plain_[k].add(g.data()[i]);
        } else {
          compensated_[k].add(g.data()[i]);
        }
      } else {
        sums_[k] += g.data()[i];
      }
    }
  }
  Matrix<T> result() const {
    Matrix<T> out(rows_, cols_);
    for (long i = 0; i < out.size(); ++i) {
      const auto k = static_cast<std::size_t>(i);
      if constexpr (std::is_same_v<T, Bounded>) {
        out.data()[i] = compensated_.empty() ? plain_[k].result() : compensated_[k].result();
      } else {
        out.data()[i] = sums_[k];
      }
    }
    return out;
  }

 private:
  long rows_, cols_;
  std::vector<AccumulationBuffer> plain_;
  std::vector<CompensatedBuffer> compensated_;
  std::vector<double> sums_;
};

template <class T>
LossAndGrad<T> loss_of(const ModelSpec& spec, const Matrix<T>& output, const Batch& batch, const T& scale) {
  switch (spec.loss) {
    case LossKind::mse: return mse_loss(output, lift<T>(batch.targets), scale);
    case LossKind::cross_entropy: return cross_entropy_loss(output, batch.classes, scale, spec.head_chunk_vocabulary);
    case LossKind::causal_lm: break;
  }
  return cross_entropy_loss(output, shifted_labels(batch.classes, batch.positions), scale,
                            spec.head_chunk_vocabulary);
}

// Statistics and backward coupling of every BatchNorm layer over the whole
// window, built one micro-batch at a time (moments combined with Chan's
// formula, coupling sums added): one forward pass per BatchNorm layer for
// the statistics, then one forward+backward pass per layer, last to first,
// for the coupling. Returns the passes used.
template <class T>
long exact_window_norms(const Model& model, const Tensors<T>& weights, const std::vector<Batch>& micro_batches,
                        const std::vector<double>& scales, WindowNorms<T>& window) {
  const std::size_t nodes = model.nodes.size();
  window.statistics.assign(nodes, std::nullopt);
  window.coupling.assign(nodes, std::nullopt);
  long passes = 0;
  for (std::size_t k = 0; k < nodes; ++k) {
    const Node& node = model.nodes[k];
    if (!node.op->couples_samples()) continue;
    const NormShape shape = *node.op->norm_shape(model, node);
    NormMoments<T> moments;
    for (const Batch& mb : micro_batches) {
      const Tape<T> tape = forward(model, weights, lift<T>(mb.inputs), static_cast<Tensors<T>*>(nullptr), &window);
      moments = combine_moments(moments, norm_moments(shape, tape.values[node.inputs[0]]));
    }
    window.statistics[k] = statistics_from(shape, moments);
    ++passes;
  }
  for (std::size_t k = nodes; k-- > 0;) {
    const Node& node = model.nodes[k];
    if (!node.op->couples_samples()) continue;
    const NormShape shape = *node.op->norm_shape(model, node);
    NormCoupling<T> coupling;
    for (std::size_t b = 0; b < micro_batches.size(); ++b) {
      const Batch& mb = micro_batches[b];
      const Tape<T> tape = forward(model, weights, lift<T>(mb.inputs), static_cast<Tensors<T>*>(nullptr), &window);
      const T scale(scales[b]);
      const LossAndGrad<T> loss = loss_of(model.spec, tape.output(), mb, scale);
      const Backward<T> bw =
          backward_with_value_grads(model, weights, tape, stored(loss.dy, Storage::compute), &window);
      coupling = combine_coupling(coupling, norm_coupling(shape, tape.values[node.inputs[0]],
                                                          weights[static_cast<std::size_t>(node.first_parameter)],
                                                          bw.value_grads[node.output()], *tape.statistics[k]));
    }
    window.coupling[k] = coupling;
    ++passes;
  }
  return passes;
}

// One micro-batch's fresh gradients and its loss sum (the loss scale not
// applied).
template <class T>
struct MicroBatchPass {
  Contributions<T> grads;  // per parameter, one per use (model.h)
  T loss_sum;
};

// The micro-batch in one forward and backward, or in slices of
// config.slice_samples samples. `report(slice, slices)` is called after
// each slice (after the whole pass: 1, 1).
template <class T, class Report>
MicroBatchPass<T> micro_batch_pass(const Model& model, const ProcedureConfig& config, const Tensors<T>& weights,
                                   const Batch& mb, const T& scale, Tensors<T>* running, const WindowNorms<T>* window,
                                   Report&& report) {
  const long samples = mb.samples();
  if (config.slice_samples <= 0 || config.slice_samples >= samples) {
    Tape<T> tape = forward(model, weights, lift<T>(mb.inputs), running, window);
    LossAndGrad<T> loss = loss_of(model.spec, tape.output(), mb, scale);
    MicroBatchPass<T> out{
        backward_contributions(model, weights, std::move(tape), stored(loss.dy, Storage::compute), window),
        loss.loss_sum};
    report(1, 1);
    return out;
  }
  if (model.couples_samples())
    throw std::invalid_argument("a micro-batch through BatchNorm cannot be computed in slices: its statistics span "
                                "all of its rows");
  std::vector<std::vector<RowSum<T>>> sums = slice_sums_for<T>(model);
  std::vector<T> row_losses;
  const auto slices = static_cast<std::size_t>((samples + config.slice_samples - 1) / config.slice_samples);
  for (long first = 0; first < samples; first += config.slice_samples) {
    const Batch part = mb.slice(first, std::min(config.slice_samples, samples - first));
    Tape<T> tape = forward(model, weights, lift<T>(part.inputs), running, window);
    LossAndGrad<T> loss = loss_of(model.spec, tape.output(), part, scale);
    row_losses.insert(row_losses.end(), loss.row_losses.begin(), loss.row_losses.end());
    backward_pass(model, weights, tape, stored(loss.dy, Storage::compute), window, static_cast<Tensors<T>*>(nullptr),
                  &tape, &sums);
    report(static_cast<std::size_t>(first / config.slice_samples) + 1, slices);
  }
  return MicroBatchPass<T>{decided(model, std::move(sums), weights.size()),
                           reduce<T>(static_cast<long>(row_losses.size()), [&](long i) { return row_losses[i]; })};
}

// The ranks a window's micro-batches are shared among (ProcedureConfig::ranks).
inline std::size_t window_ranks(const ProcedureConfig& config, std::size_t micro_batches) {
  if (config.ranks < 1) throw std::invalid_argument("ranks must be at least 1");
  const auto ranks = static_cast<std::size_t>(config.ranks);
  if (micro_batches == 1) return 1;
  if (micro_batches % ranks != 0)
    throw std::invalid_argument("a window of " + std::to_string(micro_batches) + " micro-batches cannot be shared by " +
                                std::to_string(ranks) + " ranks");
  return ranks;
}

}  // namespace detail

// zero -> for each micro-batch: forward, scaled loss, backward, accumulate
// -> unscale. BatchNorm running statistics in `buffers` are updated.
// Long runs report that they are alive: after each micro-batch a window
// accumulates (and each slice of one, ProcedureConfig::slice_samples), on
// this thread, the observer in scope (if any) hears how many of the
// window's micro-batches are done. At real widths one micro-batch of the
// bounded reference takes seconds.
struct MicroBatchProgress {
  std::size_t done = 0, total = 0;   // the window's micro-batches
  std::size_t slice = 1, slices = 1;  // slices of the micro-batch in hand done (slice_samples)
};
using MicroBatchObserver = std::function<void(const MicroBatchProgress&)>;
const MicroBatchObserver* micro_batch_observer();
class ScopedMicroBatchObserver {
 public:
  explicit ScopedMicroBatchObserver(MicroBatchObserver observer);
  ~ScopedMicroBatchObserver();
  ScopedMicroBatchObserver(const ScopedMicroBatchObserver&) = delete;
  ScopedMicroBatchObserver& operator=(const ScopedMicroBatchObserver&) = delete;

 private:
  const MicroBatchObserver observer_;
  const MicroBatchObserver* previous_;
};

template <class T>
WindowGradients<T> accumulate_window(const ModelSpec& spec, const ProcedureConfig& config, const Tensors<T>& params,
                                     Tensors<T>& buffers, const Batch& window,
                                     const std::vector<long>& micro_batch_samples, double loss_scale = 1.0) {
  // The weights the passes read: the master weights, or their compute copies.
  Tensors<T> compute_copies;
  if (config.compute_copy)
    for (const auto& p : params) compute_copies.push_back(quantized(p, Storage::compute));
  const Tensors<T>& weights = config.compute_copy ? compute_copies : params;
  std::vector<double> scales = micro_batch_scales(config, spec.loss, window, micro_batch_samples);
  for (double& s : scales) s *= loss_scale;  // a power of two: exact
  std::vector<Batch> micro_batches;
  long first_sample = 0;
  for (long n : micro_batch_samples) {
    micro_batches.push_back(micro_batch_of(window, first_sample, n, config));
    first_sample += n;
  }

  WindowGradients<T> out{Tensors<T>(params.size()), T(0.0), 1};
  const Model model(spec);
  WindowNorms<T> window_norms;
  const bool exact_bn = config.batch_norm == BatchNormMode::exact_window && model.couples_samples();
  if (model.couples_samples() && config.padding != Padding::fixed)
    throw std::invalid_argument("BatchNorm's statistics span a micro-batch's padded rows: only fixed padding keeps "
                                "them those of the full batch");
  if (exact_bn) out.forward_passes += detail::exact_window_norms(model, weights, micro_batches, scales, window_norms);

  std::vector<T> losses;
  // Each rank's buffer receives its micro-batches' gradients one after
  // another: plainly (the GEMM adds into it with beta = 1) or
  // Kahan-compensated.
  const std::size_t ranks = detail::window_ranks(config, micro_batches.size());
  const std::size_t per_rank = micro_batches.size() / ranks;
  std::vector<std::vector<detail::GradientBuffer<T>>> buffers_of(ranks);
  for (auto& buffer : buffers_of)
    for (const auto& p : params) buffer.emplace_back(p.rows(), p.cols(), config.compensated);
  const OverflowTally tally_before = overflow_tally();
  for (std::size_t b = 0; b < micro_batches.size(); ++b) {
    std::vector<detail::GradientBuffer<T>>& buffer = buffers_of[b / per_rank];
    const T scale(scales[b]);
    const auto report = [&](std::size_t slice, std::size_t slices) {
      if (const MicroBatchObserver* observer = micro_batch_observer())
        (*observer)(MicroBatchProgress{slice == slices ? b + 1 : b, micro_batches.size(), slice, slices});
    };
    const Batch& mb = micro_batches[b];
    // Padded shorter than the model's positions, the micro-batch runs
    // through the model at its own length.
    const std::optional<Model> shorter =
        mb.positions == spec.positions ? std::nullopt : std::optional<Model>(Model(at_positions(spec, mb.positions)));
    detail::MicroBatchPass<T> pass = detail::micro_batch_pass(shorter ? *shorter : model, config, weights, mb, scale,
                                                              exact_bn ? nullptr : &buffers,
                                                              exact_bn ? &window_norms : nullptr, report);
    losses.push_back(pass.loss_sum * scale);
    for (std::size_t p = 0; p < params.size(); ++p) {
      const Tensors<T>& parts = pass.grads[p];
      if (!config.staged && !config.compensated && !(config.sum_uses_first && parts.size() > 1)) {
        for (const Matrix<T>& part : parts) buffer[p].add(part);  // each use's kernel adds into the buffer
        continue;
      }
      // The micro-batch's gradient lands in a zeroed staging buffer (of the
      // compute dtype, or float32 under compensation) first, each later use
      // adding into it with one rounding; then it is added to the buffer.
      // (Autograd's sum of the uses is float32, as the staging of the
      // compensated buffer is.)
      const Storage staging = config.staged ? Storage::compute : Storage::master;
      Matrix<T> staged = config.staged ? stored(parts[0], staging) : parts[0];
      for (std::size_t i = 1; i < parts.size(); ++i) staged = stored(Matrix<T>(staged + parts[i]), staging);
      buffer[p].add(staged);
    }
  }
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (ranks == 1) {
      out.grads[p] = buffers_of[0][p].result();
      continue;
    }
    // The all-reduce: the ranks' buffers summed element by element.
    std::vector<Matrix<T>> local;
    for (const auto& buffer : buffers_of) local.push_back(buffer[p].result());
    Matrix<T> sum(local[0].rows(), local[0].cols());
    for (long i = 0; i < sum.size(); ++i)
      sum.data()[i] = reduce<T>(static_cast<long>(ranks), [&](long r) { return local[r].data()[i]; });
    out.grads[p] = stored(sum, Storage::accumulate);
  }
  if (exact_bn) {
    for (std::size_t n = 0; n < model.nodes.size(); ++n) {
      const Node& node = model.nodes[n];
      if (node.op->couples_samples())
        batchnorm_update_running(buffers[static_cast<std::size_t>(node.first_buffer)],
                                 buffers[static_cast<std::size_t>(node.first_buffer) + 1], *window_norms.statistics[n],
                                 spec.bn_momentum);
    }
  }
  for (auto& b : buffers) b = stored(b, Storage::master);
  out.loss = reduce<T>(static_cast<long>(losses.size()), [&](long b) { return losses[b]; });
  if (loss_scale != 1.0) {
    const T unscale(1.0 / loss_scale);
    for (auto& g : out.grads) g = stored(Matrix<T>(g * unscale), Storage::accumulate);
    out.loss = out.loss * unscale;
  }
  const OverflowTally tally_after = overflow_tally();
  out.overflow_possible = tally_after.possible > tally_before.possible;
  out.overflow_certain = tally_after.certain > tally_before.certain;
  return out;
}

// Everything a window starts from and leaves behind.
template <class T>
struct TrainingState {
  Tensors<T> params;        // master weights
  Tensors<T> buffers;       // BatchNorm running statistics
  Tensors<T> first_moment;   // per parameter: SGD's momentum buffer, Adam's m
  Tensors<T> second_moment;  // per parameter: Adam's v
  long step = 0;            // optimizer steps taken (skipped windows do not count)
  double loss_scale = 1.0;  // the scale the next window uses
  long good_steps = 0;      // steps since the scale last changed (dynamic scaling)
};

template <class T>
TrainingState<T> initial_state(const ModelSpec& spec, const ProcedureConfig& config, const Tensors<double>& params) {
  TrainingState<T> s;
  for (const auto& p : params) {
    s.params.push_back(lift<T>(p));
    s.first_moment.push_back(zeros<T>(p.rows(), p.cols()));
    s.second_moment.push_back(zeros<T>(p.rows(), p.cols()));
  }
  s.buffers = initial_buffers<T>(spec);
  s.loss_scale = config.loss_scaling.scale;
  return s;
}

// The global norm of the gradients listed: one float32 reduction, or with
// `shards` > 1 each shard's float32 norm (the consecutive 1/shards of every
// tensor's elements), combined as the square root of the sum of their
// squares (ProcedureConfig::sharded).
template <class T>
T global_norm(const std::vector<const Matrix<T>*>& grads, std::size_t shards = 1) {
  std::vector<T> shard_norms;
  for (std::size_t r = 0; r < shards; ++r) {
    std::vector<const T*> flat;
    for (const Matrix<T>* g : grads) {
      const long size = g->size() / static_cast<long>(shards), first = size * static_cast<long>(r);
      for (long i = first; i < first + size; ++i) flat.push_back(g->data() + i);
    }
    shard_norms.push_back(sqrt(reduce<T>(static_cast<long>(flat.size()), [&](long i) { return *flat[i] * *flat[i]; })));
  }
  if (shards == 1) return shard_norms.front();
  return sqrt(reduce<T>(static_cast<long>(shards), [&](long r) { return shard_norms[r] * shard_norms[r]; }));
}

template <class T>
T global_norm(const Tensors<T>& grads, std::size_t shards = 1) {
  std::vector<const Matrix<T>*> all;
  for (const auto& g : grads) all.push_back(&g);
  return global_norm(all, shards);
}

// What a step did besides moving the state: the learning rate the
// schedule gave it and, where the procedure clips, the clip — the global
// norm of the window's gradient, the coefficient, and the gradient the
// optimizer stepped with (empty for a frozen parameter).
template <class T>
struct StepRecord {
  // The learning rate in float64, and how far another float64 evaluation
  // of the same schedule may put it: each of the two evaluations is within
  // about 7.2 u64 lr_0 of the exact value (a few roundings of a multiplier
  // at most 1, and cos within one ulp), so 16 u64 lr_0 apart, lr_0 the base
  // rate (NUMERICS §4, "The learning rate").
  double learning_rate = 0.0, learning_rate_bound = 0.0;
  T clip_norm = T(0.0), clip_coefficient = T(1.0);
  Tensors<T> clipped;  // empty where the procedure does not clip
};

// Clip (once, by the global norm of the trained parameters' gradients, as
// clip_grad_norm_ does to .grad), then one optimizer step with the
// schedule's learning rate for this step. `grads` is the window's gradient
// as accumulation left it; it is not changed. shards: see global_norm.
template <class T>
StepRecord<T> optimizer_step(const ProcedureConfig& config, TrainingState<T>& state, const Tensors<T>& grads,
                             std::size_t shards = 1) {
  StepRecord<T> record;
  std::vector<const Matrix<T>*> trained;
  for (std::size_t p = 0; p < grads.size(); ++p)
    if (!config.is_frozen(p)) trained.push_back(&grads[p]);
  if (config.clip.enabled) {
    record.clip_norm = global_norm(trained, shards);
    record.clip_coefficient = clip_coefficient(config.clip, record.clip_norm);
    const T coefficient = shared(record.clip_coefficient);
    record.clipped.resize(grads.size());
    for (std::size_t p = 0; p < grads.size(); ++p)
      if (!config.is_frozen(p)) record.clipped[p] = stored(Matrix<T>(grads[p] * coefficient), Storage::accumulate);
  }
  const Tensors<T>& step_grads = config.clip.enabled ? record.clipped : grads;
  const OptimizerSpec& o = config.optimizer;
  const double lr = o.lr * schedule_multiplier(config.schedule, state.step);
  record.learning_rate = lr;
  record.learning_rate_bound = 16.0 * 0x1p-53 * o.lr;
  for (std::size_t p = 0; p < state.params.size(); ++p) {
    if (config.is_frozen(p)) continue;
    if (o.kind == OptimizerKind::sgd) {
      sgd_step(o, lr, state.step == 0, state.params[p], step_grads[p], state.first_moment[p]);
    } else {
      adam_step(o, lr, state.step, state.params[p], step_grads[p], state.first_moment[p], state.second_moment[p]);
    }
    state.params[p] = stored(state.params[p], Storage::master);
    state.first_moment[p] = stored(state.first_moment[p], Storage::master);
    state.second_moment[p] = stored(state.second_moment[p], Storage::master);
  }
  ++state.step;
  return record;
}

template <class T>
struct WindowResult {
  WindowGradients<T> gradients;  // as accumulation left them: unscaled, not clipped
  StepRecord<T> step;            // the clip and the learning rate (none where skipped)
  TrainingState<T> after;
  bool skipped = false;  // dynamic loss scaling found an overflow: no step
};

// The dynamic loss scaler's decision for a window: the reference's own
// (skip where overflow is certain; where it is possible but not certain,
// follow `decision`, the kernel's) or imposed (`decision` followed as given,
// to compare procedures that saw the same decision).
struct SkipRule {
  std::optional<bool> decision;
  bool imposed = false;
};

// One window from `state`: accumulate its micro-batches, unscale, then
// (dynamic loss scaling permitting) clip and step once.
template <class T>
WindowResult<T> run_window(const ModelSpec& spec, const ProcedureConfig& config, TrainingState<T> state,
                           const Batch& window, const std::vector<long>& micro_batch_samples, SkipRule rule = {}) {
  // A kernel that reports no overflow stored finite values only.
  const ScopedFiniteStores finite(config.loss_scaling.dynamic && rule.decision.has_value() && !*rule.decision);
  WindowGradients<T> g = accumulate_window(spec, config, state.params, state.buffers, window, micro_batch_samples,
                                           state.loss_scale);
  // The kernel's decision is followed where overflow is possible; a skip
  // where no store can overflow is refused (the window then steps and the
  // comparison fails). A kernel that steps through a real overflow holds
  // Inf or NaN, which fails on its own. Without a kernel (the float64
  // trajectories of math equivalence) nothing is skipped: both procedures
  // see the same scale.
  bool skip = false;
  if (config.loss_scaling.dynamic)
    skip = rule.imposed ? rule.decision.value_or(false) : g.overflow_possible && rule.decision.value_or(false);
  const LossScaling& ls = config.loss_scaling;
  StepRecord<T> step;
  if (skip) {
    state.loss_scale *= ls.backoff_factor;
    state.good_steps = 0;
  } else {
    step = optimizer_step(config, state, g.grads,
                          config.sharded ? detail::window_ranks(config, micro_batch_samples.size()) : 1);
    if (ls.dynamic && ++state.good_steps == ls.growth_interval) {
      state.loss_scale *= ls.growth_factor;
      state.good_steps = 0;
    }
  }
  return {std::move(g), std::move(step), std::move(state), skip};
}

}  // namespace gradeq::ref
