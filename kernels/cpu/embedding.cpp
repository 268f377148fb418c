// embedding.cpp — the host backend's embedding_forward and embedding_backward
// (kernels/backend_ops.def): a row gather, and its backward, each row of dy
// added into its token's row of dw in row order (one fixed order).
#include <algorithm>

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

// A float32 buffer takes each row in row order. A narrower one gets each
// token's rows summed in float32 first, then one add into the buffer and
// one rounding to its dtype, as a GEMM with beta = 1 does: adding row by
// row into bfloat16 would drop increments once a row's sum nears 256.
void CpuBackend::embedding_backward(const Tensor& ids, const Tensor& dy, long padding_idx, const Tensor& dw) {
  require_embedding_shapes(ids, dw, dy, "embedding_backward");
  const float* id = values(ids);
  const float* g = values(dy);
  const long width = dy.cols;
  float* out = values(dw);
  float* sum = out;
  if (dw.dtype != DType::f32) {
    if (scratch_.size() < static_cast<std::size_t>(dw.size())) {
      scratch_.resize(static_cast<std::size_t>(dw.size()));
      peak_bytes_ = std::max(peak_bytes_, live_bytes());
    }
    sum = scratch_.data();
    std::fill(sum, sum + dw.size(), 0.0f);
  }
  for (long r = 0; r < dy.rows; ++r) {
    const long v = static_cast<long>(id[r]);
    GRADEQ_REQUIRE(v >= 0 && v < dw.rows, "embedding_backward: token id out of range");
    if (v == padding_idx) continue;
    for (long c = 0; c < width; ++c) sum[v * width + c] += g[r * width + c];
  }
  if (sum == out) return;
  dispatch(dw.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long i = 0; i < dw.size(); ++i) out[i] = store<D>(out[i] + sum[i]);
  });
}

}  // namespace gradeq
