// communicator.cpp — the one-rank communicator and shard geometry.
#include "kernels/communicator.h"

#include <stdexcept>

namespace gradeq {

long shard_size(const Tensor& t, int ranks) {
  if (ranks < 1) throw std::invalid_argument("shard_size: ranks must be at least 1");
  if (t.size() % ranks != 0)
    throw std::invalid_argument("a tensor of " + std::to_string(t.rows) + " x " + std::to_string(t.cols) + " = " +
                                std::to_string(t.size()) + " elements cannot be sharded over " +
                                std::to_string(ranks) + " ranks");
  return t.size() / ranks;
}

std::vector<float> host_values(Backend& backend, const Tensor& t) {
  std::vector<float> host(static_cast<std::size_t>(t.size()));
  backend.download(t, host);
  return host;
}

void require_shard(const Tensor& full, const Tensor& shard, int ranks, const char* op) {
  if (shard.size() != shard_size(full, ranks))
    throw std::invalid_argument(std::string(op) + ": a shard of " + std::to_string(full.size()) + " elements over " +
                                std::to_string(ranks) + " ranks has " + std::to_string(full.size() / ranks) +
                                ", not " + std::to_string(shard.size()));
}

void LocalCommunicator::all_reduce_sum(Backend&, std::span<const Tensor> ts) {
  for (const Tensor& t : ts) bytes_reduced_ += 4 * static_cast<std::uint64_t>(t.size());
}

void LocalCommunicator::reduce_scatter_sum(Backend& backend, const Tensor& full, const Tensor& shard) {
  require_shard(full, shard, 1, "reduce_scatter_sum");
  bytes_reduced_ += 4 * static_cast<std::uint64_t>(full.size());
  backend.upload(shard, host_values(backend, full));
}

void LocalCommunicator::all_gather(Backend& backend, const Tensor& shard, const Tensor& full) {
  require_shard(full, shard, 1, "all_gather");
  backend.upload(full, host_values(backend, shard));
}

}  // namespace gradeq
