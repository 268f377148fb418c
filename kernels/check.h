// check.h — argument checks for kernels, reporting file and line. A failed
// check is a programming error in the caller (wrong shapes, wrong lists) or
// a device call that failed, raised as gradeq::BackendError so the harness
// can report it, not crash. Must not depend on anything outside kernels/.
#pragma once

#include <span>
#include <stdexcept>
#include <string>

#include "kernels/backend.h"

namespace gradeq {

class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void backend_failure(const char* file, int line, const std::string& message) {
  throw BackendError(std::string(file) + ":" + std::to_string(line) + ": " + message);
}

}  // namespace gradeq

#define GRADEQ_REQUIRE(cond, message)                                    \
  do {                                                                   \
    if (!(cond)) ::gradeq::backend_failure(__FILE__, __LINE__, (message)); \
  } while (0)

namespace gradeq {

// t must be [rows, cols]; `what` names the argument in the message.
inline void require_shape(const Tensor& t, long rows, long cols, const char* what) {
  GRADEQ_REQUIRE(t.rows == rows && t.cols == cols,
                 std::string(what) + ": expected [" + std::to_string(rows) + ", " + std::to_string(cols) +
                     "], got [" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "]");
}

// A linear layer's bias (or its gradient): [1, out], or no tensor at all
// (Tensor{}: a layer without bias, as a tied head is).
inline void require_bias(const Tensor& b, long out, const char* what) {
  if (b.data == nullptr && b.rows == 0 && b.cols == 0) return;
  require_shape(b, 1, out, what);
}

// The losses a kernel computes: causal_lm is cross_entropy on labels the
// caller has shifted.
inline void require_kernel_loss(LossKind k) {
  GRADEQ_REQUIRE(k == LossKind::mse || k == LossKind::cross_entropy,
                 "loss_forward_backward: pass causal_lm's shifted labels as cross_entropy");
}

// copy_columns: the same rows, and both column ranges inside their tensors.
inline void require_column_ranges(const Tensor& src, long src_first, const Tensor& dst, long dst_first, long count) {
  GRADEQ_REQUIRE(src.rows == dst.rows, "copy_columns: " + std::to_string(src.rows) + " rows into " +
                                           std::to_string(dst.rows));
  GRADEQ_REQUIRE(count >= 0 && src_first >= 0 && dst_first >= 0 && src_first + count <= src.cols &&
                     dst_first + count <= dst.cols,
                 "copy_columns: columns out of range");
}

// embedding_forward / embedding_backward: ids [rows, 1] float32; the
// table (w or dw) [vocabulary, width]; the rows (y or dy) [rows, width].
// The ids' values are the caller's to keep in range (a device backend
// cannot read them without a copy back).
inline void require_embedding_shapes(const Tensor& ids, const Tensor& table, const Tensor& rows, const char* op) {
  require_shape(ids, rows.rows, 1, op);
  GRADEQ_REQUIRE(ids.dtype == DType::f32, std::string(op) + ": token ids are float32");
  GRADEQ_REQUIRE(table.cols == rows.cols, std::string(op) + ": the table's width is " + std::to_string(table.cols) +
                                              ", the rows' " + std::to_string(rows.cols));
}

// position_embedding_forward / _backward: the rows (x, y or dy) [rows,
// width], whole samples of `positions` rows; the table [>= positions, width].
inline void require_position_shapes(const Tensor& rows, const Tensor& table, long positions, const char* op) {
  GRADEQ_REQUIRE(positions > 0 && positions <= table.rows && rows.rows % positions == 0,
                 std::string(op) + ": " + std::to_string(rows.rows) + " rows are not whole samples of " +
                     std::to_string(positions) + " positions, or the table has fewer rows (" +
                     std::to_string(table.rows) + ")");
  GRADEQ_REQUIRE(table.cols == rows.cols, std::string(op) + ": the table's width is " + std::to_string(table.cols) +
                                              ", the rows' " + std::to_string(rows.cols));
}

// chunked_head_cross_entropy: x [rows, D], w and dw [V, D], targets [rows,
// 1], dx [rows, D], chunks of >= 1 rows and columns.
inline void require_chunked_head(const Tensor& x, const Tensor& w, const Tensor& targets, long row_chunk,
                                 long vocabulary_chunk, const Tensor& dx, const Tensor& dw) {
  GRADEQ_REQUIRE(row_chunk > 0 && vocabulary_chunk > 0,
                 "chunked_head_cross_entropy: chunks of " + std::to_string(row_chunk) + " rows and " +
                     std::to_string(vocabulary_chunk) + " columns; each needs >= 1");
  require_shape(w, w.rows, x.cols, "chunked_head_cross_entropy weight");
  require_shape(targets, x.rows, 1, "chunked_head_cross_entropy targets");
  require_shape(dx, x.rows, x.cols, "chunked_head_cross_entropy dx");
  require_shape(dw, w.rows, w.cols, "chunked_head_cross_entropy dw");
}

// attention_forward / _backward: qkv (and dqkv) [rows, 3D], whole samples
// of c.positions rows, D a multiple of c.heads; o (and dout) [rows, D];
// row_max, row_sum [1, rows * heads] float32; ids empty or [rows, 1].
inline void require_attention(const AttentionConfig& c, const Tensor& qkv, const Tensor& ids, const Tensor& o,
                              const Tensor& row_max, const Tensor& row_sum, const char* op) {
  GRADEQ_REQUIRE(c.heads > 0 && c.positions > 0 && qkv.cols % 3 == 0 && (qkv.cols / 3) % c.heads == 0,
                 std::string(op) + ": qkv has " + std::to_string(qkv.cols) + " columns; it needs 3 D, D a multiple of " +
                     std::to_string(c.heads) + " heads");
  GRADEQ_REQUIRE(qkv.rows % c.positions == 0, std::string(op) + ": " + std::to_string(qkv.rows) +
                                                  " rows are not whole samples of " + std::to_string(c.positions));
  require_shape(o, qkv.rows, qkv.cols / 3, op);
  require_shape(row_max, 1, qkv.rows * c.heads, op);
  require_shape(row_sum, 1, qkv.rows * c.heads, op);
  GRADEQ_REQUIRE(row_max.dtype == DType::f32 && row_sum.dtype == DType::f32,
                 std::string(op) + ": the row statistics are float32");
  if (!ids.empty()) {
    require_shape(ids, qkv.rows, 1, op);
    GRADEQ_REQUIRE(ids.dtype == DType::f32, std::string(op) + ": token ids are float32");
  }
}

// norm_forward / _backward: group norm's groups divide the columns and its
// positions the rows; batch and group norm's spatial (columns per channel)
// divides the columns, and group norm's groups divide its channels; layer
// and rms norm have spatial 1 (their affine is per column).
inline void require_norm(const NormConfig& c, const Tensor& x, const char* op) {
  const bool spatial_ok = c.spatial > 0 && x.cols % c.spatial == 0 &&
                          (c.spatial == 1 || c.kind == NormKind::batch || c.kind == NormKind::group);
  GRADEQ_REQUIRE(spatial_ok, std::string(op) + ": " + std::to_string(c.spatial) + " columns per channel do not fit " +
                                 std::to_string(x.cols) + " columns of this normalizer");
  GRADEQ_REQUIRE(c.kind != NormKind::group || (c.groups > 0 && (x.cols / c.spatial) % c.groups == 0 &&
                                                c.positions > 0 && x.rows % c.positions == 0),
                 std::string(op) + ": groups must divide channels and positions must divide rows");
}

// conv2d_*: a configuration PyTorch would run (channels, kernel, stride,
// dilation, groups >= 1, padding >= 0, groups dividing both channel
// counts, the kernel's reach within the padded input); x (or dx) [rows,
// C_in H W], y (or dy) [rows, C_out H_out W_out], w (or dw) [C_out, C_in /
// groups k k], b (or db) empty or [1, C_out].
inline void require_conv2d(const Conv2dConfig& c, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                           const char* op) {
  const long reach = c.dilation * (c.kernel - 1) + 1;
  GRADEQ_REQUIRE(c.in_channels > 0 && c.height > 0 && c.width > 0 && c.out_channels > 0 && c.kernel > 0 &&
                     c.stride > 0 && c.padding >= 0 && c.dilation > 0 && c.groups > 0 &&
                     c.in_channels % c.groups == 0 && c.out_channels % c.groups == 0 &&
                     c.height + 2 * c.padding >= reach && c.width + 2 * c.padding >= reach,
                 std::string(op) + ": not a convolution PyTorch would run (channels " + std::to_string(c.in_channels) +
                     " -> " + std::to_string(c.out_channels) + ", kernel " + std::to_string(c.kernel) + ", groups " +
                     std::to_string(c.groups) + " on " + std::to_string(c.height) + "x" + std::to_string(c.width) + ")");
  require_shape(x, x.rows, c.in_size(), op);
  require_shape(y, x.rows, c.out_size(), op);
  require_shape(w, c.out_channels, c.taps(), op);
  if (!b.empty()) require_bias(b, c.out_channels, op);
}

// avgpool_*: windows within the image; x (or dx) [rows, C H W], y (or dy)
// [rows, C H_out W_out].
inline void require_pool(const PoolConfig& c, const Tensor& x, const Tensor& y, const char* op) {
  GRADEQ_REQUIRE(c.channels > 0 && c.kernel_h > 0 && c.kernel_w > 0 && c.stride_h > 0 && c.stride_w > 0 &&
                     c.kernel_h <= c.height && c.kernel_w <= c.width,
                 std::string(op) + ": a " + std::to_string(c.kernel_h) + "x" + std::to_string(c.kernel_w) +
                     " window does not fit a " + std::to_string(c.height) + "x" + std::to_string(c.width) + " image");
  require_shape(x, x.rows, c.in_size(), op);
  require_shape(y, x.rows, c.out_size(), op);
}

// upsample_*: x (or dx) [rows, C H W], y (or dy) [rows, C 2H 2W].
inline void require_upsample(long channels, long height, long width, const Tensor& x, const Tensor& y,
                             const char* op) {
  GRADEQ_REQUIRE(channels > 0 && height > 0 && width > 0, std::string(op) + ": an empty image");
  require_shape(x, x.rows, channels * height * width, op);
  require_shape(y, x.rows, 4 * channels * height * width, op);
}

// The preconditions of the list ops, checked alike by every backend: the
// lists pair up, shapes agree, a compensation buffer has its buffer's dtype.
inline void require_accumulate_lists(std::span<const Tensor> dst, std::span<const Tensor> src,
                                     std::span<const Tensor> compensation) {
  GRADEQ_REQUIRE(dst.size() == src.size(), "accumulate: list lengths differ");
  GRADEQ_REQUIRE(compensation.empty() || compensation.size() == dst.size(), "accumulate: compensation list length");
  for (std::size_t t = 0; t < dst.size(); ++t) {
    require_shape(src[t], dst[t].rows, dst[t].cols, "accumulate");
    if (compensation.empty()) continue;
    require_shape(compensation[t], dst[t].rows, dst[t].cols, "accumulate compensation");
    GRADEQ_REQUIRE(compensation[t].dtype == dst[t].dtype, "accumulate: compensation has the buffer's dtype");
  }
}

// Which optimizer state a step uses, after checking that the lists pair up
// and that master weights and state are float32.
struct OptimizerStateUse {
  bool first = false, second = false;
};

inline OptimizerStateUse require_optimizer_lists(const OptimizerStep& s, std::span<const Tensor> params,
                                                 std::span<const Tensor> grads, std::span<const Tensor> first_moment,
                                                 std::span<const Tensor> second_moment) {
  const OptimizerStateUse use{s.kind != OptimizerKind::sgd || s.momentum != 0.0f, s.kind != OptimizerKind::sgd};
  GRADEQ_REQUIRE(params.size() == grads.size(), "optimizer_step: list lengths differ");
  GRADEQ_REQUIRE(!use.first || first_moment.size() == params.size(), "optimizer_step: missing first optimizer state");
  GRADEQ_REQUIRE(!use.second || second_moment.size() == params.size(), "optimizer_step: missing second optimizer state");
  for (std::size_t t = 0; t < params.size(); ++t) {
    require_shape(grads[t], params[t].rows, params[t].cols, "optimizer_step grad");
    GRADEQ_REQUIRE(params[t].dtype == DType::f32, "optimizer_step: master weights are float32");
    GRADEQ_REQUIRE((!use.first || first_moment[t].dtype == DType::f32) && (!use.second || second_moment[t].dtype == DType::f32),
                   "optimizer_step: optimizer state is float32");
  }
  return use;
}

}  // namespace gradeq
