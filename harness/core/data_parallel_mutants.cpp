// data_parallel_mutants.cpp — the data-parallel bugs, each a subclass of
// DataParallelLoop that overrides one step.
#include "harness/core/data_parallel_mutants.h"

#include <cmath>
#include <utility>

namespace gradeq {
namespace {

// B2: each rank divides by its own item count; the all-reduce then averages
// over the W ranks.
class PerRankNormalization final : public DataParallelLoop {
 public:
  using DataParallelLoop::DataParallelLoop;
  std::vector<float> loss_scales(const ref::Batch& window, const std::vector<std::pair<long, long>>& ranges) override {
    long local_items = 0;
    for (const auto& [first, count] : ranges) local_items += window.slice(first, count).items(scenario_->spec.model.loss);
    const double normalizer = static_cast<double>(comm_.size()) * static_cast<double>(local_items);
    return std::vector<float>(ranges.size(),
                              static_cast<float>((normalizer > 0.0 ? 1.0 / normalizer : 0.0) * loss_scale_));
  }
};

// B12: the all-reduce runs before the last micro-batch's gradient is added.
class SyncBeforeLastMicroBatch final : public DataParallelLoop {
 public:
  using DataParallelLoop::DataParallelLoop;
  std::size_t sync_after(std::size_t local) override { return local > 0 ? local - 1 : 0; }
};

// B20: the all-reduce runs in the first window only.
class SyncFirstWindowOnly final : public DataParallelLoop {
 public:
  using DataParallelLoop::DataParallelLoop;
  void synchronize_gradients() override {
    if (window_ == 0) DataParallelLoop::synchronize_gradients();
  }
};

// B21: the squared norm of the already all-reduced gradient is summed over
// the ranks again: sqrt(W) times too large.
class NormReducedTwice final : public DataParallelLoop {
 public:
  using DataParallelLoop::DataParallelLoop;
  float gradient_norm() override {
    const double local = DataParallelLoop::gradient_norm();
    return static_cast<float>(std::sqrt(comm_.all_reduce_sum(local * local)));
  }
};

// B22: no_sync also on the step micro-batch: no all-reduce at all.
class NoSyncOnStep final : public DataParallelLoop {
 public:
  using DataParallelLoop::DataParallelLoop;
  void synchronize_gradients() override {}
};

// B23: a shard steps with its own local partial gradient, not the
// reduce-scattered sum.
class ShardStepsUnreduced final : public DataParallelLoop {
 public:
  using DataParallelLoop::DataParallelLoop;
  void synchronize_gradients() override {
    for (std::size_t p = 0; p < grads_.size(); ++p) {
      const long shard = grad_shards_[p].size();
      backend_.upload(grad_shards_[p], shard_of(host_values(backend_, grads_[p]), comm_.rank(), shard));
    }
  }
};

template <class Loop>
DataParallelMutant mutant(std::string id, std::string bug, std::string source, ShardMode mode) {
  return {std::move(id), std::move(bug), std::move(source), mode,
          [mode](Backend& b, Communicator& c) { return std::make_unique<Loop>(b, c, mode); }};
}

}  // namespace

const std::vector<DataParallelMutant>& data_parallel_mutants() {
  static const std::vector<DataParallelMutant> all = {
      mutant<PerRankNormalization>("B2", "per-rank normalization under data parallelism",
                                   "transformers PR 34373; torchtune PR 1917", ShardMode::replicated),
      mutant<SyncBeforeLastMicroBatch>("B12", "data-parallel sync on the wrong micro-batch",
                                       "FunASR PR 3472; DeepSpeed PR 7985", ShardMode::replicated),
      mutant<SyncFirstWindowOnly>("B20", "data-parallel sync skipped after the first window",
                                  "pytorch/pytorch PR 187732; accelerate 3679", ShardMode::replicated),
      mutant<NormReducedTwice>("B21", "global norm reduced twice", "modelscope/twinkle PR 290",
                               ShardMode::replicated),
      mutant<NoSyncOnStep>("B22", "no_sync on one pass only: no sync on the step micro-batch",
                           "karpathy/build-nanogpt PR 30; ClassyVision PR 706", ShardMode::replicated),
      mutant<ShardStepsUnreduced>("B23", "shard steps with its unreduced local gradient",
                                  "inference from B12 under sharding", ShardMode::sharded),
  };
  return all;
}

}  // namespace gradeq
