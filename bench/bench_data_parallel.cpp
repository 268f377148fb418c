// bench_data_parallel.cpp — what no_sync saves: bytes all-reduced and time
// per window when the gradient is synchronized once, after the N-th
// micro-batch (no_sync on the others), against an all-reduce after every
// micro-batch (N times the bytes). Run under MPI:
//
//   mpirun -np 2 build/gradeq_bench_data_parallel
//
// Both loops are first judged on rank 0 against the reference (the
// data-parallel verdicts of harness/core/equivalence.h); a loop that fails is not
// timed. Every rank runs the same fixed number of iterations (collectives
// must match); rank 0 reports. Counters per window: bytes_reduced (float32
// payload this rank put into all-reduces), bytes_vs_no_sync (that over
// no_sync's), micro_batches.
#include <unistd.h>

#include <cstdio>
#include <memory>

#include <benchmark/benchmark.h>

#include "harness/core/data_parallel.h"
#include "harness/core/ops/registry.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/mpi/mpi_communicator.h"

namespace {

using namespace gradeq;

// DDP without no_sync: each micro-batch's gradient is all-reduced as soon
// as its backward ends, then added to the buffer.
class SyncEveryMicroBatch final : public DataParallelLoop {
 public:
  SyncEveryMicroBatch(Backend& b, Communicator& c) : DataParallelLoop(b, c, ShardMode::replicated) {}

 protected:
  void allocated() override {
    one_.assign(grads_.size(), Tensor{});
    for (std::size_t p = 0; p < grads_.size(); ++p) own(one_[p], grads_[p].rows, grads_[p].cols, DType::f32, MemoryCategory::gradients);
  }
  double micro_batch(const ref::Batch& mb, float scale) override {
    backend_.zero(one_);
    const double loss = forward_loss_backward(mb, scale, one_);
    comm_.all_reduce_sum(backend_, one_);
    backend_.accumulate(grads_, one_, {});
    return loss;
  }
  void synchronize_gradients() override {}

 private:
  std::vector<Tensor> one_;
};

// An MLP block at a width where the all-reduce matters: in(256) - linear(1024)
// - gelu - linear(256), 8 micro-batches of 4 samples a rank, one window.
ScenarioSpec block(int ranks) {
  ScenarioSpec s;
  s.name = "bench_block";
  s.model.input_features = 256;
  s.model.layers = {layer_of("linear", 1024), layer_of("gelu"), layer_of("linear", 256)};
  s.model.loss = ref::LossKind::mse;
  s.split = {std::vector<long>(8, 4)};
  s.procedure.optimizer.kind = ref::OptimizerKind::adamw;
  s.procedure.optimizer.lr = 1e-3;
  s.seed = 5;
  return data_parallel_spec(s, ranks, ShardMode::replicated);
}

MpiCommunicator* comm = nullptr;

LoopFactory loop_of(bool every) {
  if (!every) return data_parallel_loop(*comm, ShardMode::replicated);
  return [](Backend& b) { return std::make_unique<SyncEveryMicroBatch>(b, *comm); };
}

// Judged once before timing: exit 1 on every rank if rank 0 finds a failure.
void validate(const Scenario& scenario, Backend& backend) {
  for (bool every : {false, true}) {
    const Runs runs = execute_data_parallel(scenario, backend, *comm, loop_of(every), ErrorModel{});
    int ok = 1;
    if (comm->rank() == 0) {
      const ScenarioResult r = judge(scenario, runs);
      ok = r.passed();
      if (!ok) std::fprintf(stderr, "%s does not pass: %s\n", every ? "sync every micro-batch" : "no_sync",
                            r.first_failure().c_str());
    }
    if (!comm->broadcast(ok)) comm->abort(1);
  }
}

void BM_Window(benchmark::State& state, bool every) {
  static CpuBackend backend;
  static const Scenario scenario = materialize(block(comm->size()));
  const std::uint64_t before = comm->bytes_reduced();
  for (auto _ : state) {
    const KernelRun run = loop_of(every)(backend)->run(scenario, scenario.spec.split);
    benchmark::DoNotOptimize(run.windows.data());
  }
  const double windows = static_cast<double>(state.iterations());
  const double bytes = static_cast<double>(comm->bytes_reduced() - before) / windows;
  state.counters["bytes_reduced"] = bytes;
  state.counters["micro_batches"] = static_cast<double>(scenario.spec.split.front().size()) / comm->size();
  static double no_sync_bytes = 0.0;
  if (!every) no_sync_bytes = bytes;
  state.counters["bytes_vs_no_sync"] = no_sync_bytes > 0.0 ? bytes / no_sync_bytes : 0.0;
  state.SetLabel(comm->size() == 1 ? "1 rank" : std::to_string(comm->size()) + " ranks");
}

class Silent final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

BENCHMARK_CAPTURE(BM_Window, no_sync, false)->Iterations(20)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Window, sync_every_micro_batch, true)->Iterations(20)->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  MpiCommunicator mpi(300.0);
  comm = &mpi;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  {
    CpuBackend backend;
    validate(materialize(block(mpi.size())), backend);
  }
  if (mpi.rank() == 0) {
    benchmark::ConsoleReporter console(isatty(STDOUT_FILENO) == 1 ? benchmark::ConsoleReporter::OO_ColorTabular
                                                                  : benchmark::ConsoleReporter::OO_Tabular);
    benchmark::RunSpecifiedBenchmarks(&console);
  } else {
    Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  return 0;
}
