// copy_columns.cpp — the host backend's copy_columns (kernels/backend_ops.def):
// a block of columns, every row, rounded to the destination's dtype.
#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"

namespace gradeq {

using namespace cpu;

void CpuBackend::copy_columns(const Tensor& src, long src_first, const Tensor& dst, long dst_first, long count) {
  require_column_ranges(src, src_first, dst, dst_first, count);
  const float* s = values(src);
  float* d = values(dst);
  dispatch(dst.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long r = 0; r < src.rows; ++r)
      for (long c = 0; c < count; ++c) d[r * dst.cols + dst_first + c] = store<D>(s[r * src.cols + src_first + c]);
  });
}

}  // namespace gradeq
