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
// The direct form (backend "cuda-direct"): no column buffer.
//   forward          one thread per output: its taps inside the image in
//                    (c, ky, kx) order, then + b;
//   backward data    one thread per input element: (o, ky, kx) over the
//                    outputs its taps reach;
//   backward weight  an implicit GEMM split over the reduction (split-K):
//                    each block a tile of 16 outputs by 16 taps over one
//                    range of the samples x H_out x W_out positions, the
//                    taps gathered from x tile by tile into shared memory;
//                    each split's float32 sum stored apart, then the splits
//                    added in split order in float32 and into dw once
//                    (beta = 1). db by one block per channel (a fixed-order
//                    tree). No atomics: deterministic.
// Every form is one dot product per result, in an order the reference's
// bound covers (docs/NUMERICS.md, "Convolutions").
#include <algorithm>

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
    const long iy = c.input_index(oy, ky), ix = c.input_index(ox, kx);
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
      const long oy = c.output_index(iy, ky, ho);
      if (oy < 0) continue;
      for (long kx = 0; kx < k; ++kx) {
        const long ox = c.output_index(ix, kx, wo);
        if (ox < 0) continue;
        s += dcols[((n * ho + oy) * wo + ox) * c.taps() + (ch * k + ky) * k + kx];
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

// ---- the direct form ----

__global__ void direct_forward(Conv2dConfig c, const void* x, DType tx, const void* w, DType tw, const void* b, DType tb,
                               void* y, DType ty, long samples) {
  const long ho = c.out_height(), wo = c.out_width(), k = c.kernel, og = c.out_per_group();
  const long n_all = samples * c.out_size();
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long n = i / c.out_size(), oc = i / (ho * wo) % c.out_channels, oy = i % (ho * wo) / wo, ox = i % wo;
    const long first = oc / og * c.in_per_group();
    float acc = 0.0f;
    for (long ch = 0; ch < c.in_per_group(); ++ch)
      for (long ky = 0; ky < k; ++ky) {
        const long iy = c.input_index(oy, ky);
        if (iy < 0 || iy >= c.height) continue;
        for (long kx = 0; kx < k; ++kx) {
          const long ix = c.input_index(ox, kx);
          if (ix < 0 || ix >= c.width) continue;
          acc += load(w, tw, oc * c.taps() + (ch * k + ky) * k + kx) *
                 load(x, tx, n * c.in_size() + ((first + ch) * c.height + iy) * c.width + ix);
        }
      }
    store(y, ty, i, b ? acc + load(b, tb, oc) : acc);
  }
}

__global__ void direct_backward_data(Conv2dConfig c, const void* dy, DType tdy, const void* w, DType tw, void* dx,
                                     DType tdx, long samples) {
  const long ho = c.out_height(), wo = c.out_width(), k = c.kernel, og = c.out_per_group(), plane = c.height * c.width;
  const long n_all = samples * c.in_size();
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long n = i / c.in_size(), ci = i / plane % c.in_channels, iy = i % plane / c.width, ix = i % c.width;
    const long g = ci / c.in_per_group(), ch = ci % c.in_per_group();
    float acc = 0.0f;
    for (long o = 0; o < og; ++o) {
      const long oc = g * og + o;
      for (long ky = 0; ky < k; ++ky) {
        const long oy = c.output_index(iy, ky, ho);
        if (oy < 0) continue;
        for (long kx = 0; kx < k; ++kx) {
          const long ox = c.output_index(ix, kx, wo);
          if (ox < 0) continue;
          acc += load(dy, tdy, n * c.out_size() + (oc * ho + oy) * wo + ox) *
                 load(w, tw, oc * c.taps() + (ch * k + ky) * k + kx);
        }
      }
    }
    store(dx, tdx, i, acc);
  }
}

constexpr int kTile = 16;

// partial[split, g og + o, tap] = the sum over positions [split per, (split
// + 1) per) of samples x H_out x W_out of dy[n, g og + o, p] x[n, tap's
// pixel]: block (tap tile, output tile, split x groups + g), thread
// (tap, output) of the tile.
__global__ void weight_gradient_split(Conv2dConfig c, const void* dy, DType tdy, const void* x, DType tx, long samples,
                                      long per, float* partial) {
  __shared__ float grad[kTile][kTile + 1];  // [position][output]
  __shared__ float taps[kTile][kTile + 1];  // [position][tap]
  const long og = c.out_per_group(), k = c.kernel, wo = c.out_width(), positions = c.out_height() * wo;
  const long count = samples * positions, g = blockIdx.z % c.groups, split = blockIdx.z / c.groups;
  const long o0 = blockIdx.y * kTile, t0 = blockIdx.x * kTile;
  const int col = threadIdx.x, row = threadIdx.y;
  const long begin = split * per, end = begin + per < count ? begin + per : count;
  float acc = 0.0f;
  for (long r0 = begin; r0 < end; r0 += kTile) {
    // Thread (col, row) loads position r0 + row: output o0 + col's gradient and tap t0 + col's pixel.
    const long r = r0 + row;
    float d = 0.0f, v = 0.0f;
    if (r < end) {
      const long n = r / positions, p = r % positions, oy = p / wo, ox = p % wo;
      if (o0 + col < og) d = load(dy, tdy, n * c.out_size() + (g * og + o0 + col) * positions + p);
      const long tap = t0 + col;
      if (tap < c.taps()) {
        const long ch = tap / (k * k), ky = tap / k % k, kx = tap % k;
        const long iy = c.input_index(oy, ky), ix = c.input_index(ox, kx);
        if (iy >= 0 && iy < c.height && ix >= 0 && ix < c.width)
          v = load(x, tx, n * c.in_size() + ((g * c.in_per_group() + ch) * c.height + iy) * c.width + ix);
      }
    }
    grad[row][col] = d;
    taps[row][col] = v;
    __syncthreads();
    for (int j = 0; j < kTile; ++j) acc += grad[j][row] * taps[j][col];
    __syncthreads();
  }
  const long o = o0 + row, tap = t0 + col;
  if (o < og && tap < c.taps()) partial[(split * c.out_channels + g * og + o) * c.taps() + tap] = acc;
}

// dw[i] += the splits' sums of element i, added in split order, stored once.
__global__ void add_splits(const float* partial, long splits, long n_all, void* dw, DType t) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += static_cast<long>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (long split = 0; split < splits; ++split) s += partial[split * n_all + i];
    store(dw, t, i, load(dw, t, i) + s);
  }
}

// db[o] += the sum of dy over channel o's samples x H_out x W_out, one block per channel.
__global__ void direct_bias_gradient(Conv2dConfig c, const void* dy, DType t, long samples, void* db, DType tb) {
  const long o = blockIdx.x, positions = c.out_height() * c.out_width();
  float s = 0.0f;
  for (long r = threadIdx.x; r < samples * positions; r += blockDim.x)
    s += load(dy, t, r / positions * c.out_size() + o * positions + r % positions);
  s = block_sum(s);
  if (threadIdx.x == 0) store(db, tb, o, load(db, tb, o) + s);
}

}  // namespace

void CudaBackend::conv2d_forward(const Conv2dConfig& c, const Tensor& x, const Tensor& w, const Tensor& b,
                                 const Tensor& y) {
  require_conv2d(c, x, w, b, y, "conv2d_forward");
  const long samples = x.rows, og = c.out_per_group(), count = samples * c.out_height() * c.out_width();
  if (samples == 0) return;
  if (conv_form_ == ConvForm::direct) {
    direct_forward<<<blocks_for(samples * c.out_size()), kThreads>>>(c, x.data, x.dtype, w.data, w.dtype,
                                                                     b.empty() ? nullptr : b.data, b.dtype, y.data,
                                                                     y.dtype, samples);
    GRADEQ_LAUNCH_CHECK();
    return;
  }
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
  if (conv_form_ == ConvForm::direct) {
    direct_backward_data<<<blocks_for(samples * c.in_size()), kThreads>>>(c, dy.data, dy.dtype, w.data, w.dtype,
                                                                          dx.data, dx.dtype, samples);
    GRADEQ_LAUNCH_CHECK();
    return;
  }
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
  if (conv_form_ == ConvForm::direct) {
    // About 2,048 positions a split, at most 64 splits (and the grid's z limit).
    const long splits = std::max(1L, std::min({count / 2048, 64L, 65535L / c.groups}));
    const long per = ((count + splits - 1) / splits + kTile - 1) / kTile * kTile;
    const long used = (count + per - 1) / per;
    float* partial = scratch(used * c.out_channels * c.taps());
    const dim3 grid(static_cast<unsigned>((c.taps() + kTile - 1) / kTile), static_cast<unsigned>((og + kTile - 1) / kTile),
                    static_cast<unsigned>(used * c.groups));
    weight_gradient_split<<<grid, dim3(kTile, kTile)>>>(c, dy.data, dy.dtype, x.data, x.dtype, samples, per, partial);
    GRADEQ_LAUNCH_CHECK();
    add_splits<<<blocks_for(c.out_channels * c.taps()), kThreads>>>(partial, used, c.out_channels * c.taps(), dw.data,
                                                                    dw.dtype);
    GRADEQ_LAUNCH_CHECK();
    if (!db.empty()) {
      direct_bias_gradient<<<static_cast<unsigned>(c.out_channels), kThreads>>>(c, dy.data, dy.dtype, samples, db.data,
                                                                                db.dtype);
      GRADEQ_LAUNCH_CHECK();
    }
    return;
  }
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
