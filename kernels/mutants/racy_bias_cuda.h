// racy_bias_cuda.h — B19's real race on the CUDA backend (built with it).
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace gradeq {

// A CUDA backend whose bias gradient is summed by several blocks per column
// with plain read-modify-writes into db: concurrent updates are lost.
std::unique_ptr<Backend> make_racy_bias_cuda_backend();

}  // namespace gradeq
