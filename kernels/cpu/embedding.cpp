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

// Each token's rows are summed in float32 first (in row order), then added
// into the buffer once and rounded to its dtype, as a GEMM with beta = 1
// does. Adding row by row into the buffer would make the buffer's earlier
// value a term of every add: in float32 an error of n_v roundings of the
// buffer, beyond what the accumulation rule allows (one); in bfloat16,
// increments dropped once a row's sum nears 256.
void CpuBackend::embedding_backward(const Tensor& ids, const Tensor& dy, long padding_idx, const Tensor& dw) {
  require_embedding_shapes(ids, dw, dy, "embedding_backward");
  const float* id = values(ids);
  const float* g = values(dy);
  const long width = dy.cols;
  float* out = values(dw);
  if (scratch_.size() < static_cast<std::size_t>(dw.size())) {
    scratch_.resize(static_cast<std::size_t>(dw.size()));
    peak_bytes_ = std::max(peak_bytes_, live_bytes());
  }
  float* sum = scratch_.data();
  std::fill(sum, sum + dw.size(), 0.0f);
  for (long r = 0; r < dy.rows; ++r) {
    const long v = static_cast<long>(id[r]);
    GRADEQ_REQUIRE(v >= 0 && v < dw.rows, "embedding_backward: token id out of range");
    if (v == padding_idx) continue;
    for (long c = 0; c < width; ++c) sum[v * width + c] += g[r * width + c];
  }
  dispatch(dw.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long i = 0; i < dw.size(); ++i) out[i] = store<D>(out[i] + sum[i]);
  });
}

}  // namespace gradeq
