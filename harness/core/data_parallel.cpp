// data_parallel.cpp — the data-parallel loop and its runs (its mutants are in
// data_parallel_mutants.cpp).
#include "harness/core/data_parallel.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace gradeq {
namespace {

std::uint64_t fnv1a(const std::vector<double>& values) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (double v : values) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    for (int i = 0; i < 8; ++i) {
      h ^= (bits >> (8 * i)) & 0xffU;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

}  // namespace

std::vector<float> shard_of(const std::vector<float>& full, int rank, long shard) {
  const auto first = full.begin() + static_cast<long>(rank) * shard;
  return std::vector<float>(first, first + shard);
}

std::string shard_mode_name(ShardMode m) { return m == ShardMode::replicated ? "replicated" : "sharded"; }

ScenarioSpec data_parallel_spec(const ScenarioSpec& base, int ranks, ShardMode mode) {
  if (ranks < 1) throw std::invalid_argument("data parallelism needs at least 1 rank");
  ScenarioSpec spec = base;
  spec.split.clear();
  for (const std::vector<long>& own : base.split) {
    std::vector<long> window;
    for (int r = 0; r < ranks; ++r)
      for (std::size_t b = 0; b < own.size(); ++b) window.push_back(own[b] + (b == 0 ? r : 0));
    spec.split.push_back(std::move(window));
  }
  spec.procedure.ranks = ranks;
  spec.procedure.sharded = mode == ShardMode::sharded;
  return spec;
}

void require_data_parallel(const ScenarioSpec& spec, int ranks, ShardMode mode) {
  const std::string where = "scenario " + spec.name + " on " + std::to_string(ranks) + " ranks: ";
  if (spec.procedure.compensated)
    throw std::invalid_argument(where + "Kahan-compensated accumulation keeps a compensation per rank that an "
                                        "all-reduce would drop; data-parallel runs do not support it");
  if (ref::has_batch_norm(spec.model))
    throw std::invalid_argument(where + "BatchNorm's running statistics under data parallelism (each rank's own, or "
                                        "rank 0's broadcast as DDP's broadcast_buffers does) are not modelled; "
                                        "data-parallel runs refuse BatchNorm (GroupNorm, LayerNorm and RMSNorm run)");
  if (mode != ShardMode::sharded) return;
  for (const ref::ParameterInfo& p : ref::parameter_layout(spec.model)) {
    if ((p.rows * p.cols) % ranks == 0) continue;
    throw std::invalid_argument(where + "cannot shard " + p.name + " (" + std::to_string(p.rows) + " x " +
                                std::to_string(p.cols) + " = " + std::to_string(p.rows * p.cols) +
                                " elements) into " + std::to_string(ranks) +
                                " equal shards; run on a number of ranks that divides every tensor's size");
  }
}

// ---- the loop

void DataParallelLoop::allocated() {
  if (mode_ != ShardMode::sharded) return;
  const std::size_t n = params_.size();
  for (auto* list : {&grad_shards_, &param_shards_}) list->assign(n, Tensor{});
  first_moment_shards_.assign(first_moment_.size(), Tensor{});
  second_moment_shards_.assign(second_moment_.size(), Tensor{});
  for (std::size_t p = 0; p < n; ++p) {
    const long shard = shard_size(params_[p], comm_.size());
    own(grad_shards_[p], 1, shard, grads_[p].dtype, MemoryCategory::gradients);
    own(param_shards_[p], 1, shard, DType::f32, MemoryCategory::parameters);
    if (!first_moment_shards_.empty()) own(first_moment_shards_[p], 1, shard, DType::f32, MemoryCategory::optimizer_state);
    if (!second_moment_shards_.empty()) own(second_moment_shards_[p], 1, shard, DType::f32, MemoryCategory::optimizer_state);
    backend_.upload(param_shards_[p], shard_of(host_values(backend_, params_[p]), comm_.rank(), shard));
  }
  backend_.zero(first_moment_shards_);
  backend_.zero(second_moment_shards_);
}

void DataParallelLoop::run_window(const ref::Batch& window, const std::vector<long>& micro_batches) {
  const auto ranks = static_cast<std::size_t>(comm_.size());
  if (micro_batches.size() % ranks != 0)
    throw std::invalid_argument("a window of " + std::to_string(micro_batches.size()) +
                                " micro-batches cannot be shared by " + std::to_string(ranks) + " ranks");
  local_micro_batches_ = micro_batches.size() / ranks;
  zero_gradients();
  refresh_compute_weights();
  const std::vector<std::pair<long, long>> all = micro_batch_ranges(micro_batches);
  record_fed(window.samples(), all);  // the ranks together feed the whole window
  const auto first = all.begin() + static_cast<long>(comm_.rank() * local_micro_batches_);
  const std::vector<std::pair<long, long>> mine(first, first + static_cast<long>(local_micro_batches_));
  const std::vector<float> scales = loss_scales(window, mine);
  const std::size_t sync = sync_after(local_micro_batches_);
  double local_loss = 0.0;
  for (std::size_t b = 0; b < mine.size(); ++b) {
    if (b == sync) synchronize_gradients();
    micro_batch_index_ = b;
    local_loss += micro_batch(ref::micro_batch_of(window, mine[b].first, mine[b].second, procedure()), scales[b]);
  }
  if (sync >= mine.size()) synchronize_gradients();
  window_loss_ = comm_.all_reduce_sum(local_loss);
  finish_window();
}

std::vector<float> DataParallelLoop::loss_scales(const ref::Batch& window,
                                                 const std::vector<std::pair<long, long>>& ranges) {
  const ref::LossKind loss = scenario_->spec.model.loss;
  std::vector<long> items;
  long local_items = 0;
  for (const auto& [first, count] : ranges) {
    items.push_back(window.slice(first, count).items(loss));
    local_items += items.back();
  }
  const bool global = procedure().normalization == ref::Normalization::global_count;
  const long global_items = global ? comm_.all_reduce_sum(local_items) : 0;
  const long micro_batches = global ? 0 : comm_.all_reduce_sum(static_cast<long>(ranges.size()));
  std::vector<float> scales;
  for (long n : items) {
    const double normalizer = global ? static_cast<double>(global_items)
                                     : static_cast<double>(micro_batches) * static_cast<double>(n);
    scales.push_back(static_cast<float>((normalizer > 0.0 ? 1.0 / normalizer : 0.0) * loss_scale_));
  }
  return scales;
}

std::size_t DataParallelLoop::sync_after(std::size_t local) { return local; }

void DataParallelLoop::synchronize_gradients() {
  if (mode_ == ShardMode::replicated) {
    comm_.all_reduce_sum(backend_, grads_);
    return;
  }
  for (std::size_t p = 0; p < grads_.size(); ++p) comm_.reduce_scatter_sum(backend_, grads_[p], grad_shards_[p]);
}

bool DataParallelLoop::gradients_finite() {
  if (mode_ == ShardMode::replicated) return TrainingLoop::gradients_finite();
  // Sharded: the loop's tensors are this rank's shards (finish_window).
  return comm_.all_reduce_sum(static_cast<long>(!backend_.all_finite(trained(grads_)))) == 0;
}

void DataParallelLoop::keep_unclipped_gradients() {
  if (mode_ == ShardMode::replicated) {
    TrainingLoop::keep_unclipped_gradients();
    return;
  }
  // Inside the sharded step (finish_window) grads_ holds this rank's
  // shards and grad_shards_ the whole buffers: gather the shards there,
  // keep them, and gather_for_record() refills them after the step.
  std::swap(grads_, grad_shards_);
  for (std::size_t p = 0; p < grads_.size(); ++p) comm_.all_gather(backend_, grad_shards_[p], grads_[p]);
  TrainingLoop::keep_unclipped_gradients();
  std::swap(grads_, grad_shards_);
}

float DataParallelLoop::gradient_norm() {
  if (mode_ == ShardMode::replicated) return TrainingLoop::gradient_norm();
  // The shards' float32 norms, combined once: sqrt of the sum of squares.
  const double local = backend_.global_norm(trained(grads_));
  return static_cast<float>(std::sqrt(comm_.all_reduce_sum(local * local)));
}

void DataParallelLoop::finish_window() {
  if (mode_ == ShardMode::replicated) {
    TrainingLoop::finish_window();
    return;
  }
  // While the step runs, the loop's gradients, parameters and optimizer
  // state are this rank's shards: unscale, overflow check, clip and the
  // optimizer step then touch 1/W of every tensor.
  const auto swap_in = [&] {
    std::swap(grads_, grad_shards_);
    std::swap(params_, param_shards_);
    std::swap(first_moment_, first_moment_shards_);
    std::swap(second_moment_, second_moment_shards_);
  };
  swap_in();
  TrainingLoop::finish_window();
  swap_in();
  gather_for_record();
}

// The parameters are all-gathered (every rank needs them for the next
// window); gradients and optimizer state only so that the run records whole
// tensors.
void DataParallelLoop::gather_for_record() {
  for (std::size_t p = 0; p < params_.size(); ++p) {
    comm_.all_gather(backend_, param_shards_[p], params_[p]);
    comm_.all_gather(backend_, grad_shards_[p], grads_[p]);
    if (!first_moment_.empty()) comm_.all_gather(backend_, first_moment_shards_[p], first_moment_[p]);
    if (!second_moment_.empty()) comm_.all_gather(backend_, second_moment_shards_[p], second_moment_[p]);
  }
}

LoopFactory data_parallel_loop(Communicator& comm, ShardMode mode) {
  return [&comm, mode](Backend& b) { return std::make_unique<DataParallelLoop>(b, comm, mode); };
}

// ---- runs

Runs execute_data_parallel(const Scenario& scenario, Backend& backend, Communicator& comm, const LoopFactory& loop,
                           const ErrorModel& model) {
  require_data_parallel(scenario.spec, comm.size(),
                        scenario.spec.procedure.sharded ? ShardMode::sharded : ShardMode::replicated);
  if (scenario.spec.procedure.ranks != comm.size())
    throw std::invalid_argument("scenario " + scenario.spec.name + " is laid out for " +
                                std::to_string(scenario.spec.procedure.ranks) + " ranks, and " +
                                std::to_string(comm.size()) + " run it");
  Runs runs;
  runs.k_acc = loop(backend)->run(scenario, scenario.spec.split);
  if (comm.rank() == 0) {
    runs.k_full = correct_loop()(backend)->run(scenario, full_batch_split(scenario.spec.split));
    add_reference_runs(scenario, runs, model);
  }
  return runs;
}

std::string rank_difference(const KernelRun& run, Communicator& comm) {
  for (std::size_t w = 0; w < run.windows.size(); ++w) {
    for (const RunTensor& t : run.windows[w].tensors) {
      const std::vector<std::uint64_t> all = comm.all_gather(fnv1a(t.values));
      for (std::size_t r = 1; r < all.size(); ++r)
        if (all[r] != all[0])
          return "window " + std::to_string(w) + ", " + t.name + ": rank " + std::to_string(r) +
                 " differs from rank 0";
    }
  }
  return "";
}

}  // namespace gradeq
