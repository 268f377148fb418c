// mpi_fault — a data-parallel run in which rank 1 fails in the middle of its
// second window: `exit` ends its process, `hang` stops it forever. Run under
// `mpirun -np W` (W >= 2); the job must end with a non-zero status and a
// message, never hang (tests/mpi_data_parallel.sh times it).
//
//   mpi_fault exit|hang TIMEOUT_SECONDS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "harness/core/data_parallel.h"
#include "harness/core/suite.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/mpi/mpi_communicator.h"

namespace {

using namespace gradeq;

class FailingRank final : public DataParallelLoop {
 public:
  FailingRank(Backend& b, Communicator& c, bool hang) : DataParallelLoop(b, c, ShardMode::replicated), hang_(hang) {}

 protected:
  double micro_batch(const ref::Batch& mb, float scale) override {
    if (window_ == 1 && comm_.rank() == 1) {
      if (!hang_) std::_Exit(7);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    return DataParallelLoop::micro_batch(mb, scale);
  }

 private:
  bool hang_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::string(argv[1]) != "exit" && std::string(argv[1]) != "hang")) {
    std::fprintf(stderr, "usage: mpi_fault exit|hang TIMEOUT_SECONDS\n");
    return 2;
  }
  const bool hang = std::string(argv[1]) == "hang";
  MpiCommunicator comm(std::atof(argv[2]));
  const Scenario scenario =
      materialize(data_parallel_spec(data_parallel_scenarios().front(), comm.size(), ShardMode::replicated));
  CpuBackend backend;
  const LoopFactory loop = [&](Backend& b) { return std::make_unique<FailingRank>(b, comm, hang); };
  execute_data_parallel(scenario, backend, comm, loop, ErrorModel{});
  std::printf("rank %d: the run finished although rank 1 failed\n", comm.rank());
  return 0;
}
