// mpi_communicator.h — the Communicator on MPI (Open MPI from Debian, run
// as `mpirun -np W gradeq ...`). Tensors travel through host memory as
// float32 (the backend's download / upload); sums are MPI_SUM over
// MPI_FLOAT, whose result every rank receives.
//
// A watchdog thread ends the process (exit status 3, with a message on
// stderr) when a collective has not completed within the timeout: a rank
// that died or hangs then stops the job instead of leaving it waiting.
// mpirun ends the remaining ranks when one exits without finalizing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "kernels/communicator.h"

namespace gradeq {

class MpiCommunicator final : public Communicator {
 public:
  // Initializes MPI (finalized by the destructor). timeout_seconds > 0.
  explicit MpiCommunicator(double timeout_seconds);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(Backend& backend, std::span<const Tensor> ts) override;
  void reduce_scatter_sum(Backend& backend, const Tensor& full, const Tensor& shard) override;
  void all_gather(Backend& backend, const Tensor& shard, const Tensor& full) override;
  long all_reduce_sum(long value) override;
  double all_reduce_sum(double value) override;
  std::vector<std::uint64_t> all_gather(std::uint64_t value) override;
  int broadcast(int value) override;
  void abort(int code) override;

  // Whether this process was started by mpirun (Open MPI's or PMIx's
  // environment), so that MPI should be initialized.
  static bool launched_by_mpirun();

 private:
  class Collective;  // marks one collective in progress for the watchdog
  void watch();

  int rank_ = 0, size_ = 1;
  double timeout_seconds_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  const char* in_progress_ = nullptr;  // the collective running, or nullptr
  std::chrono::steady_clock::time_point started_;
  std::thread watchdog_;
};

}  // namespace gradeq
