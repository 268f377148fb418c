// racy_bias_cuda.cu — B19 on the CUDA backend: unsynchronized concurrent
// accumulate. The bias gradient is summed by several blocks per column,
// each adding its partial sum into db with a plain (non-atomic)
// read-modify-write; updates are lost at random (a kernel-level race;
// docs/BUGS.md). A mutant: never used for anything but the self-test.
#include "kernels/mutants/racy_bias_cuda.h"

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

__global__ void racy_column_sum(const void* dy, DType t, long rows, long cols, void* db, DType tdb, long slices) {
  const float s = slice_column_sum(dy, t, rows, cols, blockIdx.x, blockIdx.y, slices);
  if (threadIdx.x == 0) store(db, tdb, blockIdx.x, load(db, tdb, blockIdx.x) + s);  // the race: no atomic, no ordering
}

class RacyBiasBackend : public CudaBackend {
 protected:
  void bias_gradient(const Tensor& dy, const Tensor& db) override {
    // One slice per row (up to 64): many blocks race on each column.
    const long slices = std::min(dy.rows, 64L);
    if (slices == 0) return;
    racy_column_sum<<<dim3(static_cast<unsigned>(dy.cols), static_cast<unsigned>(slices)), kThreads>>>(
        dy.data, dy.dtype, dy.rows, dy.cols, db.data, db.dtype, slices);
    GRADEQ_LAUNCH_CHECK();
  }
};

}  // namespace

std::unique_ptr<Backend> make_racy_bias_cuda_backend() { return std::make_unique<RacyBiasBackend>(); }

}  // namespace gradeq
