// position_embedding.cpp — the host backend's position_embedding_forward
// and position_embedding_backward (kernels/backend_ops.def): each row plus
// its position's row of the table, and back, each position's rows summed
// in float32 in row order and added into the gradient once.
#include <algorithm>

#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"

namespace gradeq {

using namespace cpu;

void CpuBackend::position_embedding_forward(const Tensor& x, const Tensor& p, long positions, const Tensor& y) {
  require_position_shapes(x, p, positions, "position_embedding_forward");
  require_shape(y, x.rows, x.cols, "position_embedding_forward output");
  const float* in = values(x);
  const float* table = values(p);
  float* out = values(y);
  const long width = x.cols;
  dispatch(y.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long r = 0; r < x.rows; ++r) {
      const float* position = table + (r % positions) * width;
      for (long c = 0; c < width; ++c) out[r * width + c] = store<D>(in[r * width + c] + position[c]);
    }
  });
}

void CpuBackend::position_embedding_backward(const Tensor& dy, long positions, const Tensor& dp) {
  require_position_shapes(dy, dp, positions, "position_embedding_backward");
  const float* g = values(dy);
  const long width = dy.cols;
  if (scratch_.size() < static_cast<std::size_t>(dp.size())) {
    scratch_.resize(static_cast<std::size_t>(dp.size()));
    peak_bytes_ = std::max(peak_bytes_, live_bytes());
  }
  float* sum = scratch_.data();
  std::fill(sum, sum + dp.size(), 0.0f);
  for (long r = 0; r < dy.rows; ++r)
    for (long c = 0; c < width; ++c) sum[(r % positions) * width + c] += g[r * width + c];
  float* out = values(dp);
  dispatch(dp.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long i = 0; i < dp.size(); ++i) out[i] = store<D>(out[i] + sum[i]);
  });
}

}  // namespace gradeq
