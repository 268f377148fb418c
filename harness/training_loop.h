// training_loop.h — the training-step driver: the accumulation procedure of
// reference/procedure.h, executed on a Backend.
//
//   for each window:  zero -> for each micro-batch (forward, scaled loss,
//                     backward accumulating into the gradient buffer)
//                     -> unscale -> optimizer step
//
// The loop is a policy: each step is a virtual function, so that the bugs
// that live in the loop rather than in a kernel (step or zero_grad per
// micro-batch, wrong normalizer, bad slicing) are small subclasses in
// kernels/mutants. The loop owns the backend tensors of one run.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "harness/runs.h"
#include "harness/scenario.h"
#include "kernels/backend.h"

namespace gradeq {

class TrainingLoop {
 public:
  explicit TrainingLoop(Backend& backend) : backend_(backend) {}
  virtual ~TrainingLoop();
  TrainingLoop(const TrainingLoop&) = delete;
  TrainingLoop& operator=(const TrainingLoop&) = delete;

  // Runs every window of `split` on the scenario's data, from its initial
  // parameters. Records after each window its gradient, the parameters and
  // the BatchNorm running statistics (runs.h).
  KernelRun run(const Scenario& scenario, const Split& split);

 protected:
  // ---- the steps of the procedure (override one to express a loop bug)
  virtual void run_window(const ref::Batch& window, const std::vector<long>& micro_batches);
  virtual void zero_gradients();
  // Sample ranges [first, first + count) of each micro-batch in the window.
  virtual std::vector<std::pair<long, long>> micro_batch_ranges(const std::vector<long>& micro_batches);
  // The factor each micro-batch's loss gradient is multiplied by.
  virtual std::vector<float> loss_scales(const ref::Batch& window, const std::vector<std::pair<long, long>>& ranges);
  // forward, loss, backward for one micro-batch; returns its scaled loss.
  virtual double micro_batch(const ref::Batch& micro_batch, float scale);
  virtual void finish_window();  // unscale, optimizer step

  // ---- pieces the steps are made of
  void refresh_compute_weights();
  double forward_loss_backward(const ref::Batch& micro_batch, float scale);
  void optimizer_step();

  Backend& backend_;
  const Scenario* scenario_ = nullptr;
  std::vector<Tensor> params_;          // master weights, float32
  std::vector<Tensor> compute_params_;  // what forward/backward read (params_ when compute is float32)
  std::vector<Tensor> grads_;           // accumulation buffers
  std::vector<Tensor> activations_;     // input of each layer, then the output; max rows
  std::vector<Tensor> activation_grads_;
  std::vector<Tensor> saved_mean_, saved_rstd_;  // per layer (empty unless a normalizer)
  std::vector<Tensor> buffers_;                   // BatchNorm running statistics, float32
  Tensor targets_;
  double window_loss_ = 0.0;
  long step_ = 0;

 private:
  void allocate(const Scenario& s, long max_rows);
  KernelWindow record_window();
  void release_all();
  std::vector<Tensor*> owned_;
};

}  // namespace gradeq
