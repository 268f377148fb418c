// training_loop.h — the training-step driver: the accumulation procedure of
// reference/procedure.h, executed on a Backend.
//
//   for each window:  zero -> for each micro-batch (forward, loss scaled by
//                     S / normalizer, backward accumulating into the
//                     gradient buffer) -> unscale by 1/S -> [dynamic loss
//                     scaling: skip on overflow] -> clip -> schedule ->
//                     optimizer step
//
// The loop is a policy: each step is a virtual function, so that the bugs
// that live in the loop rather than in a kernel (step or zero_grad per
// micro-batch, wrong normalizer, clip or schedule per micro-batch, bad
// slicing) are small subclasses in harness/core/loop_mutants. The loop owns the
// backend tensors of one run.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/core/memory/loop_plan.h"
#include "harness/core/memory/types.h"
#include "harness/core/ops/op_record.h"
#include "harness/core/run_record.h"
#include "harness/core/scenario.h"
#include "kernels/backend.h"
#include "kernels/check.h"

namespace gradeq {

// The constants of one optimizer step, from the configuration, this step's
// learning rate and the number of steps taken before it.
OptimizerStep make_optimizer_step(const ref::OptimizerSpec& o, double lr, long step);
class TrainingLoop {
 public:
  explicit TrainingLoop(Backend& backend) : backend_(backend) {}
  virtual ~TrainingLoop();
  TrainingLoop(const TrainingLoop&) = delete;
  TrainingLoop& operator=(const TrainingLoop&) = delete;

  // Runs every window of `split` on the scenario's data, from its initial
  // state. Records after each window what the scenario's schema names
  // (harness/core/run_record.h): the gradient, the parameters, the BatchNorm
  // running statistics and the optimizer / loss-scaler state.
  KernelRun run(const Scenario& scenario, const Split& split);

 protected:
  // ---- the steps of the procedure (override one to express a loop bug)
  virtual void run_window(const ref::Batch& window, const std::vector<long>& micro_batches);
  virtual void zero_gradients();
  // Sample ranges [first, first + count) of each micro-batch in the window.
  virtual std::vector<std::pair<long, long>> micro_batch_ranges(const std::vector<long>& micro_batches);
  // The factor each micro-batch's loss gradient is multiplied by: the loss
  // scale over the normalizer.
  virtual std::vector<float> loss_scales(const ref::Batch& window, const std::vector<std::pair<long, long>>& ranges);
  // forward, loss, backward for one micro-batch, accumulated into the
  // window's gradient; returns its normalized loss.
  virtual double micro_batch(const ref::Batch& micro_batch, float scale);
  virtual void finish_window();  // unscale, overflow check, clip, step
  virtual void unscale_gradients();
  // Keeps the window's gradient as accumulation made it (before the clip)
  // for the record.
  virtual void keep_unclipped_gradients();
  virtual void clip_gradients();
  virtual double learning_rate();  // this step's, from the schedule
  virtual void optimizer_step();
  // Whether the unscaled gradient is finite (dynamic loss scaling).
  virtual bool gradients_finite();
  // The global norm clipping uses.
  virtual float gradient_norm();
  // Called once the run's tensors are allocated: a loop that needs more
  // tensors allocates them here with own().
  virtual void allocated() {}
  // Runs node n forward on the micro-batch's first `rows` rows. A
  // BatchNorm node updates its running statistics only when asked: in the
  // forward pass, not when checkpointing recomputes it.
  virtual void forward_node(std::size_t n, long rows, bool update_running_statistics);
  // Adds a later reader's gradient of a value into the value's gradient
  // (a residual block's input: the branch's gradient into the stream's).
  virtual void add_input_gradient(const Tensor& value_gradient, const Tensor& part);
  // Runs a node's backward: its record's calls on the backend, adding its
  // parameters' gradients into c.grads.
  virtual void backward_node(const LoopCall& c);

  // ---- pieces the steps are made of
  void refresh_compute_weights();
  // The tensors of the parameters the optimizer trains (all but the
  // frozen ones), from a per-parameter list.
  std::vector<Tensor> trained(const std::vector<Tensor>& per_parameter) const;
  // One optimizer step of `o` at this step's learning rate, over the
  // trained parameters.
  void step_with(const ref::OptimizerSpec& o);
  // Records which of the window's samples each micro-batch of `ranges`
  // (first sample, count) feeds.
  void record_fed(long window_samples, const std::vector<std::pair<long, long>>& ranges);
  // Allocates t on the backend, released when the run ends (or by
  // disown()); its bytes count in `category` of the run's memory.
  void own(Tensor& t, long rows, long cols, DType dtype, MemoryCategory category);
  void disown(Tensor& t);
  // Value v of the micro-batch being run ([rows, width of v]), and
  // gradient buffer k viewed as [rows, width].
  Tensor activation(std::size_t v, long rows) const;
  Tensor gradient_buffer(std::size_t k, long rows, long width) const;
  // The call of node n on the micro-batch's first `rows` rows, its
  // inputs, parameters, buffers and saved statistics filled in.
  LoopCall node_call(std::size_t n, long rows) const;
  // Forward, loss with `scale`, backward accumulating into `grad_targets`.
  double forward_loss_backward(const ref::Batch& micro_batch, float scale, const std::vector<Tensor>& grad_targets);
  const ref::ProcedureConfig& procedure() const { return scenario_->spec.procedure; }

  Backend& backend_;
  const Scenario* scenario_ = nullptr;
  std::vector<Tensor> params_;          // master weights, float32
  std::vector<Tensor> compute_params_;  // what forward/backward read (params_ when compute is float32)
  std::vector<Tensor> grads_;           // accumulation buffers
  std::vector<Tensor> staging_;         // staged or compensated: one micro-batch's gradient (compute dtype, or float32)
  std::vector<Tensor> compensation_;    // compensated mode: Kahan terms, accumulation dtype
  std::vector<Tensor> first_moment_, second_moment_;  // optimizer state, float32 (empty when unused)
  std::optional<ref::Model> model_;     // the scenario's, resolved
  std::optional<ref::Model> shorter_;   // the model at a padded micro-batch's shorter length
  LoopPlan plan_;
  std::vector<Tensor> activations_;     // the plan's slots, max rows
  std::vector<Tensor> gradient_buffers_;  // the plan's, max rows x the widest value
  std::vector<Tensor> saved_mean_, saved_rstd_;  // per node (empty unless a normalizer)
  std::vector<Tensor> buffers_;                   // BatchNorm running statistics, float32
  Tensor targets_;
  double window_loss_ = 0.0;
  std::size_t window_ = 0;           // index of the window being run
  std::size_t window_length_ = 0;    // micro-batches in it
  std::size_t nominal_length_ = 0;   // micro-batches in the first window (the configured N)
  std::size_t micro_batch_index_ = 0;
  long step_ = 0;           // optimizer steps taken
  double loss_scale_ = 1.0;
  long good_steps_ = 0;     // steps since the loss scale last changed
  bool skipped_ = false;    // this window's step was skipped (overflow)
  // For the record: the window's gradient before the clip (on the host,
  // where the procedure clips), the clip's norm and coefficient, the step's
  // learning rate, and the samples each micro-batch fed.
  std::vector<std::vector<double>> unclipped_;
  float clip_norm_ = 0.0f, clip_coefficient_ = 1.0f;
  double step_learning_rate_ = 0.0;
  std::vector<std::vector<long>> fed_;

 private:
  struct Owned {
    Tensor* tensor;
    MemoryCategory category;
    std::size_t bytes;
  };
  void allocate(const Scenario& s, long max_rows);
  void release_all();
  KernelWindow record_window();
  MemoryUsage measured_memory() const;
  std::vector<Owned> owned_;
  std::size_t base_bytes_ = 0;                     // the backend's live bytes when the run started
  std::array<double, kMemoryCategories> live_{};   // the loop's tensors now, by category
  std::array<double, kMemoryCategories> at_peak_{};  // ... when their sum was largest
};

// Builds the training loop a run uses; the correct loop by default, a
// mutant's loop in the self-test.
using LoopFactory = std::function<std::unique_ptr<TrainingLoop>(Backend&)>;
LoopFactory correct_loop();

}  // namespace gradeq
