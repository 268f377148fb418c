// backend_mutants.cpp — kernel bugs as one-op ForwardingBackends; the
// comment above each names the bug and where it shipped (docs/BUGS.md).
#include "kernels/mutants/backend_mutants.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "kernels/forwarding_backend.h"
#if GRADEQ_HAVE_CUDA
#include "kernels/mutants/racy_bias_cuda.h"
#endif

namespace gradeq {
namespace {

// B7 — overwrite instead of accumulate: the bias gradient is written, not
// added, so only the last micro-batch's survives (llm.c PR 163, PR 408;
// ggml PR 949).
class OverwritesBiasGradient : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override {
    const Tensor bias[] = {db};
    inner_.zero(bias);  // dbias = ... instead of +=
    inner_.linear_backward_weight(dy, x, dw, db);
  }
};

// B16 — low-precision accumulation buffer: gradients accumulate in
// bfloat16 although the buffer is declared float32: 256 + 1 = 256
// (Megatron fork PR 146, issue 149; DeepSpeed 1800, PR 2847).
class BfloatAccumulation : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override {
    inner_.linear_backward_weight(dy, x, dw, db);
    to_bfloat16({dw, db});
  }
  void norm_backward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& dy,
                     const Tensor& saved_mean, const Tensor& saved_rstd, const Tensor& dx, const Tensor& dgamma,
                     const Tensor& dbeta) override {
    inner_.norm_backward(c, x, gamma, dy, saved_mean, saved_rstd, dx, dgamma, dbeta);
    to_bfloat16({dgamma, dbeta});
  }
  void accumulate(std::span<const Tensor> dst, std::span<const Tensor> src,
                  std::span<const Tensor> compensation) override {
    inner_.accumulate(dst, src, compensation);
    to_bfloat16(std::vector<Tensor>(dst.begin(), dst.end()));
  }

 private:
  // What a bfloat16 buffer would hold: round through a bfloat16 tensor.
  void to_bfloat16(const std::vector<Tensor>& ts) {
    for (const Tensor& t : ts) {
      if (t.empty() || t.dtype != DType::f32) continue;
      Tensor narrow = inner_.allocate(t.rows, t.cols, DType::bf16);
      inner_.convert(t, narrow);
      inner_.convert(narrow, t);
      inner_.release(narrow);
    }
  }
};

// B28 — the multi-tensor accumulate skips the last tensor of its list:
// chunk bookkeeping off by one (the tensors are walked in chunks and the
// last chunk's count is taken one short). Staged accumulation adds each
// micro-batch's gradients with it, so one parameter never accumulates.
class AccumulateSkipsLastTensor : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void accumulate(std::span<const Tensor> dst, std::span<const Tensor> src,
                  std::span<const Tensor> compensation) override {
    if (dst.empty()) return;
    const std::size_t n = dst.size() - 1;
    inner_.accumulate(dst.first(n), src.first(n), compensation.empty() ? compensation : compensation.first(n));
  }
};

// B19 on a host backend — unsynchronized concurrent accumulate: the bias
// gradient is summed by several row slices, each adding its partial into
// db with a plain read-modify-write. A host backend has no concurrent
// blocks, so the race's outcome is modelled: each slice after the first
// reads, with probability 1/2, the value from before the previous slice's
// write, and that write is lost; the draws differ run to run, as a race's
// interleavings do. (The CUDA backend's B19 is the real racy kernel.)
class LostUpdateBiasGradient : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) override {
    if (db.empty()) return inner_.linear_backward_weight(dy, x, dw, db);  // no bias (a tied head)
    Tensor discarded = inner_.allocate(db.rows, db.cols, DType::f32);
    inner_.fill(discarded, 0.0f);
    inner_.linear_backward_weight(dy, x, dw, discarded);  // dw as the kernel computes it
    inner_.release(discarded);
    std::vector<float> g(static_cast<std::size_t>(dy.size())), b(static_cast<std::size_t>(db.size()));
    inner_.download(dy, g);
    inner_.download(db, b);
    const long slices = std::min(dy.rows, 4L), per = slices > 0 ? (dy.rows + slices - 1) / slices : 0;
    std::bernoulli_distribution raced(0.5);
    for (long c = 0; c < dy.cols; ++c) {
      float current = b[static_cast<std::size_t>(c)], previous_read = current;
      for (long s = 0; s < slices; ++s) {
        float partial = 0.0f;
        for (long r = s * per; r < std::min(dy.rows, (s + 1) * per); ++r) partial += g[static_cast<std::size_t>(r * dy.cols + c)];
        const float read = s > 0 && raced(rng_) ? previous_read : current;
        previous_read = read;
        current = read + partial;
      }
      b[static_cast<std::size_t>(c)] = current;
    }
    inner_.upload(db, b);
  }

 private:
  std::mt19937 rng_{std::random_device{}()};
};

template <class B>
BackendWrapper backend_of() {
  return [](Backend& inner) { return std::make_unique<B>(inner); };
}

}  // namespace

// An embedding backward computed on the host from the backend's tensors, in
// one of its buggy forms; any backend (the tensors go through download
// and upload).
enum class EmbeddingBug { lost_updates, bfloat16_rows };
void buggy_embedding_backward(Backend& b, const Tensor& ids, const Tensor& dy, long padding_idx, const Tensor& dw,
                              EmbeddingBug bug) {
  std::vector<float> id(static_cast<std::size_t>(ids.size())), g(static_cast<std::size_t>(dy.size())),
      out(static_cast<std::size_t>(dw.size()));
  b.download(ids, id);
  b.download(dy, g);
  b.download(dw, out);
  const long width = dy.cols;
  // Lost updates: of a token's rows only the last one's add survives, as
  // when every thread reads the row before any writes it back.
  std::vector<long> last(static_cast<std::size_t>(dw.rows), -1);
  for (long r = 0; r < dy.rows; ++r) last[static_cast<std::size_t>(id[static_cast<std::size_t>(r)])] = r;
  for (long r = 0; r < dy.rows; ++r) {
    const auto v = static_cast<long>(id[static_cast<std::size_t>(r)]);
    if (v == padding_idx) continue;
    if (bug == EmbeddingBug::lost_updates && last[static_cast<std::size_t>(v)] != r) continue;
    for (long c = 0; c < width; ++c) {
      float& o = out[static_cast<std::size_t>(v * width + c)];
      o += g[static_cast<std::size_t>(r * width + c)];
      if (bug == EmbeddingBug::bfloat16_rows) o = round_to_bf16(o);
    }
  }
  b.upload(dw, out);
}

// B29 — embedding backward without atomics: threads += into the row of a
// repeated token and overwrite each other's adds (llm.c
// dev/cuda/encoder_backward.cu kernel1, replaced by a deterministic
// bucketed sum in PR 442). Modelled: each token keeps one row's add.
class EmbeddingLostUpdates : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void embedding_backward(const Tensor& ids, const Tensor& dy, long padding_idx, const Tensor& dw) override {
    buggy_embedding_backward(inner_, ids, dy, padding_idx, dw, EmbeddingBug::lost_updates);
  }
};

// B30 — the padding row receives gradient: padding_idx ignored by the
// backward (PyTorch issues 26302, 28716).
class EmbeddingPaddingRowUpdated : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void embedding_backward(const Tensor& ids, const Tensor& dy, long, const Tensor& dw) override {
    inner_.embedding_backward(ids, dy, -1, dw);
  }
};

// B31 — the embedding gradient read-modify-written in bfloat16, row by
// row: increments drop once a row's sum nears 256 (tt-metal PR 53386;
// MXNet 17703 in float16).
class EmbeddingBfloat16Rows : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void embedding_backward(const Tensor& ids, const Tensor& dy, long padding_idx, const Tensor& dw) override {
    buggy_embedding_backward(inner_, ids, dy, padding_idx, dw, EmbeddingBug::bfloat16_rows);
  }
};

// B35 — a chunked head's weight gradient assigned, not added, over its
// blocks of rows: each block's dz^T x overwrites the chunk's sum, so the
// buffer gets the last block's alone. The accumulation over row chunks is
// where fused linear cross-entropy kernels have gone wrong: a bfloat16
// accumulator across the chunks (axolotl PR 1601 on efficient_cross_entropy;
// Liger-Kernel PR 1391); Liger's Ascend path copies chunk 0 and adds the
// rest (PR 1222), the branch an overwrite takes; assigning where one
// accumulates is the class of TransformerEngine 3437. Modelled with the
// correct kernel: dx and the loss from all the rows, the weight gradient
// from the last block.
class ChunkedHeadOverwritesAcrossChunks : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  double chunked_head_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& targets, float scale,
                                    long row_chunk, long vocabulary_chunk, const Tensor& dx,
                                    const Tensor& dw) override {
    Tensor discarded = inner_.allocate(dw.rows, dw.cols, DType::f32);
    const Tensor zeroed[] = {discarded};
    inner_.zero(zeroed);
    const double loss =
        inner_.chunked_head_cross_entropy(x, w, targets, scale, row_chunk, vocabulary_chunk, dx, discarded);
    inner_.release(discarded);
    if (row_chunk <= 0 || x.rows <= row_chunk) {  // one block: nothing to overwrite
      const double again = inner_.chunked_head_cross_entropy(x, w, targets, scale, row_chunk, vocabulary_chunk,
                                                             dx, dw);
      return (void)again, loss;
    }
    const long first = (x.rows - 1) / row_chunk * row_chunk, n = x.rows - first;
    Tensor last_x = last_rows(x, first, n), last_targets = last_rows(targets, first, n);
    Tensor last_dx = inner_.allocate(n, dx.cols, dx.dtype);
    (void)inner_.chunked_head_cross_entropy(last_x, w, last_targets, scale, row_chunk, vocabulary_chunk, last_dx, dw);
    for (Tensor* t : {&last_x, &last_targets, &last_dx}) inner_.release(*t);
    return loss;
  }

 private:
  // Rows [first, first + n) of t, copied into a tensor of their own.
  Tensor last_rows(const Tensor& t, long first, long n) {
    std::vector<float> all(static_cast<std::size_t>(t.size()));
    inner_.download(t, all);
    Tensor out = inner_.allocate(n, t.cols, t.dtype);
    inner_.upload(out, std::span<const float>(all).subspan(static_cast<std::size_t>(first * t.cols),
                                                             static_cast<std::size_t>(n * t.cols)));
    return out;
  }
};

// The backend's tensor as host floats, and back (rounded to its dtype).
std::vector<float> host_copy(Backend& b, const Tensor& t) {
  std::vector<float> out(static_cast<std::size_t>(t.size()));
  b.download(t, out);
  return out;
}

// B36 — attention's backward without its causal mask: the probabilities
// above the diagonal are recomputed, not zeroed, so dS is not zero there
// (llm.c softmax_autoregressive_backward zeroes them explicitly; the
// FlashAttention tests check a causal backward against a masked one).
// Modelled with the correct kernel: backward as if bidirectional, from the
// causal forward's row max and sum.
class AttentionBackwardWithoutCausalMask : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void attention_backward(const AttentionConfig& c, const Tensor& qkv, const Tensor& ids, const Tensor& o,
                          const Tensor& dout, const Tensor& row_max, const Tensor& row_sum,
                          const Tensor& dqkv) override {
    AttentionConfig unmasked = c;
    unmasked.causal = false;
    inner_.attention_backward(unmasked, qkv, ids, o, dout, row_max, row_sum, dqkv);
  }
};

// B37 — 1/sqrt(d) applied twice: the scores' scale applied in backward to
// dS and again to dQ and dK (the FlashAttention tests compare against a
// reference scaled once). dQ and dK come out c times too small.
class AttentionScaleTwice : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void attention_backward(const AttentionConfig& c, const Tensor& qkv, const Tensor& ids, const Tensor& o,
                          const Tensor& dout, const Tensor& row_max, const Tensor& row_sum,
                          const Tensor& dqkv) override {
    inner_.attention_backward(c, qkv, ids, o, dout, row_max, row_sum, dqkv);
    const long width = dqkv.cols / 3;
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(width / c.heads)));
    std::vector<float> g = host_copy(inner_, dqkv);
    for (long r = 0; r < dqkv.rows; ++r)
      for (long col = 0; col < 2 * width; ++col) g[static_cast<std::size_t>(r * dqkv.cols + col)] *= scale;
    inner_.upload(dqkv, g);
  }
};

// B38 — dQ accumulated into a buffer zeroed short of head_dim: the fp32
// dq_accum zeroed to the head dimension rounded down to 32 while the
// kernel writes every column, so each head's columns past it start from
// what the previous call left there (FlashAttention PR 2896: head_dim 72
// and 104 read a stale tail; only dQ was wrong). At head_dim < 32 the
// whole head is stale; at a multiple of 32 nothing is, and nothing shows.
class AttentionStaleDqTail : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void attention_backward(const AttentionConfig& c, const Tensor& qkv, const Tensor& ids, const Tensor& o,
                          const Tensor& dout, const Tensor& row_max, const Tensor& row_sum,
                          const Tensor& dqkv) override {
    inner_.attention_backward(c, qkv, ids, o, dout, row_max, row_sum, dqkv);
    const long width = dqkv.cols / 3, d = width / c.heads, zeroed = d / 32 * 32;
    std::vector<float> g = host_copy(inner_, dqkv);
    std::vector<float> now(static_cast<std::size_t>(dqkv.rows * width));
    for (long r = 0; r < dqkv.rows; ++r)
      for (long col = 0; col < width; ++col) {
        float& dq = g[static_cast<std::size_t>(r * dqkv.cols + col)];
        now[static_cast<std::size_t>(r * width + col)] = dq;
        const std::size_t left = static_cast<std::size_t>(r * width + col);
        if (col % d >= zeroed && left < stale_.size()) dq += stale_[left];
      }
    stale_ = std::move(now);
    inner_.upload(dqkv, g);
  }

 private:
  std::vector<float> stale_;  // the previous call's dq accumulator, [rows, D]
};

// B39 — D = rowsum(dO o) from a stale output: the output read before this
// pass wrote it (FlashAttention PR 2481: D read from a half-written dO; dQ
// and dK wrong, dV right). Modelled: D from the previous call's output
// (zeros at the first call, a buffer never written).
class AttentionStaleOutput : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void attention_backward(const AttentionConfig& c, const Tensor& qkv, const Tensor& ids, const Tensor& o,
                          const Tensor& dout, const Tensor& row_max, const Tensor& row_sum,
                          const Tensor& dqkv) override {
    std::vector<float> stale(static_cast<std::size_t>(o.size()), 0.0f);
    std::copy_n(previous_.begin(), std::min(previous_.size(), stale.size()), stale.begin());
    previous_ = host_copy(inner_, o);
    Tensor old = inner_.allocate(o.rows, o.cols, o.dtype);
    inner_.upload(old, stale);
    inner_.attention_backward(c, qkv, ids, old, dout, row_max, row_sum, dqkv);
    inner_.release(old);
  }

 private:
  std::vector<float> previous_;
};

// B40 — no key-padding mask: padded keys attended to. Under per-micro-
// batch padding a sample then sees a different number of padded keys in a
// micro-batch and in the whole batch (inference from dynamic padding,
// DataCollatorWithPadding). A causal query never reaches a right-padded
// key, so only bidirectional attention shows it.
class AttentionWithoutPaddingMask : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void attention_forward(const AttentionConfig& c, const Tensor& qkv, const Tensor& ids, const Tensor& o,
                         const Tensor& row_max, const Tensor& row_sum) override {
    inner_.attention_forward(unmasked(c), qkv, ids, o, row_max, row_sum);
  }
  void attention_backward(const AttentionConfig& c, const Tensor& qkv, const Tensor& ids, const Tensor& o,
                          const Tensor& dout, const Tensor& row_max, const Tensor& row_sum,
                          const Tensor& dqkv) override {
    inner_.attention_backward(unmasked(c), qkv, ids, o, dout, row_max, row_sum, dqkv);
  }

 private:
  static AttentionConfig unmasked(AttentionConfig c) {
    c.padding_idx = -1;
    return c;
  }
};

namespace {

// ---- convolution (B41-B45)

// A tensor of the inner backend holding `values` (the caller releases it).
Tensor uploaded(Backend& b, long rows, long cols, DType t, const std::vector<float>& values) {
  Tensor out = b.allocate(rows, cols, t);
  b.upload(out, values);
  return out;
}

// x's images padded explicitly to (H + 2p + extra) x (W + 2p + extra), the
// padding's pixels from `pad(n, channel plane, iy, ix)`: a convolution of
// the result with padding 0 reads what a kernel with that padding rule
// reads.
template <class Pad>
std::vector<float> padded_images(const Conv2dConfig& c, const std::vector<float>& x, long samples, long extra, Pad&& pad) {
  const long ph = c.height + 2 * c.padding + extra, pw = c.width + 2 * c.padding + extra, plane = c.height * c.width;
  std::vector<float> out(static_cast<std::size_t>(samples * c.in_channels * ph * pw), 0.0f);
  for (long n = 0; n < samples; ++n)
    for (long ch = 0; ch < c.in_channels; ++ch) {
      const float* image = x.data() + (n * c.in_channels + ch) * plane;
      for (long y = 0; y < ph; ++y)
        for (long xx = 0; xx < pw; ++xx) {
          const long iy = y - c.padding, ix = xx - c.padding;
          const bool inside = iy >= 0 && iy < c.height && ix >= 0 && ix < c.width;
          out[static_cast<std::size_t>(((n * c.in_channels + ch) * ph + y) * pw + xx)] =
              inside ? image[iy * c.width + ix] : pad(image, iy, ix);
        }
    }
  return out;
}

Conv2dConfig unpadded(Conv2dConfig c, long extra) {
  c.height += 2 * c.padding + extra;
  c.width += 2 * c.padding + extra;
  c.padding = 0;
  return c;
}

// B41 — the weight gradient's split reduction accumulated into an
// uninitialised buffer: the large-tensor path sums its splits into a
// workspace nobody zeroed, so each call adds what the previous call left
// there (PyTorch PR 72157). Modelled: the product added with the previous
// call's product (nothing at the first call, as fresh memory often is).
class ConvWeightGradientStaleSplit : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void conv2d_backward_weight(const Conv2dConfig& c, const Tensor& dy, const Tensor& x, const Tensor& dw,
                              const Tensor& db) override {
    Tensor fresh = inner_.allocate(dw.rows, dw.cols, DType::f32);
    const Tensor t[] = {fresh};
    inner_.zero(t);
    inner_.conv2d_backward_weight(c, dy, x, fresh, db);
    std::vector<float> product = host_copy(inner_, fresh), sum = host_copy(inner_, dw);
    for (std::size_t i = 0; i < sum.size(); ++i)
      sum[i] += product[i] + (i < workspace_.size() ? workspace_[i] : 0.0f);
    inner_.upload(dw, sum);
    workspace_ = std::move(product);
    inner_.release(fresh);
  }

 private:
  std::vector<float> workspace_;
};

// B42 — beta = 0 across micro-batches: cuDNN writes dst = alpha computed +
// beta prior, and a wgrad called with beta = 0 overwrites the gradient
// buffer: only the last micro-batch's weight gradient survives (cuDNN's
// API semantics).
class ConvWeightGradientBetaZero : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void conv2d_backward_weight(const Conv2dConfig& c, const Tensor& dy, const Tensor& x, const Tensor& dw,
                              const Tensor& db) override {
    const Tensor t[] = {dw};
    inner_.zero(t);
    inner_.conv2d_backward_weight(c, dy, x, dw, db);
  }
};

// B43 — a grouped convolution's weight gradient indexing the wrong group:
// every group's filter gradient reads the input channels of group 0
// (PyTorch 51430, wrong weight gradients with groups > 1). One group: no
// difference.
class ConvWeightGradientGroupZero : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void conv2d_backward_weight(const Conv2dConfig& c, const Tensor& dy, const Tensor& x, const Tensor& dw,
                              const Tensor& db) override {
    if (c.groups == 1) return inner_.conv2d_backward_weight(c, dy, x, dw, db);
    std::vector<float> v = host_copy(inner_, x);
    const long per_group = c.in_per_group() * c.height * c.width;
    for (long n = 0; n < x.rows; ++n)
      for (long g = 1; g < c.groups; ++g)
        std::copy_n(v.begin() + n * x.cols, per_group, v.begin() + n * x.cols + g * per_group);
    Tensor wrong = uploaded(inner_, x.rows, x.cols, x.dtype, v);
    inner_.conv2d_backward_weight(c, dy, wrong, dw, db);
    inner_.release(wrong);
  }
};

// B44 — a halo off by one at the image border: the kernel bounds-checks
// the flat index within the channel's plane instead of the row and column,
// so a tap left of column 0 reads the last pixel of the row above and a
// tap right of the last column the first pixel of the row below, where
// zeros belong. Forward only.
class ConvHaloReadsNeighbour : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void conv2d_forward(const Conv2dConfig& c, const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& y) override {
    if (c.padding == 0) return inner_.conv2d_forward(c, x, w, b, y);
    const long plane = c.height * c.width;
    const std::vector<float> v = padded_images(c, host_copy(inner_, x), x.rows, 0, [&](const float* image, long iy, long ix) {
      if (iy < 0 || iy >= c.height) return 0.0f;
      const long flat = iy * c.width + ix;
      return flat >= 0 && flat < plane ? image[flat] : 0.0f;
    });
    const Conv2dConfig u = unpadded(c, 0);
    Tensor padded = uploaded(inner_, x.rows, u.in_size(), x.dtype, v);
    inner_.conv2d_forward(u, padded, w, b, y);
    inner_.release(padded);
  }
};

// B45 — the output size rounded the wrong way: the kernel takes H_out =
// ceil((H + 2p - d (k - 1) - 1) / s) + 1 where PyTorch floors, and writes
// its planes with that stride into the output the caller sized: every
// channel's plane after the first lands shifted. Only where the division
// has a remainder (stride 2 with an odd numerator: a 3x3, padding 1 on an
// even image, a 2x2 or padding 0 on an odd one). Forward only.
class ConvOutputSizeRoundedUp : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void conv2d_forward(const Conv2dConfig& c, const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& y) override {
    const long reach = c.dilation * (c.kernel - 1) + 1;
    const long rem_h = (c.height + 2 * c.padding - reach) % c.stride, rem_w = (c.width + 2 * c.padding - reach) % c.stride;
    if (rem_h == 0 && rem_w == 0) return inner_.conv2d_forward(c, x, w, b, y);
    // Extra zero rows and columns at the bottom and right until the floor is the ceiling.
    const long extra = std::max(rem_h ? c.stride - rem_h : 0L, rem_w ? c.stride - rem_w : 0L);
    Conv2dConfig u = unpadded(c, extra);
    const std::vector<float> v = padded_images(c, host_copy(inner_, x), x.rows, extra, [](const float*, long, long) { return 0.0f; });
    Tensor padded = uploaded(inner_, x.rows, u.in_size(), x.dtype, v);
    Tensor big = inner_.allocate(x.rows, u.out_size(), y.dtype);
    inner_.conv2d_forward(u, padded, w, b, big);
    std::vector<float> out = host_copy(inner_, big);
    out.resize(static_cast<std::size_t>(y.size()));
    inner_.upload(y, out);
    inner_.release(big);
    inner_.release(padded);
  }
};

// B46 — max pooling's backward routing to the wrong tie: the winner
// search compares with >= instead of >, so a window's dy goes to its last
// largest value where PyTorch takes the first. Backward only.
class MaxPoolLastTie : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void maxpool_backward(const PoolConfig& c, const Tensor& x, const Tensor& dy, const Tensor& dx) override {
    const std::vector<float> xv = host_copy(inner_, x), g = host_copy(inner_, dy);
    std::vector<float> out(static_cast<std::size_t>(dx.size()), 0.0f);
    const long ho = c.out_height(), wo = c.out_width();
    for (long n = 0; n < x.rows; ++n)
      for (long ch = 0; ch < c.channels; ++ch)
        for (long oy = 0; oy < ho; ++oy)
          for (long ox = 0; ox < wo; ++ox) {
            long best = -1;
            for (long ky = 0; ky < c.kernel_h; ++ky)
              for (long kx = 0; kx < c.kernel_w; ++kx) {
                const long i = n * c.in_size() + (ch * c.height + oy * c.stride_h + ky) * c.width + ox * c.stride_w + kx;
                if (best < 0 || xv[static_cast<std::size_t>(i)] >= xv[static_cast<std::size_t>(best)]) best = i;
              }
            out[static_cast<std::size_t>(best)] += g[static_cast<std::size_t>(n * c.out_size() + (ch * ho + oy) * wo + ox)];
          }
    inner_.upload(dx, out);
  }
};

}  // namespace

std::vector<BackendMutant> pool_op_mutants() {
  return {{{"B46", "max pooling's backward routes dy to a window's last largest value, not its first",
            "the >= for > of a hand-written winner search (PyTorch takes the first)"},
           backend_of<MaxPoolLastTie>()}};
}

std::vector<BackendMutant> single_process_backend_mutants() {
  std::vector<BackendMutant> out = {
      {{"B7", "overwrite instead of accumulate: dbias = instead of +=", "llm.c PR 163, PR 408; ggml PR 949"},
       backend_of<OverwritesBiasGradient>()},
      {{"B16", "accumulation in bfloat16 behind a float32 buffer",
        "Megatron fork PR 146, issue 149; DeepSpeed 1800, PR 2847"},
       backend_of<BfloatAccumulation>()},
      {{"B28", "the multi-tensor accumulate skips the last tensor of its list (chunk count off by one)",
        "seen trying a user's own accumulate kernel through the installed package"},
       backend_of<AccumulateSkipsLastTensor>()},
      {{"B29", "embedding backward without atomics: a repeated token's adds overwrite each other",
        "llm.c dev/cuda/encoder_backward.cu kernel1; PR 442"},
       backend_of<EmbeddingLostUpdates>()},
      {{"B30", "the padding row of the token embedding receives gradient", "PyTorch issues 26302, 28716"},
       backend_of<EmbeddingPaddingRowUpdated>()},
      {{"B31", "the embedding gradient read-modify-written in bfloat16, row by row",
        "tt-metal PR 53386; MXNet 17703"},
       backend_of<EmbeddingBfloat16Rows>()},
      {{"B35", "a chunked head's weight gradient assigned over its row blocks: the last block's alone survives",
        "the chunk accumulation of fused linear cross-entropy (axolotl PR 1601, Liger-Kernel PRs 1391 and 1222); "
        "the class of TransformerEngine 3437"},
       backend_of<ChunkedHeadOverwritesAcrossChunks>()},
  };
  for (BackendMutant& m : attention_op_mutants()) out.push_back(std::move(m));
  for (BackendMutant& m : conv_op_mutants()) out.push_back(std::move(m));
  return out;
}

std::vector<BackendMutant> conv_op_mutants() {
  return {
      {{"B41", "the conv weight gradient's split reduction accumulated into an uninitialised buffer",
        "PyTorch PR 72157"},
       backend_of<ConvWeightGradientStaleSplit>()},
      {{"B42", "the conv weight gradient written with beta = 0 across micro-batches: overwrite, not accumulate",
        "cuDNN's dst = alpha computed + beta prior"},
       backend_of<ConvWeightGradientBetaZero>()},
      {{"B43", "a grouped convolution's weight gradient reads group 0's input channels for every group",
        "PyTorch 51430"},
       backend_of<ConvWeightGradientGroupZero>()},
      {{"B44", "a convolution's halo off by one: padding taps read the neighbouring row's pixel",
        "the flat-index bounds check of hand-written convolutions"},
       backend_of<ConvHaloReadsNeighbour>()},
      {{"B45", "a strided convolution's output size rounded up, its planes written at that stride",
        "floor vs ceil in output-size arithmetic (PyTorch's ceil_mode is the pools' option)"},
       backend_of<ConvOutputSizeRoundedUp>()},
  };
}

std::vector<BackendMutant> attention_op_mutants() {
  return {
      {{"B36", "attention's backward without its causal mask: dS not zeroed above the diagonal",
        "llm.c softmax_autoregressive_backward (explicit zeroing); FlashAttention's causal tests"},
       backend_of<AttentionBackwardWithoutCausalMask>()},
      {{"B37", "attention's 1/sqrt(d) applied twice in backward: dQ and dK scaled again",
        "FlashAttention's tests (a reference scaled once)"},
       backend_of<AttentionScaleTwice>()},
      {{"B38", "dQ accumulated into a buffer zeroed short of head_dim: a stale tail per head",
        "FlashAttention PR 2896"},
       backend_of<AttentionStaleDqTail>()},
      {{"B39", "attention's D = rowsum(dO o) from a stale output: dQ and dK wrong, dV right",
        "FlashAttention PR 2481"},
       backend_of<AttentionStaleOutput>()},
      {{"B40", "no key-padding mask: padded keys attended to under per-micro-batch padding",
        "inference from dynamic padding (DataCollatorWithPadding)"},
       backend_of<AttentionWithoutPaddingMask>()},
  };
}

BackendMutant race_mutant_for(const Backend& backend) {
  BackendMutant race{{"B19", "unsynchronized concurrent accumulate: several slices += into one bias gradient",
                      "kernel-level race (docs/BUGS.md)"},
                     backend_of<LostUpdateBiasGradient>()};
#if GRADEQ_HAVE_CUDA
  if (backend.name() == "cuda") race.wrap = [](Backend&) { return make_racy_bias_cuda_backend(); };
#endif
  if (backend.name() != "cuda") race.bug += " (race outcome modelled on the host)";
  return race;
}

}  // namespace gradeq
