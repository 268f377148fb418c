// Data parallelism on one process: the layout of W ranks' micro-batches,
// what cannot run data-parallel, the reference's rank and shard structure,
// and the data-parallel loop on one rank (which must be the single-process
// loop bit for bit). The runs across ranks are tests/mpi_data_parallel.sh
// (label mpi).
#include <stdexcept>
#include <string>

#include "harness/core/data_parallel.h"
#include "harness/core/data_parallel_mutants.h"
#include "harness/core/ops/registry.h"
#include "harness/core/reference_run.h"
#include "harness/core/suite.h"
#include "kernels/communicator.h"
#include "kernels/cpu/cpu_backend.h"
#include "support.h"

namespace gradeq::test {
namespace {

void expect_throws_with(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying '" << fragment << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(DataParallelSpec, RanksTakeTheirOwnMicroBatchesWithDifferentCounts) {
  ScenarioSpec base = data_parallel_scenarios().front();
  base.split = {{2, 1, 2}, {1, 1, 1}};
  const ScenarioSpec spec = data_parallel_spec(base, 3, ShardMode::sharded);
  EXPECT_EQ(describe_split(spec.split), "[2,1,2,3,1,2,4,1,2] [1,1,1,2,1,1,3,1,1]");
  EXPECT_EQ(spec.procedure.ranks, 3);
  EXPECT_TRUE(spec.procedure.sharded);
  EXPECT_FALSE(data_parallel_spec(base, 2, ShardMode::replicated).procedure.sharded);
}

TEST(DataParallelSpec, WhatCannotRunDataParallelIsRefusedWithTheReason) {
  const ScenarioSpec base = data_parallel_scenarios().front();  // every tensor a multiple of 12 elements
  for (int ranks : {1, 2, 3, 4})
    EXPECT_NO_THROW(require_data_parallel(data_parallel_spec(base, ranks, ShardMode::sharded), ranks, ShardMode::sharded));
  expect_throws_with([&] { require_data_parallel(data_parallel_spec(base, 5, ShardMode::sharded), 5, ShardMode::sharded); },
                     "cannot shard layer0.weight");
  EXPECT_NO_THROW(require_data_parallel(data_parallel_spec(base, 5, ShardMode::replicated), 5, ShardMode::replicated));
  ScenarioSpec kahan = base;
  kahan.procedure.compensated = true;
  expect_throws_with([&] { require_data_parallel(kahan, 2, ShardMode::replicated); }, "Kahan");
  ScenarioSpec batch_norm = base;
  batch_norm.model.layers.insert(batch_norm.model.layers.begin() + 1, layer_of("batchnorm"));
  expect_throws_with([&] { require_data_parallel(batch_norm, 2, ShardMode::replicated); }, "refuse BatchNorm");
}

TEST(Communicator, ShardsAreConsecutiveEqualParts) {
  const Tensor t{nullptr, 3, 8, DType::f32};
  EXPECT_EQ(shard_size(t, 4), 6);
  expect_throws_with([&] { shard_size(t, 5); }, "cannot be sharded over 5 ranks");
  CpuBackend backend;
  Tensor full = backend.allocate(2, 3, DType::f32), shard = backend.allocate(1, 6, DType::f32);
  backend.upload(full, std::vector<float>{1, 2, 3, 4, 5, 6});
  LocalCommunicator one;
  one.reduce_scatter_sum(backend, full, shard);
  EXPECT_EQ(host_values(backend, shard), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  backend.fill(full, 0.0f);
  one.all_gather(backend, shard, full);
  EXPECT_EQ(host_values(backend, full), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(one.bytes_reduced(), 24u);
  backend.release(full);
  backend.release(shard);
}

// The reference's data-parallel procedure: the ranks' buffers summed once.
// In float64 it is the single-process sum up to float64 rounding; a window
// of one micro-batch is the single process whatever the ranks; a window the
// ranks cannot share is refused.
TEST(DataParallelReference, RanksRegroupTheSumAndNothingElse) {
  const ScenarioSpec base = data_parallel_scenarios().front();
  for (ShardMode mode : {ShardMode::replicated, ShardMode::sharded}) {
    const ScenarioSpec spec = data_parallel_spec(base, 3, mode);
    const Scenario scenario = materialize(spec);
    ScenarioSpec single_spec = spec;
    single_spec.procedure.ranks = 1;
    single_spec.procedure.sharded = false;
    const Scenario single = materialize(single_spec);
    ErrorModel model;
    const ReferenceRun ranks = run_reference(scenario, spec.split, model);
    const ReferenceRun one = run_reference(single, spec.split, model);
    ASSERT_EQ(ranks.windows.size(), one.windows.size());
    for (std::size_t w = 0; w < ranks.windows.size(); ++w)
      for (const ReferenceTensor& t : ranks.windows[w].tensors) {
        const ReferenceTensor& u = find_tensor(one.windows[w], t.name);
        for (std::size_t i = 0; i < t.value.size(); ++i)
          EXPECT_LE(std::abs(t.value[i] - u.value[i]), t.reference_bound[i] + u.reference_bound[i])
              << shard_mode_name(mode) << " window " << w << " " << t.name << "[" << i << "]";
      }
    // The full batch is one process: identical bit for bit.
    const ReferenceRun full_ranks = run_reference(scenario, full_batch_split(spec.split), model);
    const ReferenceRun full_one = run_reference(single, full_batch_split(spec.split), model);
    for (std::size_t w = 0; w < full_ranks.windows.size(); ++w)
      for (const ReferenceTensor& t : full_ranks.windows[w].tensors) {
        EXPECT_EQ(t.value, find_tensor(full_one.windows[w], t.name).value) << t.name;
        EXPECT_EQ(t.kernel_bound, find_tensor(full_one.windows[w], t.name).kernel_bound) << t.name;
      }
  }
  const ScenarioSpec uneven = data_parallel_spec(base, 3, ShardMode::replicated);
  ScenarioSpec wrong = uneven;
  wrong.procedure.ranks = 4;  // 9 micro-batches a window: not shared by 4 ranks
  expect_throws_with([&] { run_reference(materialize(wrong), wrong.split, ErrorModel{}); },
                     "cannot be shared by 4 ranks");
}

TEST(DataParallelReference, ShardedNormIsTheGlobalNorm) {
  ref::Tensors<double> g = {ref::Matrix<double>::Random(4, 6), ref::Matrix<double>::Random(1, 6)};
  const double whole = ref::global_norm(g), sharded = ref::global_norm(g, 3);
  EXPECT_NEAR(whole, sharded, 1e-15 * whole);
  // With bounds: the sharded combination is bounded as what it is (shard
  // norms rounded, squared, summed), so its bound is not below the plain one.
  ref::Tensors<ref::Bounded> b;
  for (const auto& m : g) b.push_back(ref::lift<ref::Bounded>(m));
  EXPECT_GE(ref::global_norm(b, 3).kernel_bound, ref::global_norm(b).kernel_bound);
}

// One rank: the data-parallel loop is the single-process loop, bit for bit,
// replicated and sharded (the all-reduce and the shards are identities, and
// sqrt of a float's exact square is the float).
TEST(DataParallelLoop, OneRankIsTheSingleProcessLoopBitForBit) {
  CpuBackend backend;
  LocalCommunicator one;
  for (const ScenarioSpec& base : data_parallel_scenarios())
    for (ShardMode mode : {ShardMode::replicated, ShardMode::sharded}) {
      const Scenario scenario = materialize(data_parallel_spec(base, 1, mode));
      const KernelRun dp = data_parallel_loop(one, mode)(backend)->run(scenario, scenario.spec.split);
      const KernelRun plain = correct_loop()(backend)->run(scenario, scenario.spec.split);
      ASSERT_EQ(dp.windows.size(), plain.windows.size());
      ASSERT_GE(plain.windows.size(), 2u);
      for (std::size_t w = 0; w < dp.windows.size(); ++w)
        for (const RunTensor& t : plain.windows[w].tensors)
          EXPECT_EQ(find_tensor(dp.windows[w], t.name).values, t.values)
              << base.name << " " << shard_mode_name(mode) << " window " << w << " " << t.name;
      EXPECT_TRUE(rank_difference(dp, one).empty());
    }
}

// On one rank every data-parallel mutant computes what correct code does
// (their bugs live between ranks): why the data-parallel self-test refuses
// to run on fewer than 2 ranks.
TEST(DataParallelLoop, MutantsAreHarmlessOnOneRank) {
  CpuBackend backend;
  LocalCommunicator one;
  for (const DataParallelMutant& m : data_parallel_mutants()) {
    const Scenario scenario = materialize(data_parallel_spec(data_parallel_scenarios().front(), 1, m.mode));
    const KernelRun plain = correct_loop()(backend)->run(scenario, scenario.spec.split);
    const KernelRun run = m.make(backend, one)->run(scenario, scenario.spec.split);
    for (std::size_t w = 0; w < plain.windows.size(); ++w)
      for (const RunTensor& t : plain.windows[w].tensors)
        EXPECT_EQ(find_tensor(run.windows[w], t.name).values, t.values) << m.id << " window " << w << " " << t.name;
  }
}

}  // namespace
}  // namespace gradeq::test
