// data_parallel.h — gradient accumulation across ranks: W processes, each
// with its own micro-batches of the window, joined by a Communicator.
//
//   window:  every rank zeroes its buffer, all-reduces its item count once
//            (the global normalizer), runs its N micro-batches without
//            synchronizing (no_sync), then after the N-th
//              replicated: all-reduces the gradient (every rank steps alike)
//              sharded:    reduce-scatters it; each rank unscales, clips by
//                          the norm combined from the shards' norms, steps
//                          its 1/W of the parameters and optimizer state,
//                          and all-gathers the parameters
//
// The reference computes the same procedure (ProcedureConfig::ranks and
// ::sharded): the ranks' buffers summed once by a float32 reduction, the
// clip norm from the shards. So the verdicts of harness/core/equivalence.h apply
// unchanged: K_acc is the data-parallel run, R_full the single-process full
// batch of the same global window.
//
// The steps are virtual so that the data-parallel bugs of docs/BUGS.md
// (B2, B12, B20-B23) are small subclasses (harness/core/data_parallel_mutants.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/core/equivalence.h"
#include "harness/core/training_loop.h"
#include "kernels/communicator.h"

namespace gradeq {

enum class ShardMode { replicated, sharded };
std::string shard_mode_name(ShardMode m);

// The scenario as W ranks run it. `base.split` holds one rank's
// micro-batches per window; rank r takes the same sizes with r samples
// added to its first micro-batch (ranks then differ in samples and tokens),
// and the window is the ranks' micro-batches in rank order.
// procedure.ranks = W and procedure.sharded as `mode` says.
ScenarioSpec data_parallel_spec(const ScenarioSpec& base, int ranks, ShardMode mode);

// std::invalid_argument, saying why, when `spec` cannot run data-parallel
// over `ranks` in `mode`: a tensor whose elements do not divide among the
// ranks (sharded), Kahan-compensated accumulation, BatchNorm (its running
// statistics across ranks are not modelled).
void require_data_parallel(const ScenarioSpec& spec, int ranks, ShardMode mode);

class DataParallelLoop : public TrainingLoop {
 public:
  DataParallelLoop(Backend& backend, Communicator& comm, ShardMode mode)
      : TrainingLoop(backend), comm_(comm), mode_(mode) {}

 protected:
  void run_window(const ref::Batch& window, const std::vector<long>& micro_batches) override;
  // The global normalizer: the ranks' item counts all-reduced once.
  std::vector<float> loss_scales(const ref::Batch& window, const std::vector<std::pair<long, long>>& ranges) override;
  void finish_window() override;  // sharded: on this rank's shards, then all-gather
  bool gradients_finite() override;
  float gradient_norm() override;
  void keep_unclipped_gradients() override;  // sharded: the shards gathered first
  void allocated() override;

  // ---- the data-parallel steps (override one to express a bug)
  // After how many of the rank's `local` micro-batches the gradient is
  // synchronized: after the last one (no_sync on the others).
  virtual std::size_t sync_after(std::size_t local);
  // Replicated: all-reduce the buffers. Sharded: reduce-scatter them into
  // this rank's gradient shards.
  virtual void synchronize_gradients();

  Communicator& comm_;
  ShardMode mode_;
  // Sharded mode: this rank's shard of each gradient, parameter and
  // optimizer state tensor (float32 but for the gradient's buffer dtype).
  std::vector<Tensor> grad_shards_, param_shards_, first_moment_shards_, second_moment_shards_;
  std::size_t local_micro_batches_ = 0;

 private:
  void gather_for_record();
};

// Rank `rank`'s shard (`shard` elements) of a full tensor's values.
std::vector<float> shard_of(const std::vector<float>& full, int rank, long shard);

// The loop W ranks run, in `mode`.
LoopFactory data_parallel_loop(Communicator& comm, ShardMode mode);

// Every rank runs K_full (alone) and K_acc (data-parallel, through `loop`);
// rank 0 also computes the reference runs. Collective: every rank calls it
// with the same scenario. The runs of ranks other than 0 hold no references.
Runs execute_data_parallel(const Scenario& scenario, Backend& backend, Communicator& comm, const LoopFactory& loop,
                           const ErrorModel& model);

// Collective. Empty when every rank recorded bitwise the same run, else
// where the first difference is ("window 1, layer0.weight: rank 2 differs
// from rank 0").
std::string rank_difference(const KernelRun& run, Communicator& comm);

}  // namespace gradeq
