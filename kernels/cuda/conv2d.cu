// conv2d.cu — the CUDA backend's conv2d_forward, _backward_data and
// _backward_weight (kernels/backend_ops.def): im2col into float32 scratch
// and cuBLAS, one product per group.
//   forward          y = cols(x) W^T (cuBLAS), then + b in the epilogue;
//   backward data    dcols = dy W (cuBLAS, over C_out/groups), then col2im
//                    as a gather: one thread per input element adds its
//                    k^2 taps in tap order (no atomics: deterministic);
//   backward weight  dW += dy^T cols(x) with beta = 1, straight into the
//                    gradient buffer (a float32 buffer; otherwise the
//                    product in scratch, then added once), and db += dy's
//                    sums by the linear layer's fixed-order column sums.
#include "kernels/cuda/cuda_backend.h"

#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

constexpr int kTapsSlot = 9, kRowsSlot = 10;

// Group g's taps of x: cols [samples H_out W_out, taps], 0 in the padding.
__global__ void im2col(Conv2dConfig c, const void* x, DType t, long samples, long g, float* cols) {
  const long ho = c.out_height(), wo = c.out_width(), k = c.kernel, taps = c.taps();
  const long n_all = samples * ho * wo * taps;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long row = i / taps, tap = i % taps;
    const long n = row / (ho * wo), oy = row / wo % ho, ox = row % wo;
    const long ch = tap / (k * k), ky = tap / k % k, kx = tap % k;
    const long iy = oy * c.stride - c.padding + ky * c.dilation, ix = ox * c.stride - c.padding + kx * c.dilation;
    const bool inside = iy >= 0 && iy < c.height && ix >= 0 && ix < c.width;
    cols[i] = inside ? load(x, t, n * c.in_size() + ((g * c.in_per_group() + ch) * c.height + iy) * c.width + ix) : 0.0f;
  }
}

// Group g's output gradient as rows of positions: [samples H_out W_out, C_out/groups], float32.
__global__ void output_rows(Conv2dConfig c, const void* dy, DType t, long samples, long g, float* rows) {
  const long positions = c.out_height() * c.out_width(), og = c.out_per_group();
  const long n_all = samples * positions * og;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long r = i / og, o = i % og;
    rows[i] = load(dy, t, r / positions * c.out_size() + (g * og + o) * positions + r % positions);
  }
}

// y[n, (g og + o) P + p] = acc[(n P + p) og + o] + b[g og + o].
__global__ void conv_epilogue(Conv2dConfig c, const float* acc, const void* b, DType tb, void* y, DType ty, long samples,
                              long g) {
  const long positions = c.out_height() * c.out_width(), og = c.out_per_group();
  const long n_all = samples * positions * og;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long r = i / og, o = i % og, oc = g * og + o;
    store(y, ty, r / positions * c.out_size() + oc * positions + r % positions, acc[i] + (b ? load(b, tb, oc) : 0.0f));
  }
}

// dx of group g's channels: each input element the sum of its taps'
// entries of dcols, in tap order, stored once.
__global__ void col2im(Conv2dConfig c, const float* dcols, long samples, long g, void* dx, DType t) {
  const long plane = c.height * c.width, k = c.kernel, ho = c.out_height(), wo = c.out_width();
  const long n_all = samples * c.in_per_group() * plane;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long n = i / (c.in_per_group() * plane), ch = i / plane % c.in_per_group(), iy = i % plane / c.width,
               ix = i % c.width;
    float s = 0.0f;
    for (long ky = 0; ky < k; ++ky) {
      const long ty = iy + c.padding - ky * c.dilation;
      if (ty < 0 || ty % c.stride != 0 || ty / c.stride >= ho) continue;
      for (long kx = 0; kx < k; ++kx) {
        const long tx = ix + c.padding - kx * c.dilation;
        if (tx < 0 || tx % c.stride != 0 || tx / c.stride >= wo) continue;
        s += dcols[((n * ho + ty / c.stride) * wo + tx / c.stride) * c.taps() + (ch * k + ky) * k + kx];
      }
    }
    store(dx, t, n * c.in_size() + (g * c.in_per_group() + ch) * plane + iy * c.width + ix, s);
  }
}

// Rows [first, first + rows) of a [*, cols] tensor, as a tensor of its own.
Tensor row_block(const Tensor& t, long first, long rows) {
  return {static_cast<char*>(t.data) + first * t.cols * static_cast<long>(element_bytes(t.dtype)), rows, t.cols, t.dtype};
}
// Columns [first, first + cols) of a [1, *] vector.
Tensor vector_block(const Tensor& t, long first, long cols) {
  if (t.empty()) return t;
  return {static_cast<char*>(t.data) + first * static_cast<long>(element_bytes(t.dtype)), 1, cols, t.dtype};
}

bool gemm_writes(DType ab, DType c) { return c == DType::f32 || c == ab; }

}  // namespace

void CudaBackend::conv2d_forward(const Conv2dConfig& c, const Tensor& x, const Tensor& w, const Tensor& b,
                                 const Tensor& y) {
  require_conv2d(c, x, w, b, y, "conv2d_forward");
  const long samples = x.rows, og = c.out_per_group(), count = samples * c.out_height() * c.out_width();
  if (samples == 0) return;
  const Tensor cols{scratch(count * c.taps(), kTapsSlot), count, c.taps(), DType::f32};
  const Tensor acc{scratch(count * og), count, og, DType::f32};
  for (long g = 0; g < c.groups; ++g) {
    im2col<<<blocks_for(count * c.taps()), kThreads>>>(c, x.data, x.dtype, samples, g, static_cast<float*>(cols.data));
    GRADEQ_LAUNCH_CHECK();
    gemm(true, false, og, count, c.taps(), row_block(w, g * og, og), c.taps(), cols, c.taps(), 0.0f, acc);
    conv_epilogue<<<blocks_for(count * og), kThreads>>>(c, static_cast<const float*>(acc.data),
                                                        b.empty() ? nullptr : b.data, b.dtype, y.data, y.dtype,
                                                        samples, g);
    GRADEQ_LAUNCH_CHECK();
  }
}

void CudaBackend::conv2d_backward_data(const Conv2dConfig& c, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  require_conv2d(c, dx, w, Tensor{}, dy, "conv2d_backward_data");
  const long samples = dy.rows, og = c.out_per_group(), count = samples * c.out_height() * c.out_width();
  if (samples == 0) return;
  const Tensor rows{scratch(count * og, kRowsSlot), count, og, DType::f32};
  const Tensor dcols{scratch(count * c.taps()), count, c.taps(), DType::f32};
  for (long g = 0; g < c.groups; ++g) {
    output_rows<<<blocks_for(count * og), kThreads>>>(c, dy.data, dy.dtype, samples, g, static_cast<float*>(rows.data));
    GRADEQ_LAUNCH_CHECK();
    gemm(false, false, c.taps(), count, og, row_block(w, g * og, og), c.taps(), rows, og, 0.0f, dcols);
    col2im<<<blocks_for(samples * c.in_per_group() * c.height * c.width), kThreads>>>(
        c, static_cast<const float*>(dcols.data), samples, g, dx.data, dx.dtype);
    GRADEQ_LAUNCH_CHECK();
  }
}

void CudaBackend::conv2d_backward_weight(const Conv2dConfig& c, const Tensor& dy, const Tensor& x, const Tensor& dw,
                                         const Tensor& db) {
  require_conv2d(c, x, dw, db, dy, "conv2d_backward_weight");
  const long samples = x.rows, og = c.out_per_group(), count = samples * c.out_height() * c.out_width();
  if (samples == 0) return;
  const Tensor cols{scratch(count * c.taps(), kTapsSlot), count, c.taps(), DType::f32};
  const Tensor rows{scratch(count * og, kRowsSlot), count, og, DType::f32};
  for (long g = 0; g < c.groups; ++g) {
    im2col<<<blocks_for(count * c.taps()), kThreads>>>(c, x.data, x.dtype, samples, g, static_cast<float*>(cols.data));
    GRADEQ_LAUNCH_CHECK();
    output_rows<<<blocks_for(count * og), kThreads>>>(c, dy.data, dy.dtype, samples, g, static_cast<float*>(rows.data));
    GRADEQ_LAUNCH_CHECK();
    const Tensor dwg = row_block(dw, g * og, og);
    if (gemm_writes(DType::f32, dw.dtype)) {
      gemm(false, true, c.taps(), og, count, cols, c.taps(), rows, og, 1.0f, dwg);
    } else {
      const Tensor product{scratch(og * c.taps()), og, c.taps(), DType::f32};
      gemm(false, true, c.taps(), og, count, cols, c.taps(), rows, og, 0.0f, product);
      const Tensor dst[] = {dwg}, src[] = {product};
      accumulate(dst, src, {});
    }
    if (!db.empty()) bias_gradient(rows, vector_block(db, g * og, og));
  }
}

}  // namespace gradeq
