// attention.cu — the CUDA backend's attention_forward and attention_backward
// (kernels/backend_ops.def: multi-head self-attention), the same arithmetic
// as the host backend (kernels/cpu/attention.cpp), tiled over keys.
//
// Forward: one thread block per (sample, head, tile of query rows), the
// query tile in shared memory, the keys (then values) staged a tile at a
// time. Three passes over the key tiles: the row max m (order-free), the
// row sum l in key order, then o = sum p'_j v_j with p' = p rounded to o's
// dtype. There is no online rescaling: each row has one m and one l, the
// ones saved for backward. A query that sees no key gets o = 0, m = 0, l = 0.
//
// Backward, as FlashAttention's: one thread block per (sample, head, key
// block), that block's keys and values in shared memory and its dK and dV
// summed in shared float32 over the query tiles in a fixed order, then
// stored; p is recomputed from row_max / row_sum with the float operations
// forward uses (score() and probability() below), so bit for bit forward's.
// dQ of a query row is a sum over the key blocks, which belong to different
// thread blocks; each block's partial dQ is float32 and the sum over blocks
// is float32:
//  - not deterministic(): the blocks atomicAdd their partials into one
//    zeroed float32 buffer [rows, D] (every one of its D columns zeroed):
//    fast, but the blocks' order, and so the rounding, varies run to run;
//  - deterministic() (the default): block kb writes its partial into its
//    own slice of a zeroed float32 buffer [key blocks, rows, D] and a
//    second kernel sums the slices in key-block order: bitwise identical
//    run to run.
// Either way a last kernel stores scale * dQ to dqkv's query columns.
//
// Tiles are sized so that a block's shared memory stays within the 48 KB a
// kernel gets without opting in (query tiles halved first, then key tiles).
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

// The scratch slot of the float32 dQ sums (slots 0-7 belong to other ops).
constexpr int kDqSlot = 8;
constexpr std::size_t kSharedBudget = 48 * 1024;
constexpr int kMaxTile = 32;

// The shape of one call, passed by value to the kernels.
struct Geometry {
  long rows = 0, width = 0, d = 0, heads = 1, positions = 1, padding_idx = -1;
  bool causal = true;
  long tile_q = 1, tile_k = 1;  // query rows and keys per tile
  float scale = 1.0f;
};

// v rounded to dtype t and back, as store() then load() would give (the
// intrinsics store() uses).
__device__ inline float rounded_to(float v, DType t) {
  switch (t) {
    case DType::bf16: return __bfloat162float(__float2bfloat16_rn(v));
    case DType::f16: return __half2float(__float2half_rn(v));
    case DType::f32: break;
  }
  return v;
}

// Whether query i of the sample starting at row `first` sees key j.
__device__ inline bool sees(const Geometry& g, const float* ids, long first, long i, long j) {
  if (g.causal && j > i) return false;
  return ids == nullptr || static_cast<long>(ids[first + j]) != g.padding_idx;
}

// Explicit fmaf / _rn intrinsics, never contracted: forward and backward
// get bit-identical scores and probabilities from them.
__device__ inline float dot(const float* a, const float* b, long n) {
  float s = 0.0f;
  for (long e = 0; e < n; ++e) s = fmaf(a[e], b[e], s);
  return s;
}

__device__ inline float score(const Geometry& g, const float* q, const float* k) {
  return __fmul_rn(g.scale, dot(q, k, g.d));
}

__device__ inline float exp_shifted(float s, float m) { return expf(__fsub_rn(s, m)); }

__device__ inline float probability(float s, float m, float l) { return __fdiv_rn(exp_shifted(s, m), l); }

// tile[r * d + e] = src[(row0 + r) * stride + col0 + e] for r < n, e < d, by the whole block.
__device__ inline void load_rows(float* tile, const void* src, DType t, long row0, long n, long stride, long col0,
                                 long d) {
  for (long idx = threadIdx.x; idx < n * d; idx += blockDim.x) {
    const long r = idx / d, e = idx % d;
    tile[idx] = load(src, t, (row0 + r) * stride + col0 + e);
  }
}

std::size_t forward_shared_bytes(long tq, long tk, long d) {
  // query tile, key / value tile, o sums, scores, row max and sum
  return sizeof(float) * static_cast<std::size_t>(2 * tq * d + tk * d + tq * tk + 2 * tq);
}

std::size_t backward_shared_bytes(long tq, long tk, long d) {
  // keys, values, dK and dV sums; query and dout tiles; p' and ds; m, l and D per query
  return sizeof(float) * static_cast<std::size_t>(4 * tk * d + 2 * tq * d + 2 * tq * tk + 3 * tq);
}

// Halves the query tile down to 8, then the key tile down to 1, then the
// query tile down to 1, until the block's shared memory fits the budget.
void fit_tiles(Geometry& g, std::size_t (*bytes)(long, long, long), const char* op) {
  g.tile_q = std::min<long>(kMaxTile, g.positions);
  g.tile_k = std::min<long>(kMaxTile, g.positions);
  while (bytes(g.tile_q, g.tile_k, g.d) > kSharedBudget) {
    if (g.tile_q > 8) g.tile_q /= 2;
    else if (g.tile_k > 1) g.tile_k /= 2;
    else if (g.tile_q > 1) g.tile_q /= 2;
    else break;
  }
  GRADEQ_REQUIRE(bytes(g.tile_q, g.tile_k, g.d) <= kSharedBudget,
                 std::string(op) + ": head dimension " + std::to_string(g.d) + " is too large for the CUDA kernel");
}

Geometry geometry_of(const AttentionConfig& c, const Tensor& qkv) {
  Geometry g;
  g.rows = qkv.rows;
  g.width = qkv.cols / 3;
  g.heads = c.heads;
  g.d = g.width / c.heads;
  g.positions = c.positions;
  g.padding_idx = c.padding_idx;
  g.causal = c.causal;
  g.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(g.d)));
  return g;
}

unsigned grid_for(long items) { return static_cast<unsigned>(std::min<long>(items, 65535)); }

// ------------------------------------------------------------------ forward

__global__ void attention_forward_kernel(Geometry g, const void* qkv, DType tqkv, const float* ids, void* o,
                                         DType to, float* row_max, float* row_sum) {
  extern __shared__ float shared[];
  const long d = g.d, T = g.positions, tq = g.tile_q, tk = g.tile_k, stride = 3 * g.width;
  float* q_tile = shared;            // [tq, d]
  float* kv_tile = q_tile + tq * d;  // [tk, d]: keys, then values
  float* acc = kv_tile + tk * d;     // [tq, d]: o's float32 sums
  float* s_tile = acc + tq * d;      // [tq, tk]: scores, then p'
  float* m_row = s_tile + tq * tk;   // [tq]
  float* l_row = m_row + tq;         // [tq]

  const long query_tiles = (T + tq - 1) / tq;
  const long items = g.rows / T * g.heads * query_tiles;
  for (long item = blockIdx.x; item < items; item += gridDim.x) {
    const long q0 = item % query_tiles * tq, h = item / query_tiles % g.heads;
    const long first = item / (query_tiles * g.heads) * T;
    const long nq = min(tq, T - q0);
    const long key_end = g.causal ? q0 + nq : T;  // no later key is seen by the tile
    const long qcol = h * d, kcol = g.width + h * d, vcol = 2 * g.width + h * d;

    __syncthreads();  // the previous item is done with the tiles
    load_rows(q_tile, qkv, tqkv, first + q0, nq, stride, qcol, d);
    for (long idx = threadIdx.x; idx < nq * d; idx += blockDim.x) acc[idx] = 0.0f;
    for (long i = threadIdx.x; i < nq; i += blockDim.x) {
      m_row[i] = -INFINITY;
      l_row[i] = 0.0f;
    }

    // Passes 1 and 2: the scores of a key tile, then per query row (one
    // thread each, in key order) the max, or the sum of exp(s - m).
    for (int pass = 1; pass <= 2; ++pass)
      for (long k0 = 0; k0 < key_end; k0 += tk) {
        const long nk = min(tk, key_end - k0);
        __syncthreads();  // q_tile loaded; the previous key tile's readers are done
        load_rows(kv_tile, qkv, tqkv, first + k0, nk, stride, kcol, d);
        __syncthreads();
        for (long idx = threadIdx.x; idx < nq * nk; idx += blockDim.x) {
          const long i = idx / nk, j = idx % nk;
          if (sees(g, ids, first, q0 + i, k0 + j)) s_tile[i * tk + j] = score(g, q_tile + i * d, kv_tile + j * d);
        }
        __syncthreads();
        for (long i = threadIdx.x; i < nq; i += blockDim.x)
          for (long j = 0; j < nk; ++j) {
            if (!sees(g, ids, first, q0 + i, k0 + j)) continue;
            if (pass == 1) m_row[i] = fmaxf(m_row[i], s_tile[i * tk + j]);
            else l_row[i] += exp_shifted(s_tile[i * tk + j], m_row[i]);
          }
      }

    // Pass 3: p' of a key tile, then the value tile, then acc += p' v.
    for (long k0 = 0; k0 < key_end; k0 += tk) {
      const long nk = min(tk, key_end - k0);
      __syncthreads();  // m_row and l_row final; the previous value tile's readers are done
      load_rows(kv_tile, qkv, tqkv, first + k0, nk, stride, kcol, d);
      __syncthreads();
      for (long idx = threadIdx.x; idx < nq * nk; idx += blockDim.x) {
        const long i = idx / nk, j = idx % nk;
        float p = 0.0f;
        if (sees(g, ids, first, q0 + i, k0 + j))
          p = rounded_to(probability(score(g, q_tile + i * d, kv_tile + j * d), m_row[i], l_row[i]), to);
        s_tile[i * tk + j] = p;
      }
      __syncthreads();  // the keys are read
      load_rows(kv_tile, qkv, tqkv, first + k0, nk, stride, vcol, d);
      __syncthreads();
      for (long idx = threadIdx.x; idx < nq * d; idx += blockDim.x) {
        const long i = idx / d, e = idx % d;
        float a = acc[idx];
        for (long j = 0; j < nk; ++j)
          if (sees(g, ids, first, q0 + i, k0 + j)) a = fmaf(s_tile[i * tk + j], kv_tile[j * d + e], a);
        acc[idx] = a;
      }
    }

    __syncthreads();
    for (long idx = threadIdx.x; idx < nq * d; idx += blockDim.x) {
      const long i = idx / d, e = idx % d;
      store(o, to, (first + q0 + i) * g.width + h * d + e, acc[idx]);  // 0 where no key is seen
    }
    for (long i = threadIdx.x; i < nq; i += blockDim.x) {
      const long at = (first + q0 + i) * g.heads + h;
      const float l = l_row[i];
      row_max[at] = l == 0.0f ? 0.0f : m_row[i];
      row_sum[at] = l;
    }
  }
}

// ----------------------------------------------------------------- backward

// One block per (sample, head, key block). dq: split ? [key blocks, rows, D]
// with this block's partial written to slice kb : [rows, D] added to with atomicAdd.
__global__ void attention_backward_kernel(Geometry g, const void* qkv, DType tqkv, const float* ids, const void* o,
                                          DType to, const void* dout, DType tdo, const float* row_max,
                                          const float* row_sum, void* dqkv, DType tdx, float* dq, bool split) {
  extern __shared__ float shared[];
  const long d = g.d, T = g.positions, tq = g.tile_q, tk = g.tile_k, stride = 3 * g.width;
  float* k_tile = shared;             // [tk, d]
  float* v_tile = k_tile + tk * d;    // [tk, d]
  float* dk = v_tile + tk * d;        // [tk, d]: float32 sums
  float* dv = dk + tk * d;            // [tk, d]
  float* q_tile = dv + tk * d;        // [tq, d]
  float* g_tile = q_tile + tq * d;    // [tq, d]: dout
  float* p_tile = g_tile + tq * d;    // [tq, tk]: p' (dqkv's dtype)
  float* ds_tile = p_tile + tq * tk;  // [tq, tk]: ds (dqkv's dtype)
  float* m_row = ds_tile + tq * tk;   // [tq]
  float* l_row = m_row + tq;          // [tq]
  float* d_row = l_row + tq;          // [tq]: dout . o

  const long key_blocks = (T + tk - 1) / tk;
  const long items = g.rows / T * g.heads * key_blocks;
  const long slice = g.rows * g.width;
  for (long item = blockIdx.x; item < items; item += gridDim.x) {
    const long kb = item % key_blocks, h = item / key_blocks % g.heads;
    const long first = item / (key_blocks * g.heads) * T;
    const long k0 = kb * tk, nk = min(tk, T - k0);
    const long qcol = h * d, kcol = g.width + h * d, vcol = 2 * g.width + h * d;
    float* dq_out = split ? dq + kb * slice : dq;

    __syncthreads();  // the previous item is done with the tiles
    load_rows(k_tile, qkv, tqkv, first + k0, nk, stride, kcol, d);
    load_rows(v_tile, qkv, tqkv, first + k0, nk, stride, vcol, d);
    for (long idx = threadIdx.x; idx < nk * d; idx += blockDim.x) dk[idx] = dv[idx] = 0.0f;

    // Causal: the query tiles wholly before the block see none of its keys.
    for (long q0 = g.causal ? k0 / tq * tq : 0; q0 < T; q0 += tq) {
      const long nq = min(tq, T - q0);
      __syncthreads();  // the key block is loaded; the previous query tile's readers are done
      load_rows(q_tile, qkv, tqkv, first + q0, nq, stride, qcol, d);
      load_rows(g_tile, dout, tdo, first + q0, nq, g.width, h * d, d);
      for (long i = threadIdx.x; i < nq; i += blockDim.x) {
        const long row = first + q0 + i;
        m_row[i] = row_max[row * g.heads + h];
        l_row[i] = row_sum[row * g.heads + h];
        float s = 0.0f;  // as dot(), from global memory
        for (long e = 0; e < d; ++e)
          s = fmaf(load(dout, tdo, row * g.width + h * d + e), load(o, to, row * g.width + h * d + e), s);
        d_row[i] = s;
      }
      __syncthreads();
      for (long idx = threadIdx.x; idx < nq * nk; idx += blockDim.x) {
        const long i = idx / nk, j = idx % nk;
        float p_stored = 0.0f, ds = 0.0f;
        if (sees(g, ids, first, q0 + i, k0 + j) && l_row[i] != 0.0f) {
          const float p = probability(score(g, q_tile + i * d, k_tile + j * d), m_row[i], l_row[i]);
          p_stored = rounded_to(p, tdx);
          ds = rounded_to(p * (dot(g_tile + i * d, v_tile + j * d, d) - d_row[i]), tdx);
        }
        p_tile[i * tk + j] = p_stored;
        ds_tile[i * tk + j] = ds;
      }
      __syncthreads();
      // dK and dV of the block's keys, over the tile's queries in order.
      for (long idx = threadIdx.x; idx < nk * d; idx += blockDim.x) {
        const long j = idx / d, e = idx % d;
        float a_k = dk[idx], a_v = dv[idx];
        for (long i = 0; i < nq; ++i) {
          if (!sees(g, ids, first, q0 + i, k0 + j)) continue;
          a_k = fmaf(ds_tile[i * tk + j], q_tile[i * d + e], a_k);
          a_v = fmaf(p_tile[i * tk + j], g_tile[i * d + e], a_v);
        }
        dk[idx] = a_k;
        dv[idx] = a_v;
      }
      // The block's partial dQ of the tile's queries, over its keys in order.
      for (long idx = threadIdx.x; idx < nq * d; idx += blockDim.x) {
        const long i = idx / d, e = idx % d;
        float a = 0.0f;
        for (long j = 0; j < nk; ++j)
          if (sees(g, ids, first, q0 + i, k0 + j)) a = fmaf(ds_tile[i * tk + j], k_tile[j * d + e], a);
        const long at = (first + q0 + i) * g.width + h * d + e;
        if (split) dq_out[at] = a;  // this block's own slice: one writer
        else atomicAdd(dq_out + at, a);
      }
    }

    __syncthreads();
    for (long idx = threadIdx.x; idx < nk * d; idx += blockDim.x) {
      const long j = idx / d, e = idx % d, row = first + k0 + j;
      store(dqkv, tdx, row * stride + kcol + e, g.scale * dk[idx]);
      store(dqkv, tdx, row * stride + vcol + e, dv[idx]);
    }
  }
}

// dqkv's query columns = scale * the sum over the `splits` slices of dq
// [splits, rows, width], in slice order (one slice: the atomic sums).
__global__ void store_dq(const float* dq, long splits, long rows, long width, float scale, void* dqkv, DType t) {
  const long n = rows * width;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    float s = dq[i];
    for (long kb = 1; kb < splits; ++kb) s += dq[kb * n + i];
    store(dqkv, t, i / width * 3 * width + i % width, scale * s);
  }
}

}  // namespace

void CudaBackend::attention_forward(const AttentionConfig& c, const Tensor& qkv, const Tensor& ids, const Tensor& o,
                                    const Tensor& row_max, const Tensor& row_sum) {
  require_attention(c, qkv, ids, o, row_max, row_sum, "attention_forward");
  if (qkv.empty()) return;
  Geometry g = geometry_of(c, qkv);
  fit_tiles(g, forward_shared_bytes, "attention_forward");
  const long items = g.rows / g.positions * g.heads * ((g.positions + g.tile_q - 1) / g.tile_q);
  attention_forward_kernel<<<grid_for(items), kThreads, forward_shared_bytes(g.tile_q, g.tile_k, g.d)>>>(
      g, qkv.data, qkv.dtype, ids.empty() ? nullptr : static_cast<const float*>(ids.data), o.data, o.dtype,
      static_cast<float*>(row_max.data), static_cast<float*>(row_sum.data));
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::attention_backward(const AttentionConfig& c, const Tensor& qkv, const Tensor& ids, const Tensor& o,
                                     const Tensor& dout, const Tensor& row_max, const Tensor& row_sum,
                                     const Tensor& dqkv) {
  require_attention(c, qkv, ids, o, row_max, row_sum, "attention_backward");
  require_shape(dout, o.rows, o.cols, "attention_backward dout");
  require_shape(dqkv, qkv.rows, qkv.cols, "attention_backward dqkv");
  if (qkv.empty()) return;
  GRADEQ_REQUIRE(impl_->scratch.size() > static_cast<std::size_t>(kDqSlot),
                 "attention_backward: the CUDA backend has no scratch slot " + std::to_string(kDqSlot));
  Geometry g = geometry_of(c, qkv);
  fit_tiles(g, backward_shared_bytes, "attention_backward");
  const long key_blocks = (g.positions + g.tile_k - 1) / g.tile_k;
  const long splits = deterministic() ? key_blocks : 1;
  const long n = g.rows * g.width;  // the full [rows, D], every head's columns
  float* dq = scratch(splits * n, kDqSlot);
  GRADEQ_CUDA_CHECK(cudaMemset(dq, 0, static_cast<std::size_t>(splits * n) * sizeof(float)));
  const long items = g.rows / g.positions * g.heads * key_blocks;
  attention_backward_kernel<<<grid_for(items), kThreads, backward_shared_bytes(g.tile_q, g.tile_k, g.d)>>>(
      g, qkv.data, qkv.dtype, ids.empty() ? nullptr : static_cast<const float*>(ids.data), o.data, o.dtype, dout.data,
      dout.dtype, static_cast<const float*>(row_max.data), static_cast<const float*>(row_sum.data), dqkv.data,
      dqkv.dtype, dq, deterministic());
  GRADEQ_LAUNCH_CHECK();
  store_dq<<<blocks_for(n), kThreads>>>(dq, splits, g.rows, g.width, g.scale, dqkv.data, dqkv.dtype);
  GRADEQ_LAUNCH_CHECK();
}

}  // namespace gradeq
