// mutants.cpp — the catalogued bugs as one-function variants. Each class
// overrides one step of TrainingLoop or one op of a ForwardingBackend; the
// comment above it names the bug and where it shipped (shared/BUGS.md).
#include "kernels/mutants/mutants.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "harness/training_loop.h"
#include "kernels/forwarding_backend.h"
#if GRADEQ_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

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
    backend_.optimizer_step(make_optimizer_step(o, learning_rate(), step_), params_, grads_, optimizer_a_, optimizer_b_);
    ++step_;
  }
};

// B7 — overwrite instead of accumulate: the bias gradient is written, not
// added, so only the last micro-batch's survives (llm.c PR 163, PR 408;
// ggml PR 949).
class OverwritesBiasGradient : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override {
    const Tensor bias[] = {db};
    inner_.zero(bias);  // dbias = ... instead of +=
    inner_.linear_backward_weight(dy, x, dw, db);
  }
};

// B16 — low-precision accumulation buffer: gradients accumulate in
// bfloat16 although the buffer is declared float32: 256 + 1 = 256
// (Megatron fork PR 146, issue 149; DeepSpeed 1800, PR 2847).
class BfloatAccumulation : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override {
    inner_.linear_backward_weight(dy, x, dw, db);
    to_bfloat16({dw, db});
  }
  void norm_backward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& dy,
                     const Tensor& saved_mean, const Tensor& saved_rstd, const Tensor& dx, const Tensor& dgamma,
                     const Tensor& dbeta) override {
    inner_.norm_backward(c, x, gamma, dy, saved_mean, saved_rstd, dx, dgamma, dbeta);
    to_bfloat16({dgamma, dbeta});
  }
  void accumulate(std::span<const Tensor> dst, std::span<const Tensor> src,
                  std::span<const Tensor> compensation) override {
    inner_.accumulate(dst, src, compensation);
    to_bfloat16(std::vector<Tensor>(dst.begin(), dst.end()));
  }

 private:
  // What a bfloat16 buffer would hold: round through a bfloat16 tensor.
  void to_bfloat16(const std::vector<Tensor>& ts) {
    for (const Tensor& t : ts) {
      if (t.empty() || t.dtype != DType::f32) continue;
      Tensor narrow = inner_.allocate(t.rows, t.cols, DType::bf16);
      inner_.convert(t, narrow);
      inner_.convert(narrow, t);
      inner_.release(narrow);
    }
  }
};

// B19 on a host backend — unsynchronized concurrent accumulate: the bias
// gradient is summed by several row slices, each adding its partial into
// db with a plain read-modify-write. A host backend has no concurrent
// blocks, so the race's outcome is modelled: each slice after the first
// reads, with probability 1/2, the value from before the previous slice's
// write, and that write is lost; the draws differ run to run, as a race's
// interleavings do. (The CUDA backend's B19 is the real racy kernel.)
class LostUpdateBiasGradient : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override {
    Tensor discarded = inner_.allocate(db.rows, db.cols, DType::f32);
    inner_.fill(discarded, 0.0f);
    inner_.linear_backward_weight(dy, x, dw, discarded);  // dw as the kernel computes it
    inner_.release(discarded);
    std::vector<float> g(static_cast<std::size_t>(dy.size())), b(static_cast<std::size_t>(db.size()));
    inner_.download(dy, g);
    inner_.download(db, b);
    const long slices = std::min(dy.rows, 4L), per = slices > 0 ? (dy.rows + slices - 1) / slices : 0;
    std::bernoulli_distribution raced(0.5);
    for (long c = 0; c < dy.cols; ++c) {
      float current = b[static_cast<std::size_t>(c)], previous_read = current;
      for (long s = 0; s < slices; ++s) {
        float partial = 0.0f;
        for (long r = s * per; r < std::min(dy.rows, (s + 1) * per); ++r) partial += g[static_cast<std::size_t>(r * dy.cols + c)];
        const float read = s > 0 && raced(rng_) ? previous_read : current;
        previous_read = read;
        current = read + partial;
      }
      b[static_cast<std::size_t>(c)] = current;
    }
    inner_.upload(db, b);
  }

 private:
  std::mt19937 rng_{std::random_device{}()};
};

template <class B>
std::function<std::unique_ptr<Backend>(Backend&)> backend_of() {
  return [](Backend& inner) { return std::make_unique<B>(inner); };
}

}  // namespace

const std::vector<Mutant>& mutants() {
  static const std::vector<Mutant> all = {
      {"B1", "mean of per-micro-batch means (1/N of each micro-batch's own mean)",
       "HF transformers PRs 34191/34198/34283, issue 24725; TRL 2175", nullptr, loop_of<MeanOfMeans>()},
      {"B3", "missing 1/N: the window's gradient is N x G", "nanoGPT 168; apex 286", nullptr,
       loop_of<MissingOneOverN>()},
      {"B4", "double scaling: divided by N twice, G / N",
       "transformers 40052, 35438; accelerate 3533; Megatron-DeepSpeed PR 42; DeepSpeed PR 8154", nullptr,
       loop_of<DividedTwice>()},
      {"B5", "last partial window scaled by 1/N: (r/N) G", "Lightning 19987; mlx-lm PR 1413", nullptr,
       loop_of<PartialWindowScaledByN>()},
      {"B6", "window bookkeeping: a partial last window is dropped", "torchtune PR 2745; burn 5695; Lightning 1549",
       nullptr, loop_of<DropsPartialWindow>()},
      {"B7", "overwrite instead of accumulate: dbias = instead of +=", "llm.c PR 163, PR 408; ggml PR 949",
       backend_of<OverwritesBiasGradient>(), nullptr},
      {"B8", "geometric self-accumulation: buf = 2 buf + g", "Megatron-LM 6660", nullptr,
       loop_of<GeometricAccumulation>()},
      {"B9", "stale gradients: buffers not zeroed after the step", "llm.c PR 548; tt-blacksmith PR 711", nullptr,
       loop_of<StaleGradients>()},
      {"B10", "zero_grad inside the micro-batch loop: only g_N survives", "RAE 67; DeepSpeed PR 7967", nullptr,
       loop_of<ZeroGradPerMicroBatch>()},
      {"B11", "optimizer step every micro-batch", "reformer-pytorch 97", nullptr, loop_of<StepPerMicroBatch>()},
      {"B13", "clip per micro-batch: clip(clip(g1) + g2)", "transformers 986; lingua PR 59", nullptr,
       loop_of<ClipPerMicroBatch>()},
      {"B14", "loss scale changed inside a window, unscaled once with the last", "PyTorch AMP docs; Lightning 9330, 9694",
       nullptr, loop_of<ScaleChangesInsideWindow>()},
      {"B15", "LR schedule stepped per micro-batch: N times too fast", "Lightning 1476; nanochat PR 775", nullptr,
       loop_of<SchedulePerMicroBatch>()},
      {"B16", "accumulation in bfloat16 behind a float32 buffer",
       "Megatron fork PR 146, issue 149; DeepSpeed 1800, PR 2847", backend_of<BfloatAccumulation>(), nullptr},
      {"B17", "off-by-one micro-batch slicing: one sample duplicated, one skipped", "common; no single source",
       nullptr, loop_of<OffByOneSlicing>()},
      {"B18", "weight decay applied per micro-batch (N times per window)", "inferred from B11's mechanism", nullptr,
       loop_of<WeightDecayPerMicroBatch>()},
  };
  return all;
}

std::vector<Mutant> mutants_for(const Backend& backend) {
  std::vector<Mutant> out = mutants();
  Mutant race{"B19", "unsynchronized concurrent accumulate: several slices += into one bias gradient",
              "kernel-level race (shared/BUGS.md)", backend_of<LostUpdateBiasGradient>(), nullptr};
#if GRADEQ_HAVE_CUDA
  if (backend.name() == "cuda") race.wrap_backend = [](Backend&) { return make_racy_bias_backend(); };
#endif
  if (backend.name() != "cuda") race.bug += " (race outcome modelled on the host)";
  out.push_back(std::move(race));
  return out;
}

const Mutant* find_mutant(const std::string& id) {
  for (const Mutant& m : mutants())
    if (m.id == id) return &m;
  return nullptr;
}

}  // namespace gradeq
