// copy_columns.cu — the CUDA backend's copy_columns (kernels/backend_ops.def):
// a block of columns, every row, rounded to the destination's dtype.
#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

// One thread per copied element: row i / count, column i % count.
__global__ void copy_columns_kernel(const void* src, DType ts, long src_cols, long src_first, void* dst, DType td,
                                    long dst_cols, long dst_first, long rows, long count) {
  const long n = rows * count;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long r = i / count, c = i % count;
    store(dst, td, r * dst_cols + dst_first + c, load(src, ts, r * src_cols + src_first + c));
  }
}

}  // namespace

void CudaBackend::copy_columns(const Tensor& src, long src_first, const Tensor& dst, long dst_first, long count) {
  require_column_ranges(src, src_first, dst, dst_first, count);
  const long n = src.rows * count;
  if (n == 0) return;
  copy_columns_kernel<<<blocks_for(n), kThreads>>>(src.data, src.dtype, src.cols, src_first, dst.data, dst.dtype,
                                                   dst.cols, dst_first, src.rows, count);
  GRADEQ_LAUNCH_CHECK();
}

}  // namespace gradeq
