// communicator.h — the seam between ranks: the collectives a data-parallel
// training step uses, on backend tensors, and nothing else.
//
// Every rank calls the same collectives in the same order with tensors of
// the same shapes. Sums are float32 additions over ranks (in whatever order
// the implementation takes) and every rank receives the same result; the
// result is stored rounded to the destination's dtype. A shard is the
// consecutive 1/size() of a tensor's elements that a rank owns: rank r's is
// elements [r n / W, (r + 1) n / W) of an n-element tensor, held as a
// [1, n / W] tensor.
//
// Implementations: LocalCommunicator (one rank, no messages) here; MPI in
// kernels/mpi/ (built where MPI is found). A collective that does not
// complete within the communicator's timeout ends the process with a
// message, so a rank that died or hangs never leaves the others waiting.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace gradeq {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // ---- on backend tensors
  // Each tensor becomes the sum over ranks of that tensor.
  virtual void all_reduce_sum(Backend& backend, std::span<const Tensor> ts) = 0;
  // shard (this rank's shard of full's shape) = the sum over ranks of full's shard.
  virtual void reduce_scatter_sum(Backend& backend, const Tensor& full, const Tensor& shard) = 0;
  // full = every rank's shard, in rank order.
  virtual void all_gather(Backend& backend, const Tensor& shard, const Tensor& full) = 0;

  // ---- on host values
  virtual long all_reduce_sum(long value) = 0;
  virtual double all_reduce_sum(double value) = 0;  // float64 additions
  // Every rank's value, in rank order, on every rank.
  virtual std::vector<std::uint64_t> all_gather(std::uint64_t value) = 0;
  // Rank 0's value on every rank.
  virtual int broadcast(int value) = 0;
  // Ends every rank's process with exit status `code`, from any one rank
  // (an error that the other ranks, waiting in a collective, cannot see).
  // One rank: does nothing; the caller returns the code.
  virtual void abort(int code) = 0;

  // Payload bytes this rank has sent into sums (all_reduce_sum and
  // reduce_scatter_sum of tensors, counted as float32 values).
  std::uint64_t bytes_reduced() const { return bytes_reduced_; }

 protected:
  std::uint64_t bytes_reduced_ = 0;
};

// One rank: every collective is the identity.
class LocalCommunicator final : public Communicator {
 public:
  std::string name() const override { return "local"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(Backend&, std::span<const Tensor> ts) override;
  void reduce_scatter_sum(Backend& backend, const Tensor& full, const Tensor& shard) override;
  void all_gather(Backend& backend, const Tensor& shard, const Tensor& full) override;
  long all_reduce_sum(long value) override { return value; }
  double all_reduce_sum(double value) override { return value; }
  std::vector<std::uint64_t> all_gather(std::uint64_t value) override { return {value}; }
  int broadcast(int value) override { return value; }
  void abort(int) override {}
};

// Shard geometry: the number of elements of each rank's shard of t; throws
// std::invalid_argument when t's elements do not divide among the ranks.
long shard_size(const Tensor& t, int ranks);
// std::invalid_argument unless shard has shard_size(full, ranks) elements.
void require_shard(const Tensor& full, const Tensor& shard, int ranks, const char* op);
// A tensor's values as float32 on the host.
std::vector<float> host_values(Backend& backend, const Tensor& t);

}  // namespace gradeq
