// embedding.cpp — the host backend's embedding_forward and embedding_backward
// (kernels/backend_ops.def): a row gather, and its backward, each row of dy
// added into its token's row of dw in row order (one fixed order).
#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"

namespace gradeq {

using namespace cpu;

void CpuBackend::embedding_forward(const Tensor& ids, const Tensor& w, const Tensor& y) {
  require_embedding_shapes(ids, w, y, "embedding_forward");
  const float* id = values(ids);
  const float* table = values(w);
  float* out = values(y);
  const long width = y.cols;
  dispatch(y.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long r = 0; r < y.rows; ++r) {
      const long v = static_cast<long>(id[r]);
      GRADEQ_REQUIRE(v >= 0 && v < w.rows, "embedding_forward: token id out of range");
      for (long c = 0; c < width; ++c) out[r * width + c] = store<D>(table[v * width + c]);
    }
  });
}

void CpuBackend::embedding_backward(const Tensor& ids, const Tensor& dy, long padding_idx, const Tensor& dw) {
  require_embedding_shapes(ids, dw, dy, "embedding_backward");
  GRADEQ_REQUIRE(dw.dtype == DType::f32, "embedding_backward: the gradient buffer is float32");
  const float* id = values(ids);
  const float* g = values(dy);
  float* out = values(dw);
  const long width = dy.cols;
  for (long r = 0; r < dy.rows; ++r) {
    const long v = static_cast<long>(id[r]);
    GRADEQ_REQUIRE(v >= 0 && v < dw.rows, "embedding_backward: token id out of range");
    if (v == padding_idx) continue;
    for (long c = 0; c < width; ++c) out[v * width + c] += g[r * width + c];
  }
}

}  // namespace gradeq
