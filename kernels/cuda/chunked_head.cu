// chunked_head.cu — chunked_head_cross_entropy on cuBLAS (kernels/
// backend_ops.def): per vocabulary chunk and block of rows, a tile of
// logits by GEMM (float32 compute, stored to x's dtype); an online
// log-sum-exp per row, one block per row; then dz tile by tile, dx's
// float32 sums over the chunks (GEMM, beta = 1) and each chunk's dw summed
// in float32 over the row blocks (GEMM, beta = 1) before one add into dw.
// The row kernels' reductions have a fixed order; the GEMMs are cuBLAS's,
// deterministic in the backend's deterministic mode (atomics not allowed),
// where pass 2's tile of logits is pass 1's bit for bit.
#include "kernels/check.h"
#include "kernels/cuda/cuda_backend.h"

#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

// The tile's float32 products rounded to the logits' dtype, in place.
__global__ void round_tile(float* tile, long n, DType t) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    float v = tile[i];
    if (t == DType::bf16) v = __bfloat162float(__float2bfloat16_rn(v));
    else if (t == DType::f16) v = __half2float(__float2half_rn(v));
    tile[i] = v;
  }
}

// One block per row of the tile: the chunk's max, then the row's running
// sum rescaled to the new max plus the chunk's sum (summed first, as the
// reference's rule has it), and the target's logit where the chunk holds it.
__global__ void online_log_sum_exp(const float* tile, long nc, long c0, long r0, const float* classes,
                                   float* row_max, float* row_sum, float* target_logit, int* bad_class,
                                   long vocabulary) {
  const long i = blockIdx.x, r = r0 + i;
  const float* z = tile + i * nc;
  __shared__ float chunk_max;
  if (threadIdx.x == 0) {
    float m = z[0];
    for (long j = 1; j < nc; ++j) m = fmaxf(m, z[j]);
    chunk_max = fmaxf(m, c0 == 0 ? -INFINITY : row_max[r]);
  }
  __syncthreads();
  const float m = chunk_max;
  float s = 0.0f;
  for (long j = threadIdx.x; j < nc; j += blockDim.x) s += expf(z[j] - m);
  s = block_sum(s);
  if (threadIdx.x != 0) return;
  row_sum[r] = c0 == 0 ? s : row_sum[r] * expf(row_max[r] - m) + s;
  row_max[r] = m;
  const long k = static_cast<long>(classes[r]);
  if (k >= vocabulary) atomicExch(bad_class, 1);
  if (k >= c0 && k < c0 + nc) target_logit[r] = z[k - c0];
}

// dz of one tile: scale * (softmax - one-hot), stored to dz's dtype; 0 on ignored rows.
__global__ void tile_dz(const float* tile, long nr, long nc, long c0, long r0, const float* classes,
                        const float* row_max, const float* row_sum, float scale, void* dz, DType tdz) {
  for (long e = blockIdx.x * blockDim.x + threadIdx.x; e < nr * nc; e += static_cast<long>(gridDim.x) * blockDim.x) {
    const long i = e / nc, j = e % nc, r = r0 + i;
    const long k = static_cast<long>(classes[r]);
    if (k < 0) {
      store(dz, tdz, e, 0.0f);
      continue;
    }
    const float p = expf(tile[e] - row_max[r]) / row_sum[r];
    store(dz, tdz, e, scale * (c0 + j == k ? p - 1.0f : p));
  }
}

__global__ void row_losses(const float* classes, const float* row_max, const float* row_sum,
                           const float* target_logit, long rows, float* loss) {
  for (long r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += static_cast<long>(gridDim.x) * blockDim.x)
    loss[r] = classes[r] < 0.0f ? 0.0f : logf(row_sum[r]) - (target_logit[r] - row_max[r]);
}

// Rows [first, first + count) of t.
Tensor rows_of(const Tensor& t, long first, long count) {
  return Tensor{static_cast<char*>(t.data) + first * t.cols * static_cast<long>(element_bytes(t.dtype)), count,
                t.cols, t.dtype};
}

}  // namespace

double CudaBackend::chunked_head_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& targets, float scale,
                                               long row_chunk, long vocabulary_chunk, const Tensor& dx,
                                               const Tensor& dw) {
  require_chunked_head(x, w, targets, row_chunk, vocabulary_chunk, dx, dw);
  GRADEQ_REQUIRE(targets.dtype == DType::f32, "chunked_head_cross_entropy: targets are float32");
  const long rows = x.rows, width = x.cols, vocabulary = w.rows;
  if (rows == 0) return 0.0;
  const long block = std::min(row_chunk, rows), chunk = std::min(vocabulary_chunk, std::max(vocabulary, 1L));
  float* stats = scratch(4 * rows, 0);
  float *row_max = stats, *row_sum = stats + rows, *target_logit = stats + 2 * rows, *loss = stats + 3 * rows;
  const Tensor tile_all{scratch(block * chunk, 4), block, chunk, DType::f32};
  float* dz_data = scratch(block * chunk, 5);
  const Tensor dx_sum{scratch(rows * width, 6), rows, width, DType::f32};
  float* dw_sum = scratch(chunk * width, 7);
  const float* classes = static_cast<const float*>(targets.data);
  GRADEQ_CUDA_CHECK(cudaMemset(impl_->flag, 0, sizeof(int)));

  const auto logits = [&](long r0, long nr, long c0, long nc) {
    const Tensor tile{tile_all.data, nr, nc, DType::f32};
    gemm(true, false, nc, nr, width, rows_of(w, c0, nc), width, rows_of(x, r0, nr), width, 0.0f, tile);
    round_tile<<<blocks_for(nr * nc), kThreads>>>(static_cast<float*>(tile.data), nr * nc, x.dtype);
    GRADEQ_LAUNCH_CHECK();
  };

  for (long c0 = 0; c0 < vocabulary; c0 += chunk) {
    const long nc = std::min(chunk, vocabulary - c0);
    for (long r0 = 0; r0 < rows; r0 += block) {
      const long nr = std::min(block, rows - r0);
      logits(r0, nr, c0, nc);
      online_log_sum_exp<<<static_cast<unsigned>(nr), kThreads>>>(static_cast<const float*>(tile_all.data), nc, c0,
                                                                   r0, classes, row_max, row_sum, target_logit,
                                                                   impl_->flag, vocabulary);
      GRADEQ_LAUNCH_CHECK();
    }
  }
  int bad = 0;
  GRADEQ_CUDA_CHECK(cudaMemcpy(&bad, impl_->flag, sizeof(int), cudaMemcpyDeviceToHost));
  GRADEQ_REQUIRE(bad == 0, "chunked_head_cross_entropy: class out of range");

  fill(dx_sum, 0.0f);
  for (long c0 = 0; c0 < vocabulary; c0 += chunk) {
    const long nc = std::min(chunk, vocabulary - c0);
    const Tensor chunk_dw{dw_sum, nc, width, DType::f32};
    fill(chunk_dw, 0.0f);
    for (long r0 = 0; r0 < rows; r0 += block) {
      const long nr = std::min(block, rows - r0);
      logits(r0, nr, c0, nc);
      const Tensor dz{dz_data, nr, nc, dx.dtype};
      tile_dz<<<blocks_for(nr * nc), kThreads>>>(static_cast<const float*>(tile_all.data), nr, nc, c0, r0, classes,
                                                 row_max, row_sum, scale, dz.data, dz.dtype);
      GRADEQ_LAUNCH_CHECK();
      // dx[r0.., :] += dz w_c; column-major dx^T [width, nr] = w_c^T dz^T.
      gemm(false, false, width, nr, nc, rows_of(w, c0, nc), width, dz, nc, 1.0f, rows_of(dx_sum, r0, nr));
      // The chunk's dw [nc, width] += dz^T x_b; column-major dw^T = x_b^T dz.
      gemm(false, true, width, nc, nr, rows_of(x, r0, nr), width, dz, nc, 1.0f, chunk_dw);
    }
    const Tensor dst[] = {rows_of(dw, c0, nc)}, src[] = {chunk_dw};
    accumulate(dst, src, {});
  }
  convert(dx_sum, dx);
  row_losses<<<blocks_for(rows), kThreads>>>(classes, row_max, row_sum, target_logit, rows, loss);
  GRADEQ_LAUNCH_CHECK();
  impl_->sum_to_scalar(loss, rows);
  float total = 0.0f;
  GRADEQ_CUDA_CHECK(cudaMemcpy(&total, impl_->scalar, sizeof(float), cudaMemcpyDeviceToHost));
  return total;
}

}  // namespace gradeq
