// loop_mutants.cpp — loop bugs as one-function subclasses of the correct
// loop; the comment above each names the bug and where it shipped
// (docs/BUGS.md).
#include "harness/core/loop_mutants.h"

#include <algorithm>
#include <cmath>
#include <memory>

namespace gradeq {
namespace {

template <class Loop>
LoopFactory loop_of() {
  return [](Backend& b) { return std::make_unique<Loop>(b); };
}

std::vector<long> counts_of(const std::vector<std::pair<long, long>>& ranges) {
  std::vector<long> counts;
  for (const auto& r : ranges) counts.push_back(r.second);
  return counts;
}

// B1 — mean of per-micro-batch means: each micro-batch divided by its own
// item count and by N (HF transformers, fixed Oct 2024: PRs 34191, 34198,
// 34283; issue 24725; TRL 2175).
class MeanOfMeans : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  std::vector<float> loss_scales(const ref::Batch& window, const std::vector<std::pair<long, long>>& ranges) override {
    ref::ProcedureConfig c = procedure();
    c.normalization = ref::Normalization::equal_split;
    std::vector<float> out;
    for (double s : ref::micro_batch_scales(c, scenario_->spec.model.loss, window, counts_of(ranges)))
      out.push_back(static_cast<float>(s * loss_scale_));
    return out;
  }
};

// B3 — missing 1/N: every micro-batch normalized as if it were the batch,
// the window's gradient is N x G (nanoGPT 168; apex 286).
class MissingOneOverN : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  std::vector<float> loss_scales(const ref::Batch& window, const std::vector<std::pair<long, long>>& ranges) override {
    std::vector<float> out;
    for (const auto& r : ranges) {
      const long items = window.slice(r.first, r.second).items(scenario_->spec.model.loss);
      out.push_back(static_cast<float>(loss_scale_ / static_cast<double>(std::max(items, 1L))));
    }
    return out;
  }
};

// B4 — double scaling: the loss is divided by N on top of the window's
// normalizer, the gradient is G / N (transformers 40052, 35438; accelerate
// 3533; Megatron-DeepSpeed PR 42; DeepSpeed PR 8154).
class DividedTwice : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  std::vector<float> loss_scales(const ref::Batch& window, const std::vector<std::pair<long, long>>& ranges) override {
    std::vector<float> out = TrainingLoop::loss_scales(window, ranges);
    for (float& s : out) s /= static_cast<float>(ranges.size());
    return out;
  }
};

// B5 — last partial window scaled by 1/N: a window of r < N micro-batches
// yields (r / N) G (Lightning 19987; mlx-lm PR 1413).
class PartialWindowScaledByN : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  std::vector<float> loss_scales(const ref::Batch& window, const std::vector<std::pair<long, long>>& ranges) override {
    std::vector<float> out = TrainingLoop::loss_scales(window, ranges);
    for (float& s : out) s *= static_cast<float>(ranges.size()) / static_cast<float>(nominal_length_);
    return out;
  }
};

// B6 — window bookkeeping: the tail micro-batches of a partial last window
// are dropped (torchtune PR 2745; burn 5695; Lightning 1549).
class DropsPartialWindow : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  void run_window(const ref::Batch& window, const std::vector<long>& micro_batches) override {
    if (micro_batches.size() < nominal_length_) return;  // "not a full window yet"
    TrainingLoop::run_window(window, micro_batches);
  }
};

// B8 — geometric self-accumulation: buf = 2 buf + g, ~2^N growth that
// clipping hides (Megatron-LM 6660).
class GeometricAccumulation : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  double micro_batch(const ref::Batch& mb, float scale) override {
    if (micro_batch_index_ > 0) backend_.scale(grads_, 2.0f);
    return TrainingLoop::micro_batch(mb, scale);
  }
};

// B9 — stale gradients: the buffers are zeroed before the first window
// only, so window t steps with G_t + G_{t-1} + ... (llm.c PR 548;
// tt-blacksmith PR 711).
class StaleGradients : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  void zero_gradients() override {
    if (window_ == 0) TrainingLoop::zero_gradients();
  }
};

// B10 — zero_grad inside the micro-batch loop: only the last micro-batch's
// gradient survives (RAE 67; DeepSpeed PR 7967).
class ZeroGradPerMicroBatch : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  double micro_batch(const ref::Batch& mb, float scale) override {
    TrainingLoop::zero_gradients();
    return TrainingLoop::micro_batch(mb, scale);
  }
};

// B11 — optimizer step every micro-batch: N small steps at a moving theta
// instead of one (reformer-pytorch 97).
class StepPerMicroBatch : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  double micro_batch(const ref::Batch& mb, float scale) override {
    const double loss = TrainingLoop::micro_batch(mb, scale);
    if (micro_batch_index_ + 1 < window_length_) {
      TrainingLoop::finish_window();
      TrainingLoop::zero_gradients();
      refresh_compute_weights();
    }
    return loss;
  }
};

// B13 — clip per micro-batch: clip(clip(g1) + g2) instead of clip(g1 + g2)
// (transformers 986; lingua PR 59).
class ClipPerMicroBatch : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  double micro_batch(const ref::Batch& mb, float scale) override {
    const double loss = TrainingLoop::micro_batch(mb, scale);
    if (micro_batch_index_ + 1 < window_length_) clip_gradients();
    return loss;
  }
};

// B14 — loss-scaler timing: the dynamic scaler updates after every
// micro-batch, so the scale changes inside the window while the gradient
// is unscaled once with the last scale (PyTorch AMP docs; Lightning 9330,
// 9694).
class ScaleChangesInsideWindow : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  std::vector<float> loss_scales(const ref::Batch& window, const std::vector<std::pair<long, long>>& ranges) override {
    std::vector<float> out = TrainingLoop::loss_scales(window, ranges);
    const ref::LossScaling& ls = procedure().loss_scaling;
    if (!ls.dynamic) return out;
    // The scale each micro-batch sees grows after every one of them ...
    for (std::size_t b = 0; b < out.size(); ++b)
      out[b] *= static_cast<float>(std::pow(ls.growth_factor, static_cast<double>(b)));
    // ... and the window is unscaled with the last one.
    loss_scale_ *= std::pow(ls.growth_factor, static_cast<double>(out.size() - 1));
    return out;
  }
};

// B15 — LR schedule stepped per micro-batch: the schedule runs N times too
// fast (Lightning 1476; nanochat PR 775).
class SchedulePerMicroBatch : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  double learning_rate() override {
    const long scheduler_steps = (step_ + 1) * static_cast<long>(window_length_) - 1;
    return procedure().optimizer.lr * ref::schedule_multiplier(procedure().schedule, scheduler_steps);
  }
};

// B17 — off-by-one micro-batch slicing: every micro-batch after the first
// starts one sample early, duplicating one sample and skipping the
// window's last (common; no single source).
class OffByOneSlicing : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  std::vector<std::pair<long, long>> micro_batch_ranges(const std::vector<long>& micro_batches) override {
    std::vector<std::pair<long, long>> ranges = TrainingLoop::micro_batch_ranges(micro_batches);
    for (std::size_t b = 1; b < ranges.size(); ++b) ranges[b].first -= 1;
    return ranges;
  }
};

// B18 — weight decay per micro-batch: the decay is applied N times per
// window (inferred from B11's mechanism).
class WeightDecayPerMicroBatch : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  void optimizer_step() override {
    ref::OptimizerSpec o = procedure().optimizer;
    o.weight_decay *= static_cast<double>(window_length_);
    step_with(o);
  }
};

// B24 — every micro-batch's activations kept alive: the graph of each
// micro-batch's loss is held (for logging) until the step, so the peak
// grows with N (common in training scripts).
class KeepsEveryGraph : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  ~KeepsEveryGraph() override {
    for (auto& t : held_)
      if (t->data) disown(*t);  // released already when a run ended early
  }
  double micro_batch(const ref::Batch& mb, float scale) override {
    const double loss = TrainingLoop::micro_batch(mb, scale);
    for (std::size_t v = 0; v < model_->values(); ++v) {
      const Tensor a = activation(v, mb.rows());
      held_.push_back(std::make_unique<Tensor>());  // own() keeps its address
      own(*held_.back(), a.rows, a.cols, a.dtype, MemoryCategory::activations);
      backend_.convert(a, *held_.back());
    }
    return loss;
  }
  void finish_window() override {
    for (auto& t : held_) disown(*t);
    held_.clear();
    TrainingLoop::finish_window();
  }

 private:
  std::vector<std::unique_ptr<Tensor>> held_;
};

// B25 — checkpointing's recomputed forward updates BatchNorm's running
// statistics again: the momentum update is applied twice per micro-batch
// (PyTorch checkpoint + BatchNorm, a documented caveat of
// torch.utils.checkpoint).
class RecomputeUpdatesRunningStatistics : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  void forward_node(std::size_t n, long rows, bool) override { TrainingLoop::forward_node(n, rows, true); }
};

// B27 — a branch's gradient of a residual block's input written into the
// residual stream with = instead of +=: the skip's gradient is lost
// (llm.c's residual buffers, zeroed and re-accumulated by hand).
class OverwritesResidualGradient : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  void add_input_gradient(const Tensor& value_gradient, const Tensor& part) override {
    backend_.convert(part, value_gradient);
  }
};

// B33 — a causal LM's normaliser counts the labels before the shift: the
// window's item count has one label too many per sequence (the last
// position's, which nothing predicts), and the gradient is scaled by
// n_shifted / n_unshifted, an error of about 1/T (Transformers PR 46204).
class CountsUnshiftedLabels : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  std::vector<float> loss_scales(const ref::Batch& window, const std::vector<std::pair<long, long>>& ranges) override {
    const ref::LossKind loss = scenario_->spec.model.loss;
    std::vector<long> counts;
    for (const auto& r : ranges) counts.push_back(r.second);
    std::vector<float> scales;
    for (double s : ref::micro_batch_scales(procedure(), loss == ref::LossKind::causal_lm ? ref::LossKind::cross_entropy
                                                                                          : loss,
                                            window, counts))
      scales.push_back(static_cast<float>(s * loss_scale_));
    return scales;
  }
};

// B34 — the loss comes out multiplied by N: the model normalises by the
// window's item count (num_items_in_batch) and the trainer, told the model
// does not, leaves out its 1/N, or the other way round (Transformers
// #37197, Gemma3; Liger-Kernel #802). The window's gradient is N x G.
class LossTimesN : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  std::vector<float> loss_scales(const ref::Batch& window, const std::vector<std::pair<long, long>>& ranges) override {
    std::vector<float> out = TrainingLoop::loss_scales(window, ranges);
    for (float& s : out) s *= static_cast<float>(ranges.size());
    return out;
  }
};

// B32 — a tied weight's second contribution assigned instead of added:
// the embedding's backward (the weight's last use, backward reaching it
// after the head) writes its gradient over the buffer the head's weight
// gradient went into, and the head's contribution is lost
// (TransformerEngine #3437: the delayed weight gradient assigned, 0.60x
// the true gradient; Megatron-LM #844, #1548; Fast-LLM #550).
class TiedWeightOverwritten : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  void backward_node(const LoopCall& c) override {
    if (c.node.parameters == 1 && shared_with_a_later_node(c)) {
      const Tensor grad[] = {c.grads[0]};
      backend_.zero(grad);  // dW = ... instead of +=
    }
    TrainingLoop::backward_node(c);
  }

 private:
  static bool shared_with_a_later_node(const LoopCall& c) {
    for (const ref::Node& other : c.model.nodes)
      if (&other > &c.node && other.parameters > 0 && other.first_parameter == c.node.first_parameter) return true;
    return false;
  }
};

}  // namespace

const std::vector<LoopMutant>& loop_mutants() {
  static const std::vector<LoopMutant> all = {
      {{"B1", "mean of per-micro-batch means (1/N of each micro-batch's own mean)",
        "HF transformers PRs 34191/34198/34283, issue 24725; TRL 2175"},
       loop_of<MeanOfMeans>()},
      {{"B3", "missing 1/N: the window's gradient is N x G",
        "nanoGPT 168; apex 286"},
       loop_of<MissingOneOverN>()},
      {{"B4", "double scaling: divided by N twice, G / N",
        "transformers 40052, 35438; accelerate 3533; Megatron-DeepSpeed PR 42; DeepSpeed PR 8154"},
       loop_of<DividedTwice>()},
      {{"B5", "last partial window scaled by 1/N: (r/N) G",
        "Lightning 19987; mlx-lm PR 1413"},
       loop_of<PartialWindowScaledByN>()},
      {{"B6", "window bookkeeping: a partial last window is dropped",
        "torchtune PR 2745; burn 5695; Lightning 1549"},
       loop_of<DropsPartialWindow>()},
      {{"B8", "geometric self-accumulation: buf = 2 buf + g",
        "Megatron-LM 6660"},
       loop_of<GeometricAccumulation>()},
      {{"B9", "stale gradients: buffers not zeroed after the step",
        "llm.c PR 548; tt-blacksmith PR 711"},
       loop_of<StaleGradients>()},
      {{"B10", "zero_grad inside the micro-batch loop: only g_N survives",
        "RAE 67; DeepSpeed PR 7967"},
       loop_of<ZeroGradPerMicroBatch>()},
      {{"B11", "optimizer step every micro-batch",
        "reformer-pytorch 97"},
       loop_of<StepPerMicroBatch>()},
      {{"B13", "clip per micro-batch: clip(clip(g1) + g2)",
        "transformers 986; lingua PR 59"},
       loop_of<ClipPerMicroBatch>()},
      {{"B14", "loss scale changed inside a window, unscaled once with the last",
        "PyTorch AMP docs; Lightning 9330, 9694"},
       loop_of<ScaleChangesInsideWindow>()},
      {{"B15", "LR schedule stepped per micro-batch: N times too fast",
        "Lightning 1476; nanochat PR 775"},
       loop_of<SchedulePerMicroBatch>()},
      {{"B17", "off-by-one micro-batch slicing: one sample duplicated, one skipped",
        "common; no single source"},
       loop_of<OffByOneSlicing>()},
      {{"B18", "weight decay applied per micro-batch (N times per window)",
        "inferred from B11's mechanism"},
       loop_of<WeightDecayPerMicroBatch>()},
      {{"B24", "every micro-batch's activations kept alive until the step: the peak grows with N",
        "common in training scripts; no single source"},
       loop_of<KeepsEveryGraph>()},
      {{"B25", "checkpoint recompute updates BatchNorm running statistics a second time",
        "PyTorch checkpoint + BatchNorm (documented caveat of torch.utils.checkpoint)"},
       loop_of<RecomputeUpdatesRunningStatistics>()},
      {{"B27", "a branch's gradient written into the residual stream with = instead of +=: the skip's gradient lost",
        "llm.c commit b581810 (residual gradient buffers handled by hand under accumulation)"},
       loop_of<OverwritesResidualGradient>()},
      {{"B32", "a tied head's weight gradient overwritten by the embedding's: one of the two contributions lost",
        "TransformerEngine 3437; Megatron-LM 844, 1548; Fast-LLM 550"},
       loop_of<TiedWeightOverwritten>()},
      {{"B33", "a causal LM's normaliser counts the unshifted labels: one item too many per sequence",
        "transformers PR 46204"},
       loop_of<CountsUnshiftedLabels>()},
      {{"B34", "the loss comes out multiplied by the number of micro-batches N",
        "transformers 37197 (Gemma3); Liger-Kernel 802"},
       loop_of<LossTimesN>()},
  };
  return all;
}

}  // namespace gradeq
