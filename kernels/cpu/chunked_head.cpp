// chunked_head.cpp — the host backend's chunked_head_cross_entropy
// (kernels/backend_ops.def): a bias-free head and its cross-entropy over
// vocabulary chunks with an online log-sum-exp, the logits never held
// whole. Each tile's logits are Eigen's float32 product of a block of rows
// and a chunk of the weight's rows, stored to x's dtype; the weight
// gradient of a chunk is summed in float32 over the row blocks, then added
// into dw once. The same Eigen settings as cpu_backend.cpp (single-threaded,
// the blocked product for every shape) keep the orders set by the shapes.
#define EIGEN_DONT_PARALLELIZE
#define EIGEN_GEMM_TO_COEFFBASED_THRESHOLD 0
#include "kernels/cpu/cpu_backend.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>

#include "kernels/check.h"
#include "kernels/cpu/cpu_internal.h"

namespace gradeq {

using namespace cpu;

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

// Rows [first, first + count) of a row-major [.., cols] float32 array.
ConstMap rows_of(const Tensor& t, long first, long count) {
  return ConstMap(values(t) + first * t.cols, count, t.cols);
}

}  // namespace

double CpuBackend::chunked_head_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& targets, float scale,
                                              long row_chunk, long vocabulary_chunk, const Tensor& dx,
                                              const Tensor& dw) {
  require_chunked_head(x, w, targets, row_chunk, vocabulary_chunk, dx, dw);
  const long rows = x.rows, width = x.cols, vocabulary = w.rows;
  const long block = std::min(row_chunk, std::max(rows, 1L)), chunk = std::min(vocabulary_chunk, std::max(vocabulary, 1L));
  // Scratch: a tile of logits, its dz, dx's float32 sums, a chunk's dw sum,
  // and each row's running max, sum and target logit.
  const std::size_t need = static_cast<std::size_t>(2 * block * chunk + rows * width + chunk * width + 3 * rows);
  if (scratch_.size() < need) {
    scratch_.resize(need);
    peak_bytes_ = std::max(peak_bytes_, live_bytes());
  }
  float* tile = scratch_.data();
  float* dz = tile + block * chunk;
  float* dx_sum = dz + block * chunk;
  float* dw_sum = dx_sum + rows * width;
  float* row_max = dw_sum + chunk * width;
  float* row_sum = row_max + rows;
  float* target_logit = row_sum + rows;
  const float* cls = values(targets);
  for (long i = 0; i < rows; ++i) GRADEQ_REQUIRE(cls[i] < vocabulary, "chunked_head_cross_entropy: class out of range");

  // The tile of rows [r0, r0 + nr) and columns [c0, c0 + nc): float32
  // products, stored to x's dtype.
  const auto logits = [&](long r0, long nr, long c0, long nc) {
    Map t(tile, nr, nc);
    if (width == 0) t.setZero();
    else t.noalias() = rows_of(x, r0, nr) * rows_of(w, c0, nc).transpose();
    dispatch(x.dtype, [&](auto d) {
      constexpr DType D = decltype(d)::value;
      for (long k = 0; k < nr * nc; ++k) tile[k] = store<D>(tile[k]);
    });
  };

  // Pass 1: the online log-sum-exp, chunk by chunk in order.
  std::fill(row_max, row_max + rows, -INFINITY);
  std::fill(row_sum, row_sum + rows, 0.0f);
  for (long c0 = 0; c0 < vocabulary; c0 += chunk) {
    const long nc = std::min(chunk, vocabulary - c0);
    for (long r0 = 0; r0 < rows; r0 += block) {
      const long nr = std::min(block, rows - r0);
      logits(r0, nr, c0, nc);
      for (long i = 0; i < nr; ++i) {
        const long r = r0 + i;
        const float* z = tile + i * nc;
        const float m = std::max(row_max[r], *std::max_element(z, z + nc));
        // The chunk's terms summed first, then added to the running sum
        // rescaled to the new max (the reference's rule, NUMERICS §3).
        float s = 0.0f;
        for (long j = 0; j < nc; ++j) s += std::exp(z[j] - m);
        row_sum[r] = c0 == 0 ? s : row_sum[r] * std::exp(row_max[r] - m) + s;
        row_max[r] = m;
        const long k = static_cast<long>(cls[r]);
        if (k >= c0 && k < c0 + nc) target_logit[r] = z[k - c0];
      }
    }
  }
  float total = 0.0f;
  for (long r = 0; r < rows; ++r)
    if (cls[r] >= 0) total += std::log(row_sum[r]) - (target_logit[r] - row_max[r]);

  // Pass 2: dz tile by tile; dx's sums over the chunks, each chunk's dw
  // over the row blocks.
  std::fill(dx_sum, dx_sum + rows * width, 0.0f);
  float* dwv = values(dw);
  for (long c0 = 0; c0 < vocabulary; c0 += chunk) {
    const long nc = std::min(chunk, vocabulary - c0);
    Map chunk_dw(dw_sum, nc, width);
    chunk_dw.setZero();
    for (long r0 = 0; r0 < rows; r0 += block) {
      const long nr = std::min(block, rows - r0);
      logits(r0, nr, c0, nc);
      dispatch(dx.dtype, [&](auto d) {
        constexpr DType D = decltype(d)::value;
        for (long i = 0; i < nr; ++i) {
          const long r = r0 + i;
          const long k = static_cast<long>(cls[r]);
          for (long j = 0; j < nc; ++j) {
            const float p = k < 0 ? 0.0f : std::exp(tile[i * nc + j] - row_max[r]) / row_sum[r];
            dz[i * nc + j] = k < 0 ? 0.0f : store<D>(scale * (c0 + j == k ? p - 1.0f : p));
          }
        }
      });
      const ConstMap dz_tile(dz, nr, nc);
      Map(dx_sum + r0 * width, nr, width).noalias() += dz_tile * rows_of(w, c0, nc);
      chunk_dw.noalias() += dz_tile.transpose() * rows_of(x, r0, nr);
    }
    dispatch(dw.dtype, [&](auto d) {
      constexpr DType D = decltype(d)::value;
      float* out = dwv + c0 * width;
      for (long k = 0; k < nc * width; ++k) out[k] = store<D>(out[k] + dw_sum[k]);
    });
  }
  float* dxv = values(dx);
  dispatch(dx.dtype, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    for (long k = 0; k < rows * width; ++k) dxv[k] = store<D>(dx_sum[k]);
  });
  return total;
}

}  // namespace gradeq
