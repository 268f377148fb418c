// mpi_communicator.cpp — the Communicator on MPI, with a watchdog.
#include "kernels/mpi/mpi_communicator.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

namespace gradeq {
namespace {

void require(int status, const char* what) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw std::runtime_error(std::string("MPI ") + what + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

int count_of(long n) {
  if (n > 0x7fffffffL) throw std::invalid_argument("MPI: a tensor of more than 2^31 - 1 elements");
  return static_cast<int>(n);
}

// Waits for a non-blocking collective, sleeping between tests once it has
// not completed at once: ranks often wait while another computes (rank 0
// the references), and a busy wait would take the cores it needs (mpirun
// --oversubscribe puts several ranks on one core).
void wait_sleeping(MPI_Request& request, const char* what) {
  for (int polls = 0;; ++polls) {
    int done = 0;
    require(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    if (polls > 100) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

class MpiCommunicator::Collective {
 public:
  Collective(MpiCommunicator& c, const char* what) : c_(c) {
    std::lock_guard lock(c_.mutex_);
    c_.in_progress_ = what;
    c_.started_ = std::chrono::steady_clock::now();
  }
  ~Collective() {
    std::lock_guard lock(c_.mutex_);
    c_.in_progress_ = nullptr;
  }
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

 private:
  MpiCommunicator& c_;
};

bool MpiCommunicator::launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

MpiCommunicator::MpiCommunicator(double timeout_seconds) : timeout_seconds_(timeout_seconds) {
  if (!(timeout_seconds > 0.0)) throw std::invalid_argument("the collective timeout must be positive");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    require(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
  }
  // Errors come back as status codes (turned into exceptions), not aborts.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  watchdog_ = std::thread([this] { watch(); });
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  watchdog_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiCommunicator::watch() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(200));
    if (!in_progress_) continue;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    if (waited < timeout_seconds_) continue;
    std::fprintf(stderr,
                 "gradeq: rank %d of %d: %s did not complete within %.0f s (--timeout): another rank died, hangs or "
                 "runs different work; stopping\n",
                 rank_, size_, in_progress_, timeout_seconds_);
    std::fflush(stderr);
    std::_Exit(3);
  }
}

void MpiCommunicator::all_reduce_sum(Backend& backend, std::span<const Tensor> ts) {
  for (const Tensor& t : ts) {
    std::vector<float> host = host_values(backend, t);
    {
      Collective c(*this, "an all-reduce of a gradient");
      MPI_Request request;
      require(MPI_Iallreduce(MPI_IN_PLACE, host.data(), count_of(t.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                             &request),
              "all-reduce");
      wait_sleeping(request, "all-reduce");
    }
    bytes_reduced_ += 4 * static_cast<std::uint64_t>(t.size());
    backend.upload(t, host);
  }
}

void MpiCommunicator::reduce_scatter_sum(Backend& backend, const Tensor& full, const Tensor& shard) {
  require_shard(full, shard, size_, "reduce_scatter_sum");
  const std::vector<float> host = host_values(backend, full);
  std::vector<float> mine(static_cast<std::size_t>(shard.size()));
  {
    Collective c(*this, "a reduce-scatter of a gradient");
    MPI_Request request;
    require(MPI_Ireduce_scatter_block(host.data(), mine.data(), count_of(shard.size()), MPI_FLOAT, MPI_SUM,
                                      MPI_COMM_WORLD, &request),
            "reduce-scatter");
    wait_sleeping(request, "reduce-scatter");
  }
  bytes_reduced_ += 4 * static_cast<std::uint64_t>(full.size());
  backend.upload(shard, mine);
}

void MpiCommunicator::all_gather(Backend& backend, const Tensor& shard, const Tensor& full) {
  require_shard(full, shard, size_, "all_gather");
  const std::vector<float> mine = host_values(backend, shard);
  std::vector<float> host(static_cast<std::size_t>(full.size()));
  {
    Collective c(*this, "an all-gather of a tensor");
    MPI_Request request;
    require(MPI_Iallgather(mine.data(), count_of(shard.size()), MPI_FLOAT, host.data(), count_of(shard.size()),
                           MPI_FLOAT, MPI_COMM_WORLD, &request),
            "all-gather");
    wait_sleeping(request, "all-gather");
  }
  backend.upload(full, host);
}

long MpiCommunicator::all_reduce_sum(long value) {
  Collective c(*this, "an all-reduce of a count");
  long sum = 0;
  MPI_Request request;
  require(MPI_Iallreduce(&value, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &request), "all-reduce");
  wait_sleeping(request, "all-reduce");
  return sum;
}

double MpiCommunicator::all_reduce_sum(double value) {
  Collective c(*this, "an all-reduce of a norm or loss");
  double sum = 0.0;
  MPI_Request request;
  require(MPI_Iallreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &request), "all-reduce");
  wait_sleeping(request, "all-reduce");
  return sum;
}

std::vector<std::uint64_t> MpiCommunicator::all_gather(std::uint64_t value) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size_));
  Collective c(*this, "an all-gather of a check value");
  MPI_Request request;
  require(MPI_Iallgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD, &request),
          "all-gather");
  wait_sleeping(request, "all-gather");
  return all;
}

int MpiCommunicator::broadcast(int value) {
  Collective c(*this, "a broadcast");
  MPI_Request request;
  require(MPI_Ibcast(&value, 1, MPI_INT, 0, MPI_COMM_WORLD, &request), "broadcast");
  wait_sleeping(request, "broadcast");
  return value;
}

void MpiCommunicator::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; in case it does
}

}  // namespace gradeq
