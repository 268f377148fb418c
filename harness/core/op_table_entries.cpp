// op_table_entries.cpp — the op table's entries, and the table. Each entry
// is one small class: its inputs, its outputs, the op, and the reference op
// with T = Bounded over the values the backend actually holds (inputs
// rounded to their dtype by the upload), so the comparison needs no
// allowance for input rounding.
#include "harness/core/op_table.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include "harness/core/op_table_entry.h"
#include "harness/core/training_loop.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/norm_geometry.h"
#include "reference/attention.h"
#include "reference/conv.h"
#include "reference/pool.h"
#include "reference/layers.h"
#include "reference/losses.h"
#include "reference/optimizers.h"

namespace gradeq {
namespace {

using ref::Bounded;
using ref::Matrix;
using namespace op_table_entry;

// ------------------------------------------------------------------ linear

class LinearForward : public TableOp {
 public:
  LinearForward(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed) {
    x_ = input(random(s.rows, s.in), t);
    w_ = input(random(s.out, s.in), t);
    b_ = input(random(1, s.out), t);
    y_ = output(s.rows, s.out, t, false);
    flops = 2.0 * s.rows * s.in * s.out;
    bytes = bytes_of(t) * (s.rows * s.in + s.out * s.in + s.out + s.rows * s.out);
  }
  void run() override { backend_.linear_forward(x_, w_, b_, y_); }
  std::vector<Expectation> expected() override {
    return {{"y", stored(ref::linear_forward(held(x_), held(w_), held(b_)), ref::Storage::compute), &y_}};
  }

 private:
  Tensor x_, w_, b_, y_;
};

class LinearBackwardData : public TableOp {
 public:
  LinearBackwardData(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed) {
    dy_ = input(random(s.rows, s.out), t);
    w_ = input(random(s.out, s.in), t);
    dx_ = output(s.rows, s.in, t, false);
    flops = 2.0 * s.rows * s.in * s.out;
    bytes = bytes_of(t) * (s.rows * s.out + s.out * s.in + s.rows * s.in);
  }
  void run() override { backend_.linear_backward_data(dy_, w_, dx_); }
  std::vector<Expectation> expected() override {
    const Matrix<Bounded> w = held(w_);
    const Matrix<Bounded> x = ref::zeros<Bounded>(dy_.rows, w.cols());
    return {{"dx", stored(ref::linear_backward(x, w, held(dy_)).dx, ref::Storage::compute), &dx_}};
  }

 private:
  Tensor dy_, w_, dx_;
};

class LinearBackwardWeight : public TableOp {
 public:
  LinearBackwardWeight(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed) {
    dy_ = input(random(s.rows, s.out), t);
    x_ = input(random(s.rows, s.in), t);
    dw_ = output(s.out, s.in, DType::f32, true);
    db_ = output(1, s.out, DType::f32, true);
    flops = 2.0 * s.rows * s.in * s.out;
    bytes = bytes_of(t) * (s.rows * s.out + s.rows * s.in) + 8.0 * (s.out * s.in + s.out);
  }
  void run() override { backend_.linear_backward_weight(dy_, x_, dw_, db_); }
  std::vector<Expectation> expected() override {
    const auto g = ref::linear_backward(held(x_), ref::zeros<Bounded>(dw_.rows, dw_.cols), held(dy_));
    return {{"dw += dy^T x", stored(Matrix<Bounded>(initial(dw_) + g.dw), ref::Storage::accumulate), &dw_},
            {"db += sum dy", stored(Matrix<Bounded>(initial(db_) + g.db), ref::Storage::accumulate), &db_}};
  }

 private:
  Tensor dy_, x_, dw_, db_;
};

// ------------------------------------------------------------------ conv2d

// The convolutions the table runs (its size's `in` picks one, `rows` is the
// samples): a 3x3 halo on an odd image, stride 2 on an odd image with two
// groups (9 x 8: the width's division by the stride has a remainder, the
// height's none), depthwise with dilation 2, a 1x1, and one pixel; the
// last, at a real size, is the benchmarks'.
const Conv2dConfig kConvCases[] = {
    {3, 7, 6, 4, 3, 1, 1, 1, 1},  // in C, H, W; out C, kernel, stride, padding, dilation, groups
    {4, 9, 8, 6, 3, 2, 1, 1, 2},
    {4, 5, 5, 4, 3, 1, 2, 2, 4},
    {5, 4, 4, 3, 1, 1, 0, 1, 1},
    {1, 1, 1, 1, 1, 1, 0, 1, 1},
    {64, 64, 64, 64, 3, 1, 1, 1, 1},  // the benchmarks' (bench/): a U-Net stage, 64 -> 64 channels at 64 x 64
};

ref::ConvShape conv_shape(const Conv2dConfig& c) {
  return {{c.in_channels, c.height, c.width}, c.out_channels, c.kernel, c.stride, c.padding, c.dilation, c.groups};
}

// Forward, the input gradient and the weight gradient (accumulated into
// seeded buffers, beta = 1).
class Conv2dOp : public TableOp {
 public:
  Conv2dOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed)
      : TableOp(b, t, seed), c_(kConvCases[s.in]) {
    x_ = input(random(s.rows, c_.in_size()), t);
    w_ = input(random(c_.out_channels, c_.taps(), 1.0 / std::sqrt(static_cast<double>(c_.taps()))), t);
    b_ = input(random(1, c_.out_channels, 0.1), t);
    dy_ = input(random(s.rows, c_.out_size()), t);
    y_ = output(s.rows, c_.out_size(), t, false);
    dx_ = output(s.rows, c_.in_size(), t, false);
    dw_ = output(c_.out_channels, c_.taps(), DType::f32, true);
    db_ = output(1, c_.out_channels, DType::f32, true);
    flops = 6.0 * static_cast<double>(s.rows * c_.out_size() * c_.taps());
    bytes = bytes_of(t) * static_cast<double>(2 * s.rows * (c_.in_size() + c_.out_size()) + c_.out_channels * c_.taps());
  }
  void run() override {
    backend_.conv2d_forward(c_, x_, w_, b_, y_);
    backend_.conv2d_backward_data(c_, dy_, w_, dx_);
    backend_.conv2d_backward_weight(c_, dy_, x_, dw_, db_);
  }
  std::vector<Expectation> expected() override {
    const ref::ConvShape shape = conv_shape(c_);
    const Matrix<Bounded> x = held(x_), w = held(w_), dy = held(dy_);
    ref::RowSum<Bounded> dw, db;
    ref::conv2d_backward_weight(shape, x, dy, dw, db);
    return {{"y", stored(ref::conv2d_forward(shape, x, w, held(b_)), ref::Storage::compute), &y_},
            {"dx", stored(ref::conv2d_backward_data(shape, w, dy), ref::Storage::compute), &dx_},
            {"dw += dy^T cols(x)", stored(Matrix<Bounded>(initial(dw_) + std::move(dw).result()), ref::Storage::accumulate),
             &dw_},
            {"db += sum dy", stored(Matrix<Bounded>(initial(db_) + std::move(db).result()), ref::Storage::accumulate),
             &db_}};
  }

 private:
  Conv2dConfig c_;
  Tensor x_, w_, b_, dy_, y_, dx_, dw_, db_;
};

// ------------------------------------------------------ pooling, up-sampling

// The pools the table runs (its size's `in` picks one, `rows` is the
// samples): 2x2 windows side by side on a 6x7 image (its last column in no
// window: dx 0 there), overlapping 3x3 windows at stride 1, and two global
// pools (one window over the image).
const PoolConfig kPoolCases[] = {
    {2, 6, 7, 2, 2, 2, 2},  // channels, height, width; kernel h, w; stride h, w
    {3, 5, 5, 3, 3, 1, 1},
    {1, 4, 4, 4, 4, 4, 4},
    {2, 3, 5, 3, 5, 3, 5},
};

class AvgPoolOp : public TableOp {
 public:
  AvgPoolOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed), c_(kPoolCases[s.in]) {
    x_ = input(random(s.rows, c_.in_size()), t);
    dy_ = input(random(s.rows, c_.out_size()), t);
    y_ = output(s.rows, c_.out_size(), t, false);
    dx_ = output(s.rows, c_.in_size(), t, false);
    bytes = bytes_of(t) * 2.0 * static_cast<double>(s.rows * (c_.in_size() + c_.out_size()));
  }
  void run() override {
    backend_.avgpool_forward(c_, x_, y_);
    backend_.avgpool_backward(c_, dy_, dx_);
  }
  std::vector<Expectation> expected() override {
    const ref::PoolShape shape{{c_.channels, c_.height, c_.width}, c_.kernel_h, c_.kernel_w, c_.stride_h, c_.stride_w};
    return {{"y", stored(ref::avgpool_forward(shape, held(x_)), ref::Storage::compute), &y_},
            {"dx", stored(ref::avgpool_backward(shape, held(dy_)), ref::Storage::compute), &dx_}};
  }

 private:
  PoolConfig c_;
  Tensor x_, dy_, y_, dx_;
};

// Max pooling at kPoolCases' shapes, on whole numbers in [-2, 2]: most
// windows tie, and the tie rule (the first largest, row by row) decides
// where dy goes; the inputs are exact, so the reference knows the winner.
class MaxPoolOp : public TableOp {
 public:
  MaxPoolOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed), c_(kPoolCases[s.in]) {
    Matrix<double> x = random(s.rows, c_.in_size());
    for (long i = 0; i < x.size(); ++i) x.data()[i] = std::clamp(std::round(x.data()[i] * 1.5), -2.0, 2.0);
    x_ = input(x, t);
    dy_ = input(random(s.rows, c_.out_size()), t);
    y_ = output(s.rows, c_.out_size(), t, false);
    dx_ = output(s.rows, c_.in_size(), t, false);
    bytes = bytes_of(t) * 3.0 * static_cast<double>(s.rows * (c_.in_size() + c_.out_size()));
  }
  void run() override {
    backend_.maxpool_forward(c_, x_, y_);
    backend_.maxpool_backward(c_, x_, dy_, dx_);
  }
  std::vector<Expectation> expected() override {
    const ref::PoolShape shape{{c_.channels, c_.height, c_.width}, c_.kernel_h, c_.kernel_w, c_.stride_h, c_.stride_w};
    const Matrix<Bounded> x = held(x_);
    return {{"y", stored(ref::maxpool_forward(shape, x), ref::Storage::compute), &y_},
            {"dx", stored(ref::maxpool_backward(shape, x, held(dy_)), ref::Storage::compute), &dx_}};
  }

 private:
  PoolConfig c_;
  Tensor x_, dy_, y_, dx_;
};

// samples, channels, height (the width one more).
class UpsampleOp : public TableOp {
 public:
  UpsampleOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed)
      : TableOp(b, t, seed), image_{s.in, s.out, s.out + 1} {
    x_ = input(random(s.rows, image_.size()), t);
    dy_ = input(random(s.rows, 4 * image_.size()), t);
    y_ = output(s.rows, 4 * image_.size(), t, false);
    dx_ = output(s.rows, image_.size(), t, false);
    bytes = bytes_of(t) * 10.0 * static_cast<double>(s.rows * image_.size());
  }
  void run() override {
    backend_.upsample_forward(image_.channels, image_.height, image_.width, x_, y_);
    backend_.upsample_backward(image_.channels, image_.height, image_.width, dy_, dx_);
  }
  std::vector<Expectation> expected() override {
    return {{"y", stored(ref::upsample_forward(image_, held(x_)), ref::Storage::compute), &y_},
            {"dx", stored(ref::upsample_backward(image_, held(dy_)), ref::Storage::compute), &dx_}};
  }

 private:
  ref::ImageShape image_;
  Tensor x_, dy_, y_, dx_;
};

// ------------------------------------------------------------- activations

class ActivationOp : public TableOp {
 public:
  ActivationOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed, Activation a, bool backward)
      : TableOp(b, t, seed), activation_(a), backward_(backward) {
    // The first element positive, so that ReLU's outputs are never all zero.
    Matrix<double> x = random(s.rows, s.in, 2.0);
    x(0, 0) = std::abs(x(0, 0));
    x_ = input(x, t);
    if (backward) dy_ = input(random(s.rows, s.in), t);
    y_ = output(s.rows, s.in, t, false);
    bytes = bytes_of(t) * s.rows * s.in * (backward ? 3.0 : 2.0);
  }
  void run() override {
    if (backward_) {
      backend_.activation_backward(activation_, x_, dy_, y_);
    } else {
      backend_.activation_forward(activation_, x_, y_);
    }
  }
  std::vector<Expectation> expected() override {
    const Matrix<Bounded> x = held(x_);
    Matrix<Bounded> e;
    switch (activation_) {
      case Activation::relu: e = backward_ ? ref::relu_backward(x, held(dy_)) : ref::relu_forward(x); break;
      case Activation::gelu_tanh: e = backward_ ? ref::gelu_backward(x, held(dy_)) : ref::gelu_forward(x); break;
      case Activation::gelu_erf:
        e = backward_ ? ref::gelu_erf_backward(x, held(dy_)) : ref::gelu_erf_forward(x);
        break;
    }
    return {{backward_ ? "dx" : "y", stored(e, ref::Storage::compute), &y_}};
  }

 private:
  Activation activation_;
  bool backward_;
  Tensor x_, dy_, y_;
};

// ------------------------------------------------------------ concatenation

// A block of columns of src into a block of dst, whose other columns keep
// their values: what a concatenation on the feature axis and its backward
// do. src [rows, in], dst [rows, out]; the block is the last half of the
// narrower.
class CopyColumnsOp : public TableOp {
 public:
  CopyColumnsOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed) {
    count_ = std::max(1L, std::min(s.in, s.out) / 2);
    src_first_ = s.in - count_;
    dst_first_ = s.out - count_;
    src_ = input(random(s.rows, s.in), t);
    dst_ = output(s.rows, s.out, t, true);
    bytes = bytes_of(t) * static_cast<double>(s.rows * count_) * 2.0;
  }
  void run() override { backend_.copy_columns(src_, src_first_, dst_, dst_first_, count_); }
  std::vector<Expectation> expected() override {
    Matrix<Bounded> e = initial(dst_);
    e.middleCols(dst_first_, count_) = held(src_).middleCols(src_first_, count_);
    return {{"dst", stored(e, ref::Storage::compute), &dst_}};
  }

 private:
  long count_ = 0, src_first_ = 0, dst_first_ = 0;
  Tensor src_, dst_;
};

// --------------------------------------------------------------- embedding

// Token ids for an embedding entry: [rows, 1], skewed towards small ids
// (v = floor(V u^3)), so that the first tokens repeat many times and the
// last ones hardly or never: every length of a token's sum is exercised.
Matrix<double> token_ids(std::mt19937_64& rng, long rows, long vocabulary) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Matrix<double> ids(rows, 1);
  for (long r = 0; r < rows; ++r)
    ids(r, 0) = std::min(vocabulary - 1, static_cast<long>(static_cast<double>(vocabulary) * std::pow(u(rng), 3.0)));
  return ids;
}

// Size: rows tokens, a vocabulary of `in`, a width of `out`.
class EmbeddingForwardOp : public TableOp {
 public:
  EmbeddingForwardOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed) {
    ids_values_ = token_ids(rng_, s.rows, s.in);
    ids_ = input(ids_values_, DType::f32);
    w_ = input(random(s.in, s.out), t);
    y_ = output(s.rows, s.out, t, false);
    bytes = 4.0 * s.rows + 2.0 * bytes_of(t) * static_cast<double>(s.rows * s.out);
  }
  void run() override { backend_.embedding_forward(ids_, w_, y_); }
  std::vector<Expectation> expected() override {
    return {{"y", stored(ref::embedding_forward(ids_values_, held(w_)), ref::Storage::compute), &y_}};
  }

 private:
  Matrix<double> ids_values_;
  Tensor ids_, w_, y_;
};

// dw += the rows of dy summed by token into a float32 buffer; the padding
// token (id 1, where the vocabulary has one) gets nothing.
class EmbeddingBackwardOp : public TableOp {
 public:
  EmbeddingBackwardOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed) {
    ids_values_ = token_ids(rng_, s.rows, s.in);
    padding_ = s.in > 2 ? 1 : -1;
    ids_ = input(ids_values_, DType::f32);
    dy_ = input(random(s.rows, s.out), t);
    dw_ = output(s.in, s.out, DType::f32, true);
    bytes = 4.0 * s.rows + (bytes_of(t) + 8.0) * static_cast<double>(s.rows * s.out);
  }
  void run() override { backend_.embedding_backward(ids_, dy_, padding_, dw_); }
  std::vector<Expectation> expected() override {
    const Matrix<Bounded> dw = ref::embedding_backward(ids_values_, held(dy_), padding_, initial(dw_));
    return {{"dw", stored(dw, ref::Storage::accumulate), &dw_}};
  }

 private:
  Matrix<double> ids_values_;
  long padding_ = -1;
  Tensor ids_, dy_, dw_;
};

// ------------------------------------------------------ position embedding

// Size: `rows` samples of `in` positions, a width of `out`; the table has
// one row more than the positions, a row no sample reaches.
Matrix<double> position_ids(long samples, long positions) {
  Matrix<double> ids(samples * positions, 1);
  for (long r = 0; r < ids.rows(); ++r) ids(r, 0) = static_cast<double>(r % positions);
  return ids;
}

class PositionForwardOp : public TableOp {
 public:
  PositionForwardOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed), positions_(s.in) {
    x_ = input(random(s.rows * s.in, s.out), t);
    p_ = input(random(s.in + 1, s.out), t);
    y_ = output(s.rows * s.in, s.out, t, false);
    bytes = 3.0 * bytes_of(t) * static_cast<double>(s.rows * s.in * s.out);
  }
  void run() override { backend_.position_embedding_forward(x_, p_, positions_, y_); }
  std::vector<Expectation> expected() override {
    const Matrix<Bounded> x = held(x_);
    Matrix<Bounded> y = ref::embedding_forward(position_ids(x.rows() / positions_, positions_), held(p_));
    for (long i = 0; i < y.size(); ++i) y.data()[i] = x.data()[i] + y.data()[i];
    return {{"y", stored(y, ref::Storage::compute), &y_}};
  }

 private:
  long positions_;
  Tensor x_, p_, y_;
};

// dp += the rows of dy summed by position into a float32 buffer: an
// embedding backward whose ids are the positions.
class PositionBackwardOp : public TableOp {
 public:
  PositionBackwardOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed), positions_(s.in) {
    dy_ = input(random(s.rows * s.in, s.out), t);
    dp_ = output(s.in + 1, s.out, DType::f32, true);
    bytes = (bytes_of(t) + 8.0) * static_cast<double>(s.rows * s.in * s.out);
  }
  void run() override { backend_.position_embedding_backward(dy_, positions_, dp_); }
  std::vector<Expectation> expected() override {
    const Matrix<Bounded> dy = held(dy_);
    const Matrix<Bounded> dp =
        ref::embedding_backward(position_ids(dy.rows() / positions_, positions_), dy, -1, initial(dp_));
    return {{"dp", stored(dp, ref::Storage::accumulate), &dp_}};
  }

 private:
  long positions_;
  Tensor dy_, dp_;
};

// --------------------------------------------------------------- attention

// Forward then backward of attention's core. Size: `rows` samples of `in`
// positions, two heads of `out` columns (qkv [rows * in, 6 out]). Causal
// unless `bidirectional`; every sample but the first (a lone one too) ends
// in padding (its last third of positions, at least one where it has
// two), whose keys are not seen. The scores carry a spread of 2, so that
// the softmax is neither flat nor one-hot.
class AttentionOp : public TableOp {
 public:
  AttentionOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed, bool bidirectional)
      : TableOp(b, t, seed) {
    config_.heads = 2;
    config_.positions = s.in;
    config_.causal = !bidirectional;
    config_.padding_idx = 0;
    const long rows = s.rows * s.in, width = 2 * s.out;
    ids_values_ = Matrix<double>::Constant(rows, 1, 1.0);
    for (long sample = s.rows > 1 ? 1 : 0; sample < s.rows; ++sample)
      for (long t0 = s.in - std::max(s.in > 1 ? 1L : 0L, s.in / 3); t0 < s.in; ++t0) ids_values_(sample * s.in + t0, 0) = 0.0;
    ids_ = input(ids_values_, DType::f32);
    qkv_ = input(random(rows, 3 * width, 2.0 / std::sqrt(std::sqrt(static_cast<double>(s.out)))), t);
    dout_ = input(random(rows, width), t);
    o_ = output(rows, width, t, false);
    max_ = output(1, rows * 2, DType::f32, false);
    sum_ = output(1, rows * 2, DType::f32, false);
    dqkv_ = output(rows, 3 * width, t, false);
    flops = 8.0 * static_cast<double>(s.rows * s.in * s.in * width);
    bytes = bytes_of(t) * static_cast<double>(rows * width) * 9.0;
  }
  void run() override {
    backend_.attention_forward(config_, qkv_, ids_, o_, max_, sum_);
    backend_.attention_backward(config_, qkv_, ids_, o_, dout_, max_, sum_, dqkv_);
  }
  std::vector<Expectation> expected() override {
    const ref::AttentionShape shape{config_.heads, config_.positions, config_.causal, config_.padding_idx};
    const Matrix<Bounded> qkv = held(qkv_);
    Matrix<Bounded> ids(ids_values_.rows(), 1);
    for (long r = 0; r < ids.rows(); ++r) ids(r, 0) = Bounded(ids_values_(r, 0));
    std::vector<Expectation> out{{"o", stored(ref::attention_forward(shape, qkv, &ids), ref::Storage::compute), &o_},
                                 {"dqkv", ref::attention_backward(shape, qkv, &ids, held(dout_)), &dqkv_}};
    plain_form(out[0].natural, out[1].natural);
    return out;
  }

 private:
  // The same inputs through the host kernel, the plain form in natural
  // order (FlashAttention's "same math in the test dtype"): o and dqkv.
  void plain_form(std::vector<double>& o, std::vector<double>& dqkv) {
    CpuBackend host;
    auto copy = [&](const Tensor& t) {
      std::vector<float> v(static_cast<std::size_t>(t.size()));
      backend_.download(t, v);
      Tensor h = host.allocate(t.rows, t.cols, t.dtype);
      host.upload(h, v);
      return h;
    };
    Tensor qkv = copy(qkv_), ids = copy(ids_), dout = copy(dout_);
    Tensor ho = host.allocate(o_.rows, o_.cols, o_.dtype), m = host.allocate(max_.rows, max_.cols, DType::f32),
           l = host.allocate(sum_.rows, sum_.cols, DType::f32), dx = host.allocate(dqkv_.rows, dqkv_.cols, dqkv_.dtype);
    host.attention_forward(config_, qkv, ids, ho, m, l);
    host.attention_backward(config_, qkv, ids, ho, dout, m, l, dx);
    for (auto [t, into] : {std::pair{&ho, &o}, std::pair{&dx, &dqkv}}) {
      std::vector<float> v(static_cast<std::size_t>(t->size()));
      host.download(*t, v);
      into->assign(v.begin(), v.end());
    }
    for (Tensor* t : {&qkv, &ids, &dout, &ho, &m, &l, &dx}) host.release(*t);
  }

  AttentionConfig config_;
  Matrix<double> ids_values_;
  Tensor ids_, qkv_, dout_, o_, max_, sum_, dqkv_;
};

// ----------------------------------------------------------- data movement

// Every element of an overwritten tensor set to one value, rounded to its
// dtype (1/3: inexact in every dtype, so the store must round).
class FillOp : public TableOp {
 public:
  FillOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed) {
    y_ = output(s.rows, s.in, t, false);
    bytes = bytes_of(t) * static_cast<double>(s.rows * s.in);
  }
  void run() override { backend_.fill(y_, kValue); }
  std::vector<Expectation> expected() override {
    const Matrix<Bounded> e = Matrix<Bounded>::Constant(y_.rows, y_.cols, Bounded(static_cast<double>(kValue)));
    return {{"y", stored(e, ref::Storage::compute), &y_}};
  }

 private:
  static constexpr float kValue = 1.0f / 3.0f;
  Tensor y_;
};

// A float32 tensor stored into one of the compute dtype (the training
// loop's compute copy of the master weights).
class ConvertOp : public TableOp {
 public:
  ConvertOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed) {
    x_ = input(random(s.rows, s.in), DType::f32);
    y_ = output(s.rows, s.in, t, false);
    bytes = (4.0 + bytes_of(t)) * static_cast<double>(s.rows * s.in);
  }
  void run() override { backend_.convert(x_, y_); }
  std::vector<Expectation> expected() override { return {{"y", stored(held(x_), ref::Storage::compute), &y_}}; }

 private:
  Tensor x_, y_;
};

// all_finite over a list of finite tensors (true), then over the same list
// with an infinity in the last element of the last tensor, its scalar tail
// (false).
class AllFiniteOp : public TableOp {
 public:
  AllFiniteOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed) {
    double elements = 0.0;
    for (long k = 0; k < s.out; ++k) {
      const long n = s.rows * s.in + k;
      elements += static_cast<double>(n);
      finite_.push_back(input(random(1, n), t));
    }
    with_inf_ = finite_;
    Matrix<double> last = random(1, finite_.back().cols);
    last(0, last.cols() - 1) = std::numeric_limits<double>::infinity();
    with_inf_.back() = input(last, t);
    bytes = 2.0 * bytes_of(t) * elements;
  }
  void run() override {
    finite_result_ = backend_.all_finite(finite_);
    with_inf_result_ = backend_.all_finite(with_inf_);
  }
  std::vector<Expectation> expected() override {
    Matrix<Bounded> e(1, 2);
    e << Bounded(1.0), Bounded(0.0);
    Expectation x("finite list, then with an infinity (1 = true)", e, nullptr);
    x.actual = {finite_result_ ? 1.0 : 0.0, with_inf_result_ ? 1.0 : 0.0};
    return {x};
  }

 private:
  std::vector<Tensor> finite_, with_inf_;
  bool finite_result_ = false, with_inf_result_ = true;
};

// ------------------------------------------------------------- normalizers

// Forward then backward of one normalizer, with its affine parameters and,
// for BatchNorm, its running statistics.
class NormOp : public TableOp {
 public:
  NormOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed, NormKind kind) : TableOp(b, t, seed) {
    config_.kind = kind;
    config_.positions = s.rows % 3 == 0 ? 3 : 1;
    // An image's channels of s.out pixels each for batch and group norm
    // (BatchNorm2d, GroupNorm on NCHW); layer and rms norm per column.
    config_.spatial = kind == NormKind::batch || kind == NormKind::group ? s.out : 1;
    const long channels = s.in / config_.spatial;
    config_.groups = channels % 3 == 0 ? 3 : (channels % 2 == 0 ? 2 : 1);
    const bool rms = kind == NormKind::rms, batch = kind == NormKind::batch;
    const long groups = norm_geometry(config_, s.rows, s.in).group_count();
    x_ = input(random(s.rows, s.in, 3.0), t);
    gamma_ = input(random(1, channels, 0.2, 1.0), t);
    if (!rms) beta_ = input(random(1, channels, 0.2), t);
    dy_ = input(random(s.rows, s.in), t);
    y_ = output(s.rows, s.in, t, false);
    mean_ = output(1, groups, DType::f32, false);
    rstd_ = output(1, groups, DType::f32, false);
    dx_ = output(s.rows, s.in, t, false);
    dgamma_ = output(1, channels, DType::f32, true);
    if (!rms) dbeta_ = output(1, channels, DType::f32, true);
    if (batch) {
      running_mean_ = output(1, channels, DType::f32, true, 0.1);
      running_var_ = output(1, channels, DType::f32, true, 0.1, 1.0);
    }
    bytes = bytes_of(t) * s.rows * s.in * 5.0;
  }
  void run() override {
    backend_.norm_forward(config_, x_, gamma_, beta_, y_, mean_, rstd_, running_mean_, running_var_);
    backend_.norm_backward(config_, x_, gamma_, dy_, mean_, rstd_, dx_, dgamma_, dbeta_);
  }
  std::vector<Expectation> expected() override {
    const bool rms = config_.kind == NormKind::rms;
    const ref::NormShape shape{reference_kind(config_.kind), config_.groups, config_.positions,
                               static_cast<double>(config_.eps), config_.spatial};
    const Matrix<Bounded> x = held(x_), gamma = held(gamma_), beta = rms ? Matrix<Bounded>() : held(beta_);
    const auto stats = ref::norm_statistics(shape, x);
    const auto g = ref::norm_backward(shape, x, gamma, held(dy_), stats);
    std::vector<Expectation> out = {
        {"y", stored(ref::norm_forward(shape, x, gamma, beta, stats), ref::Storage::compute), &y_},
        {"dx", stored(g.dx, ref::Storage::compute), &dx_},
        {"dgamma", stored(Matrix<Bounded>(initial(dgamma_) + g.dgamma), ref::Storage::accumulate), &dgamma_}};
    if (!rms) out.push_back({"dbeta", stored(Matrix<Bounded>(initial(dbeta_) + g.dbeta), ref::Storage::accumulate), &dbeta_});
    if (config_.kind == NormKind::batch) {
      Matrix<Bounded> rm = initial(running_mean_), rv = initial(running_var_);
      ref::batchnorm_update_running(rm, rv, stats, static_cast<double>(config_.momentum));
      out.push_back({"running_mean", stored(rm, ref::Storage::master), &running_mean_});
      out.push_back({"running_var", stored(rv, ref::Storage::master), &running_var_});
    }
    return out;
  }

 private:
  static ref::NormKind reference_kind(NormKind k) {
    switch (k) {
      case NormKind::layer: return ref::NormKind::layer;
      case NormKind::rms: return ref::NormKind::rms;
      case NormKind::group: return ref::NormKind::group;
      case NormKind::batch: break;
    }
    return ref::NormKind::batch;
  }
  NormConfig config_;
  Tensor x_, gamma_, beta_, dy_, y_, mean_, rstd_, dx_, dgamma_, dbeta_, running_mean_, running_var_;
};

// ------------------------------------------------------------------ losses

class LossOp : public TableOp {
 public:
  LossOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed, LossKind kind) : TableOp(b, t, seed), kind_(kind) {
    y_ = input(random(s.rows, s.in, 2.0), t);
    if (kind == LossKind::mse) {
      targets_ = input(random(s.rows, s.in), DType::f32);
    } else {
      // Every third row is padding (ignored); the first row always counts.
      std::uniform_int_distribution<long> pick(0, s.in - 1);
      Matrix<double> classes(s.rows, 1);
      for (long r = 0; r < s.rows; ++r) {
        classes_.push_back(r % 3 == 2 ? ref::kIgnoreClass : static_cast<int>(pick(rng_)));
        classes(r, 0) = classes_.back();
      }
      targets_ = input(classes, DType::f32);
    }
    dy_ = output(s.rows, s.in, t, false);
    bytes = bytes_of(t) * s.rows * s.in * 2.0;
  }
  void run() override { loss_sum_ = backend_.loss_forward_backward(kind_, y_, targets_, scale(), dy_); }
  std::vector<Expectation> expected() override {
    const Bounded s(static_cast<double>(scale()));
    const auto l = kind_ == LossKind::mse ? ref::mse_loss(held(y_), held(targets_), s)
                                          : ref::cross_entropy_loss(held(y_), classes_, s);
    return {{"dy", stored(l.dy, ref::Storage::compute), &dy_},
            {"loss sum", l.loss_sum, loss_sum_}};
  }

 private:
  float scale() const { return kind_ == LossKind::mse ? 0.125f : 0.25f; }
  LossKind kind_;
  std::vector<int> classes_;
  Tensor y_, targets_, dy_;
  double loss_sum_ = 0.0;
};

// The tied head and its cross-entropy in chunks: rows x width into a
// vocabulary of `out`, in about three blocks of rows and four chunks of
// columns (odd tails). Its reference is the head's product, the loss with
// the online denominator over the same chunks, and the head's backward.
class ChunkedHeadOp : public TableOp {
 public:
  ChunkedHeadOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed) : TableOp(b, t, seed) {
    x_ = input(random(s.rows, s.in, 2.0), t);
    w_ = input(random(s.out, s.in, 2.0), t);
    std::uniform_int_distribution<long> pick(0, s.out - 1);
    Matrix<double> classes(s.rows, 1);
    for (long r = 0; r < s.rows; ++r) {
      classes_.push_back(r % 3 == 2 ? ref::kIgnoreClass : static_cast<int>(pick(rng_)));
      classes(r, 0) = classes_.back();
    }
    targets_ = input(classes, DType::f32);
    dx_ = output(s.rows, s.in, t, false);
    dw_ = output(s.out, s.in, DType::f32, true);
    row_chunk_ = std::max(1L, (s.rows + 2) / 3);
    vocabulary_chunk_ = std::max(1L, (s.out + 3) / 4);
    flops = 6.0 * s.rows * s.in * s.out;
    bytes = bytes_of(t) * (2.0 * s.rows * s.in + s.out * s.in) + 8.0 * s.out * s.in;
  }
  void run() override {
    loss_sum_ = backend_.chunked_head_cross_entropy(x_, w_, targets_, 0.25f, row_chunk_, vocabulary_chunk_, dx_, dw_);
  }
  std::vector<Expectation> expected() override {
    const Matrix<Bounded> x = held(x_), w = held(w_);
    const Matrix<Bounded> logits = stored(ref::gemm(x, ref::transposed(w)), ref::Storage::compute);
    const auto l = ref::cross_entropy_loss(logits, classes_, Bounded(0.25), vocabulary_chunk_);
    const Matrix<Bounded> dz = stored(l.dy, ref::Storage::compute);
    return {{"dx", stored(ref::linear_backward_data(w, dz), ref::Storage::compute), &dx_},
            {"dw += dz^T x",
             stored(Matrix<Bounded>(initial(dw_) + ref::gemm(ref::transposed(dz), x)), ref::Storage::accumulate), &dw_},
            {"loss sum", l.loss_sum, loss_sum_}};
  }

 private:
  std::vector<int> classes_;
  Tensor x_, w_, targets_, dx_, dw_;
  long row_chunk_ = 1, vocabulary_chunk_ = 1;
  double loss_sum_ = 0.0;
};

// --------------------------------------------------------------- list ops

enum class ListKind { zero, scale, accumulate, accumulate_kahan, global_norm };

// One list op over `out` tensors of rows x in + k elements (k = 0, 1, ...:
// odd tails), so one launch covers several tensors.
class ListOpCheck : public TableOp {
 public:
  ListOpCheck(Backend& b, const OpSize& s, DType t, std::uint64_t seed, ListKind kind) : TableOp(b, t, seed), kind_(kind) {
    double elements = 0.0;
    for (long k = 0; k < s.out; ++k) {
      const long n = s.rows * s.in + k;
      elements += static_cast<double>(n);
      if (kind == ListKind::global_norm) {
        dst_.push_back(input(random(1, n), t));
        continue;
      }
      dst_.push_back(output(1, n, DType::f32, true));
      if (kind == ListKind::accumulate || kind == ListKind::accumulate_kahan) src_.push_back(input(random(1, n), t));
      if (kind == ListKind::accumulate_kahan) compensation_.push_back(output(1, n, DType::f32, true, 0.0));
    }
    // Bytes per element: read and write the buffer, read the source, read
    // and write the compensation; zero only writes, the norm only reads.
    switch (kind) {
      case ListKind::zero: bytes = 4.0 * elements; break;
      case ListKind::scale: bytes = 8.0 * elements; break;
      case ListKind::accumulate: bytes = (8.0 + bytes_of(t)) * elements; break;
      case ListKind::accumulate_kahan: bytes = (16.0 + bytes_of(t)) * elements; break;
      case ListKind::global_norm: bytes = bytes_of(t) * elements; break;
    }
  }
  void run() override {
    switch (kind_) {
      case ListKind::zero: backend_.zero(dst_); break;
      case ListKind::scale: backend_.scale(dst_, kFactor); break;
      case ListKind::accumulate: backend_.accumulate(dst_, src_, {}); break;
      case ListKind::accumulate_kahan: backend_.accumulate(dst_, src_, compensation_); break;
      case ListKind::global_norm: norm_ = backend_.global_norm(dst_); break;
    }
  }
  std::vector<Expectation> expected() override {
    std::vector<Expectation> out;
    if (kind_ == ListKind::global_norm) {
      std::vector<Bounded> all;
      for (const Tensor& t : dst_) {
        const Matrix<Bounded> m = held(t);
        all.insert(all.end(), m.data(), m.data() + m.size());
      }
      const Bounded sum = ref::reduce<Bounded>(static_cast<long>(all.size()), [&](long i) {
        return all[static_cast<std::size_t>(i)] * all[static_cast<std::size_t>(i)];
      });
      out.push_back({"norm", ref::sqrt(sum), norm_});
      return out;
    }
    for (std::size_t i = 0; i < dst_.size(); ++i) {
      const std::string name = "tensor " + std::to_string(i);
      const Matrix<Bounded> before = initial(dst_[i]);
      switch (kind_) {
        case ListKind::zero:
          out.push_back({name, ref::zeros<Bounded>(before.rows(), before.cols()), &dst_[i], true});
          break;
        case ListKind::scale:
          out.push_back({name, stored(Matrix<Bounded>(before * Bounded(static_cast<double>(kFactor))), ref::Storage::accumulate),
                         &dst_[i]});
          break;
        case ListKind::accumulate:
        case ListKind::accumulate_kahan:
          // With a zero compensation the first compensated add is a plain add.
          out.push_back({name, stored(Matrix<Bounded>(before + held(src_[i])), ref::Storage::accumulate), &dst_[i]});
          break;
        case ListKind::global_norm: break;
      }
    }
    return out;
  }

 private:
  static constexpr float kFactor = 0.5f;  // an exact scale: the kernel's result is then the rounding of one product
  ListKind kind_;
  std::vector<Tensor> dst_, src_, compensation_;
  double norm_ = 0.0;
};

// -------------------------------------------------------------- optimizers

// Three steps, the state carried from step to step as the training loop
// carries it, each step checked against the reference started from the
// kernel's state before it (the harness's own rule: bounds do not compound).
class OptimizerOp : public TableOp {
 public:
  OptimizerOp(Backend& b, const OpSize& s, DType t, std::uint64_t seed, ref::OptimizerSpec o) : TableOp(b, t, seed), o_(o) {
    o_.lr = o.kind == ref::OptimizerKind::sgd ? 0.1 : 1e-2;  // hyper-parameters of the check, not tolerances
    p0_ = random(s.rows, s.in);
    p_ = input(p0_, DType::f32);
    first_ = input(Matrix<double>::Zero(s.rows, s.in), DType::f32);
    second_ = input(Matrix<double>::Zero(s.rows, s.in), DType::f32);
    for (int k = 0; k < kSteps; ++k) grads_.push_back(input(random(s.rows, s.in), t));
    bytes = s.rows * s.in * (bytes_of(t) + 4.0 * (o.kind == ref::OptimizerKind::sgd ? 4.0 : 6.0));
  }
  void run() override { step(0); }
  OpVerdict verify() override {
    const std::vector<float> zero(static_cast<std::size_t>(p_.size()), 0.0f);
    const std::vector<float> p0(p0_.data(), p0_.data() + p0_.size());
    backend_.upload(p_, p0);
    backend_.upload(first_, zero);
    backend_.upload(second_, zero);
    OpVerdict all;
    for (step_ = 0; step_ < kSteps; ++step_) {
      before_p_ = held(p_);
      before_first_ = held(first_);
      before_second_ = held(second_);
      step(step_);
      const ref::ScopedRoundingModel scope(model_);
      OpVerdict v = compare_step();
      all.worst_ratio = std::max(all.worst_ratio, v.worst_ratio);
      if (!v.passed && all.passed) all = {false, ref::optimizer_name(o_) + ", step " + std::to_string(step_) + ": " + v.message, all.worst_ratio, {}};
    }
    return all;
  }

 protected:
  std::vector<Expectation> expected() override {
    Matrix<Bounded> p = before_p_, first = before_first_, second = before_second_;
    const Matrix<Bounded> g = held(grads_[static_cast<std::size_t>(step_)]);
    const double lr = learning_rate(step_);
    if (o_.kind == ref::OptimizerKind::sgd) {
      ref::sgd_step(o_, lr, step_ == 0, p, g, first);
    } else {
      ref::adam_step(o_, lr, step_, p, g, first, second);
    }
    std::vector<Expectation> out = {{"parameters", stored(p, ref::Storage::master), &p_}};
    if (o_.kind != ref::OptimizerKind::sgd || o_.momentum != 0.0)
      out.push_back({"first moment", stored(first, ref::Storage::master), &first_});
    if (o_.kind != ref::OptimizerKind::sgd) out.push_back({"second moment", stored(second, ref::Storage::master), &second_});
    return out;
  }

 private:
  static constexpr int kSteps = 3;
  // As a schedule would change it from step to step.
  double learning_rate(long step) const { return o_.lr * (1.0 + 0.1 * static_cast<double>(step)); }
  void step(long k) {
    const Tensor ps[] = {p_}, gs[] = {grads_[static_cast<std::size_t>(k)]}, fs[] = {first_}, ss[] = {second_};
    backend_.optimizer_step(make_optimizer_step(o_, learning_rate(k), k), ps, gs, fs, ss);
  }
  OpVerdict compare_step();

  ref::OptimizerSpec o_;
  Matrix<double> p0_;
  Tensor p_, first_, second_;
  std::vector<Tensor> grads_;
  long step_ = 0;
  Matrix<Bounded> before_p_, before_first_, before_second_;
};

OpVerdict OptimizerOp::compare_step() { return compare(expected()); }

template <class Op, class... Args>
std::function<std::unique_ptr<PreparedOp>(Backend&, const OpSize&, DType, std::uint64_t)> make(Args... args) {
  return [=](Backend& b, const OpSize& s, DType t, std::uint64_t seed) -> std::unique_ptr<PreparedOp> {
    return std::make_unique<Op>(b, s, t, seed, args...);
  };
}

ref::OptimizerSpec optimizer(ref::OptimizerKind kind, double momentum, double dampening, bool nesterov,
                             double weight_decay) {
  ref::OptimizerSpec o;
  o.kind = kind;
  o.momentum = momentum;
  o.dampening = dampening;
  o.nesterov = nesterov;
  o.weight_decay = weight_decay;
  return o;
}

}  // namespace

const std::vector<OpSpec>& op_table() {
  using K = ref::OptimizerKind;
  const std::vector<OpSize> gemm = {{9, 13, 5}, {1, 1, 1}, {33, 17, 8}, {65, 31, 33}};
  const std::vector<OpSize> wide = {{6, 7}, {1, 1}, {33, 17}};
  // rows, columns, columns per channel (batch and group norm over images;
  // the others take 1): 3 channels of 4 pixels, 2 of 5 over 3-row samples.
  const std::vector<OpSize> norm = {{12, 6}, {4, 5}, {30, 12}, {4, 12, 4}, {6, 10, 5}};
  const std::vector<OpSize> loss = {{6, 4}, {1, 2}, {17, 11}};
  const std::vector<OpSize> list = {{3, 5, 3}, {1, 1, 1}, {7, 4097, 3}};
  const std::vector<OpSize> columns = {{5, 7, 9}, {1, 1, 1}, {33, 4, 17}};
  // rows (tokens), vocabulary, width: a token of 5 repeats over 256 times in 600 rows.
  const std::vector<OpSize> tokens = {{12, 7, 5}, {1, 1, 1}, {600, 5, 3}, {33, 97, 17}};
  // samples, positions, width: a position's sum of 300 terms.
  const std::vector<OpSize> positions = {{4, 3, 5}, {1, 1, 1}, {300, 2, 3}, {3, 17, 33}};
  const std::vector<OpSize> step = {{3, 4}, {1, 1}, {7, 13}};
  // rows, width, vocabulary: tails in both chunkings; 257 columns in chunks
  // of 65; one row over two chunks of one column.
  const std::vector<OpSize> head = {{9, 5, 13}, {1, 1, 2}, {33, 8, 97}, {65, 17, 257}};
  // samples, positions, head dim (two heads): one position; a position
  // count past a 32-key tile; head dims 72 (past a multiple of 32) and 3.
  const std::vector<OpSize> attention = {{3, 7, 4}, {2, 1, 8}, {2, 37, 3}, {1, 70, 72}};
  // samples, which of kPoolCases.
  const std::vector<OpSize> pool = {{2, 0, 0}, {3, 1, 0}, {2, 2, 0}, {1, 3, 0}};
  // samples, channels, height (the width one more).
  const std::vector<OpSize> upsample = {{2, 3, 2}, {1, 1, 1}, {3, 2, 5}};
  // samples, which of kConvCases.
  const std::vector<OpSize> conv = {{2, 0, 0}, {3, 1, 0}, {2, 2, 0}, {2, 3, 0}, {1, 4, 0}};
  static const std::vector<OpSpec> table = {
      {"linear_forward", "y = x w^T + b", gemm, make<LinearForward>()},
      {"linear_backward_data", "dx = dy w", gemm, make<LinearBackwardData>()},
      {"linear_backward_weight", "dw += dy^T x, db += column sums of dy (beta = 1)", gemm, make<LinearBackwardWeight>()},
      {"conv2d", "2-D convolution forward, input gradient, weight gradient (beta = 1)", conv, make<Conv2dOp>()},
      {"avgpool", "average pooling forward and backward (windows side by side, overlapping, global)", pool,
       make<AvgPoolOp>()},
      {"maxpool", "max pooling forward and backward, ties to the first largest", pool, make<MaxPoolOp>()},
      {"upsample", "nearest-neighbour up-sampling by 2, forward and backward", upsample, make<UpsampleOp>()},
      {"relu_forward", "y = max(x, 0)", wide, make<ActivationOp>(Activation::relu, false)},
      {"relu_backward", "dx = dy where x > 0", wide, make<ActivationOp>(Activation::relu, true)},
      {"gelu_forward", "GELU, tanh form", wide, make<ActivationOp>(Activation::gelu_tanh, false)},
      {"gelu_backward", "GELU's derivative times dy", wide, make<ActivationOp>(Activation::gelu_tanh, true)},
      {"gelu_erf_forward", "GELU, erf form (nn.GELU())", wide, make<ActivationOp>(Activation::gelu_erf, false)},
      {"gelu_erf_backward", "GELU's (erf form) derivative times dy", wide, make<ActivationOp>(Activation::gelu_erf, true)},
      {"fill", "every element set to one value", wide, make<FillOp>()},
      {"convert", "float32 into the compute dtype", wide, make<ConvertOp>()},
      {"copy_columns", "a block of columns into another tensor's (concatenation)", columns, make<CopyColumnsOp>()},
      {"embedding_forward", "y = the table's rows of the token ids", tokens, make<EmbeddingForwardOp>()},
      {"embedding_backward", "dw += dy summed by token, none into the padding row", tokens,
       make<EmbeddingBackwardOp>()},
      {"position_embedding_forward", "y = x + the table's row of each row's position", positions,
       make<PositionForwardOp>()},
      {"position_embedding_backward", "dp += dy summed by position, the table's last row untouched", positions,
       make<PositionBackwardOp>()},
      {"layer_norm", "LayerNorm forward and backward", norm, make<NormOp>(NormKind::layer)},
      {"rms_norm", "RMSNorm forward and backward", norm, make<NormOp>(NormKind::rms)},
      {"group_norm", "GroupNorm forward and backward", norm, make<NormOp>(NormKind::group)},
      {"batch_norm", "BatchNorm forward (running statistics) and backward", norm, make<NormOp>(NormKind::batch)},
      {"mse_loss", "MSE: loss sum and scaled dy", loss, make<LossOp>(LossKind::mse)},
      {"cross_entropy_loss", "token cross-entropy with an ignore mask: loss sum and scaled dy", loss,
       make<LossOp>(LossKind::cross_entropy)},
      {"chunked_head_cross_entropy",
       "the tied head and its cross-entropy over row blocks and vocabulary chunks (online log-sum-exp)", head,
       make<ChunkedHeadOp>()},
      {"attention", "causal multi-head attention forward and backward, padded keys masked", attention,
       make<AttentionOp>(false)},
      {"bidirectional_attention", "multi-head attention without the causal mask, padded keys masked", attention,
       make<AttentionOp>(true)},
      {"zero", "zero every tensor of a list", list, make<ListOpCheck>(ListKind::zero)},
      {"scale", "scale every tensor of a list", list, make<ListOpCheck>(ListKind::scale)},
      {"accumulate", "dst += src over a list", list, make<ListOpCheck>(ListKind::accumulate)},
      {"accumulate_kahan", "dst += src over a list, Kahan-compensated", list, make<ListOpCheck>(ListKind::accumulate_kahan)},
      {"global_norm", "the 2-norm of every element of a list", list, make<ListOpCheck>(ListKind::global_norm)},
      {"all_finite", "whether every element of a list is finite", list, make<AllFiniteOp>()},
      {"sgd", "SGD, weight decay", step, make<OptimizerOp>(optimizer(K::sgd, 0.0, 0.0, false, 0.01))},
      {"sgd_momentum", "SGD with momentum and weight decay", step, make<OptimizerOp>(optimizer(K::sgd, 0.9, 0.0, false, 0.01))},
      {"sgd_nesterov", "SGD with Nesterov momentum", step, make<OptimizerOp>(optimizer(K::sgd, 0.9, 0.0, true, 0.0))},
      {"sgd_dampening", "SGD with momentum and dampening", step, make<OptimizerOp>(optimizer(K::sgd, 0.5, 0.1, false, 0.0))},
      {"adam", "Adam with L2 weight decay", step, make<OptimizerOp>(optimizer(K::adam, 0.0, 0.0, false, 0.01))},
      {"adamw", "AdamW with decoupled weight decay", step, make<OptimizerOp>(optimizer(K::adamw, 0.0, 0.0, false, 0.1))},
  };
  return table;
}

}  // namespace gradeq
