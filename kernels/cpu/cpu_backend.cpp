// cpu_backend.cpp — host implementations (ops with a file of their own are
// beside it). Each op: check shapes, compute in
// float32 with float32 accumulators, round every store to the dtype of the
// tensor written.
//
// The GEMMs are Eigen's blocked float32 kernels, single-threaded, and the
// blocked path for every shape (threshold 0: never Eigen's coefficient-wise
// product for small ones, whose vector/scalar split follows the output's
// address), so that the summation order depends on the shapes, the
// instruction set and the cache sizes Eigen's blocking reads, never on where
// a buffer lies (docs/NUMERICS.md §10). The threshold applies to the product
// types of this file, which no other file instantiates. Element-wise and
// list ops are one loop per dtype, so that the compiler vectorizes them;
// their arithmetic is the source's, operation by operation (no fast-math,
// no contraction).
#define EIGEN_DONT_PARALLELIZE
#define EIGEN_GEMM_TO_COEFFBASED_THRESHOLD 0
#include "kernels/cpu/cpu_backend.h"

// GCC 12 reports _mm512_undefined_ps() in Eigen's AVX-512 packing as
// maybe-uninitialized (a false positive: GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/element_math.h"
#include "kernels/norm_geometry.h"

namespace gradeq {

using namespace cpu;

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

}  // namespace


float cpu::adversarial_sum(const float* terms, long n) {
  if (n <= 0) return 0.0f;
  thread_local std::vector<float> ordered;
  ordered.resize(static_cast<std::size_t>(n));
  long front = 0;
  for (long i = 0; i < n; ++i)
    if (!(terms[i] < 0.0f)) ordered[static_cast<std::size_t>(front++)] = terms[i];
  for (long i = 0; i < n; ++i)
    if (terms[i] < 0.0f) ordered[static_cast<std::size_t>(front++)] = terms[i];
  const long splits = std::min(n, kAdversarialSplits);
  float part[kAdversarialSplits];
  for (long s = 0; s < splits; ++s) {
    float acc = 0.0f;
    for (long i = n * s / splits; i < n * (s + 1) / splits; ++i) acc += ordered[static_cast<std::size_t>(i)];
    part[s] = acc;
  }
  for (long width = 1; width < splits; width *= 2)
    for (long s = 0; s + width < splits; s += 2 * width) part[s] += part[s + width];
  return part[0];
}

void cpu::column_sums(const float* m, long rows, long cols, float* out, SumOrder order) {
  if (order == SumOrder::natural) {
    std::fill(out, out + cols, 0.0f);
    for (long i = 0; i < rows; ++i)
      for (long j = 0; j < cols; ++j) out[j] += m[i * cols + j];
    return;
  }
  std::vector<float> column(static_cast<std::size_t>(rows));
  for (long j = 0; j < cols; ++j) {
    for (long i = 0; i < rows; ++i) column[static_cast<std::size_t>(i)] = m[i * cols + j];
    out[j] = adversarial_sum(column.data(), rows);
  }
}

void cpu::gemm(const float* a, bool a_transposed, const float* b, bool b_transposed, float* c, long m, long n,
               long k, SumOrder order) {
  Map out(c, m, n);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    out.setZero();
    return;
  }
  if (order == SumOrder::adversarial) {
    std::vector<float> products(static_cast<std::size_t>(k));
    for (long i = 0; i < m; ++i)
      for (long j = 0; j < n; ++j) {
        for (long q = 0; q < k; ++q)
          products[static_cast<std::size_t>(q)] =
              (a_transposed ? a[q * m + i] : a[i * k + q]) * (b_transposed ? b[j * k + q] : b[q * n + j]);
        c[i * n + j] = adversarial_sum(products.data(), k);
      }
    return;
  }
  const ConstMap am(a, a_transposed ? k : m, a_transposed ? m : k);
  const ConstMap bm(b, b_transposed ? n : k, b_transposed ? k : n);
  if (a_transposed && b_transposed) {
    out.noalias() = am.transpose() * bm.transpose();
  } else if (a_transposed) {
    out.noalias() = am.transpose() * bm;
  } else if (b_transposed) {
    out.noalias() = am * bm.transpose();
  } else {
    out.noalias() = am * bm;
  }
}

CpuBackend::CpuBackend(ConvForm conv_form, SumOrder sum_order) : conv_form_(conv_form), sum_order_(sum_order) {
  if (conv_form == ConvForm::direct && sum_order == SumOrder::adversarial)
    throw std::invalid_argument("CpuBackend: the adversarial order sums convolutions through im2col, not the direct form");
}

float* CpuBackend::scratch(std::size_t n) {
  if (scratch_.size() < n) {
    scratch_.resize(n);
    peak_bytes_ = std::max(peak_bytes_, live_bytes());
  }
  return scratch_.data();
}

namespace {

// v[i] = round(v[i], dtype) over n elements.
void round_in_place(float* v, long n, DType t) {
  dispatch(t, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    if constexpr (D != DType::f32)
      for (long i = 0; i < n; ++i) v[i] = store<D>(v[i]);
  });
}

}  // namespace

Tensor CpuBackend::allocate(long rows, long cols, DType dtype) {
  GRADEQ_REQUIRE(rows >= 0 && cols >= 0, "allocate: negative shape");
  Tensor t{nullptr, rows, cols, dtype};
  const long n = rows * cols;
  auto storage = std::make_unique<float[]>(static_cast<std::size_t>(n > 0 ? n : 1));
  t.data = storage.get();
  const std::size_t bytes = static_cast<std::size_t>(n) * dtype_bytes(dtype);
  allocations_.emplace(t.data, std::make_pair(std::move(storage), bytes));
  live_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, live_bytes());
  return t;
}

std::size_t CpuBackend::live_bytes() const { return live_bytes_ + scratch_.size() * sizeof(float); }

void CpuBackend::reset_peak_bytes() {
  scratch_ = {};  // dropped, so that the next measurement sees it allocated
  peak_bytes_ = live_bytes_;
}

void CpuBackend::release(Tensor& t) {
  auto it = allocations_.find(t.data);
  GRADEQ_REQUIRE(it != allocations_.end(), "release: tensor not allocated by this backend");
  live_bytes_ -= it->second.second;
  allocations_.erase(it);
  t = Tensor{};
}

void CpuBackend::upload(const Tensor& dst, std::span<const float> host) {
  GRADEQ_REQUIRE(static_cast<long>(host.size()) == dst.size(), "upload: size mismatch");
  float* d = values(dst);
  const float* h = host.data();
  const long n = dst.size();
  dispatch(dst.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long i = 0; i < n; ++i) d[i] = store<D>(h[i]);
  });
}

void CpuBackend::download(const Tensor& src, std::span<float> host) {
  GRADEQ_REQUIRE(static_cast<long>(host.size()) == src.size(), "download: size mismatch");
  std::copy(values(src), values(src) + src.size(), host.data());
}

void CpuBackend::fill(const Tensor& t, float value) {
  std::fill(values(t), values(t) + t.size(), round_to(value, t.dtype));
}

void CpuBackend::convert(const Tensor& src, const Tensor& dst) {
  require_shape(dst, src.rows, src.cols, "convert");
  const float* s = values(src);
  float* d = values(dst);
  const long n = src.size();
  dispatch(dst.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long i = 0; i < n; ++i) d[i] = store<D>(s[i]);
  });
}

// y = x w^T + b: the product in float32 (Eigen), written into y's float32
// storage, then y = round(acc + b) in one pass.
void CpuBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  const long rows = x.rows, in = x.cols, out = w.rows;
  require_shape(w, out, in, "linear_forward weight");
  require_bias(b, out, "linear_forward bias");
  require_shape(y, rows, out, "linear_forward output");
  if (rows == 0 || out == 0) return;
  float* yv = values(y);
  const float* bv = b.empty() ? nullptr : values(b);
  gemm(values(x), false, values(w), true, yv, rows, out, in, sum_order_);
  dispatch(y.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long i = 0; i < rows; ++i) {
      float* row = yv + i * out;
      for (long o = 0; o < out; ++o) row[o] = store<D>(bv ? row[o] + bv[o] : row[o]);
    }
  });
}

// dx = dy w: the product in float32 (Eigen) into dx's storage, then rounded.
void CpuBackend::linear_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx) {
  const long rows = dy.rows, out = w.rows, in = w.cols;
  require_shape(dy, rows, out, "linear_backward_data dy");
  require_shape(dx, rows, in, "linear_backward_data dx");
  if (rows == 0 || in == 0) return;
  gemm(values(dy), false, values(w), false, values(dx), rows, in, out, sum_order_);
  round_in_place(values(dx), dx.size(), dx.dtype);
}

// The weight-gradient GEMM with beta = 1: dw = dw + dy^T x, the product
// formed completely in a float32 temporary and then added once into the
// gradient buffer, rounded to its dtype (float32, or bfloat16 / float16 for
// low-precision accumulation): one add per micro-batch, as the error model
// counts. db += column sums of dy, each a float32 sum over the rows in
// order, added once the same way.
void CpuBackend::linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  const long rows = x.rows, in = x.cols, out = dy.cols;
  require_shape(dy, rows, out, "linear_backward_weight dy");
  require_shape(dw, out, in, "linear_backward_weight dw");
  require_bias(db, out, "linear_backward_weight db");
  if (out == 0) return;
  const float* dyv = values(dy);
  const std::size_t products = static_cast<std::size_t>(out * in);
  if (scratch_.size() < products + static_cast<std::size_t>(out)) {
    scratch_.resize(products + static_cast<std::size_t>(out));
    peak_bytes_ = std::max(peak_bytes_, live_bytes());
  }
  float* p = scratch_.data();
  float* column_sums = p + products;
  gemm(dyv, true, values(x), false, p, out, in, rows, sum_order_);
  cpu::column_sums(dyv, rows, out, column_sums, sum_order_);
  float* dwv = values(dw);
  float* dbv = db.empty() ? nullptr : values(db);
  dispatch(dw.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (std::size_t k = 0; k < products; ++k) dwv[k] = store<D>(dwv[k] + p[k]);
  });
  if (dbv == nullptr) return;
  dispatch(db.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (long o = 0; o < out; ++o) dbv[o] = store<D>(dbv[o] + column_sums[o]);
  });
}

void CpuBackend::activation_forward(Activation a, const Tensor& x, const Tensor& y) {
  require_shape(y, x.rows, x.cols, "activation_forward");
  const float* xv = values(x);
  float* yv = values(y);
  const long n = x.size();
  dispatch(y.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    switch (a) {
      case Activation::relu:
        for (long i = 0; i < n; ++i) yv[i] = store<D>(element::relu(xv[i]));
        break;
      case Activation::gelu_tanh:
        for (long i = 0; i < n; ++i) yv[i] = store<D>(element::gelu_tanh(xv[i]));
        break;
      case Activation::gelu_erf:
        for (long i = 0; i < n; ++i) yv[i] = store<D>(element::gelu_erf(xv[i]));
        break;
    }
  });
}

void CpuBackend::activation_backward(Activation a, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  require_shape(dy, x.rows, x.cols, "activation_backward dy");
  require_shape(dx, x.rows, x.cols, "activation_backward dx");
  const float *xv = values(x), *dyv = values(dy);
  float* dxv = values(dx);
  const long n = x.size();
  dispatch(dx.dtype, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    switch (a) {
      case Activation::relu:
        for (long i = 0; i < n; ++i) dxv[i] = store<D>(element::relu_grad(xv[i], dyv[i]));
        break;
      case Activation::gelu_tanh:
        for (long i = 0; i < n; ++i) dxv[i] = store<D>(element::gelu_tanh_grad(xv[i], dyv[i]));
        break;
      case Activation::gelu_erf:
        for (long i = 0; i < n; ++i) dxv[i] = store<D>(element::gelu_erf_grad(xv[i], dyv[i]));
        break;
    }
  });
}

void CpuBackend::norm_forward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                              const Tensor& y, const Tensor& saved_mean, const Tensor& saved_rstd,
                              const Tensor& running_mean, const Tensor& running_var) {
  const long rows = x.rows, cols = x.cols;
  const bool centred = c.kind != NormKind::rms;
  require_norm(c, x, "norm_forward");
  const NormGeometry geo = norm_geometry(c, rows, cols);
  require_shape(gamma, 1, geo.channels(), "norm_forward gamma");
  if (centred) require_shape(beta, 1, geo.channels(), "norm_forward beta");
  require_shape(y, rows, cols, "norm_forward y");
  const long groups = geo.group_count();
  require_shape(saved_mean, 1, groups, "norm_forward saved_mean");
  require_shape(saved_rstd, 1, groups, "norm_forward saved_rstd");
  const bool update_running = c.kind == NormKind::batch && !running_mean.empty();
  const float* xv = values(x);
  const long n = geo.group_size();
  for (long g = 0; g < groups; ++g) {
    const auto element = [&](long i) { return geo.element(g, i); };
    float mean = 0.0f;
    if (centred) {
      Sum total(sum_order_);
      for (long i = 0; i < n; ++i) total.add(xv[element(i)]);
      mean = total.result() / static_cast<float>(n);
    }
    Sum squares(sum_order_);
    for (long i = 0; i < n; ++i) {
      const float d = xv[element(i)] - mean;
      squares.add(d * d);
    }
    const float sum_sq = squares.result();
    const float rstd = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + c.eps);
    for (long i = 0; i < n; ++i) {
      const long e = element(i);
      const long ch = geo.channel(e);
      const float x_hat = (xv[e] - mean) * rstd;
      values(y)[e] = round_to(centred ? values(gamma)[ch] * x_hat + values(beta)[ch] : values(gamma)[ch] * x_hat,
                              y.dtype);
    }
    values(saved_mean)[g] = mean;
    values(saved_rstd)[g] = rstd;
    if (update_running) {
      const float unbiased = n > 1 ? sum_sq / static_cast<float>(n - 1) : 0.0f;
      values(running_mean)[g] = (1.0f - c.momentum) * values(running_mean)[g] + c.momentum * mean;
      values(running_var)[g] = (1.0f - c.momentum) * values(running_var)[g] + c.momentum * unbiased;
    }
  }
}

void CpuBackend::norm_backward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& dy,
                               const Tensor& saved_mean, const Tensor& saved_rstd, const Tensor& dx,
                               const Tensor& dgamma, const Tensor& dbeta) {
  const long rows = x.rows, cols = x.cols;
  const bool centred = c.kind != NormKind::rms;
  require_norm(c, x, "norm_backward");
  const NormGeometry geo = norm_geometry(c, rows, cols);
  require_shape(dy, rows, cols, "norm_backward dy");
  require_shape(dx, rows, cols, "norm_backward dx");
  require_shape(dgamma, 1, geo.channels(), "norm_backward dgamma");
  if (centred) require_shape(dbeta, 1, geo.channels(), "norm_backward dbeta");
  const float *xv = values(x), *dyv = values(dy), *gv = values(gamma);
  std::vector<float> x_hat(static_cast<std::size_t>(x.size()));
  const long n = geo.group_size();
  for (long g = 0; g < geo.group_count(); ++g) {
    const auto element = [&](long i) { return geo.element(g, i); };
    const float mean = values(saved_mean)[g], rstd = values(saved_rstd)[g];
    Sum sum_g(sum_order_), sum_gx(sum_order_);
    for (long i = 0; i < n; ++i) {
      const long e = element(i);
      x_hat[e] = (xv[e] - mean) * rstd;
      const float gd = gv[geo.channel(e)] * dyv[e];
      sum_g.add(gd);
      sum_gx.add(gd * x_hat[e]);
    }
    const float mean_g = centred ? sum_g.result() / static_cast<float>(n) : 0.0f;
    const float mean_gx = sum_gx.result() / static_cast<float>(n);
    for (long i = 0; i < n; ++i) {
      const long e = element(i);
      values(dx)[e] = round_to(rstd * (gv[geo.channel(e)] * dyv[e] - mean_g - x_hat[e] * mean_gx), dx.dtype);
    }
  }
  // Per channel, over every row and the channel's columns, in that order.
  const long spatial = geo.spatial;
  for (long ch = 0; ch < geo.channels(); ++ch) {
    Sum sum_gx(sum_order_), sum_d(sum_order_);
    for (long r = 0; r < rows; ++r)
      for (long p = 0; p < spatial; ++p) {
        const long e = r * cols + ch * spatial + p;
        sum_gx.add(dyv[e] * x_hat[static_cast<std::size_t>(e)]);
        sum_d.add(dyv[e]);
      }
    values(dgamma)[ch] = round_to(values(dgamma)[ch] + sum_gx.result(), dgamma.dtype);
    if (centred) values(dbeta)[ch] = round_to(values(dbeta)[ch] + sum_d.result(), dbeta.dtype);
  }
}

double CpuBackend::loss_forward_backward(LossKind k, const Tensor& y, const Tensor& targets, float scale,
                                         const Tensor& dy) {
  const long rows = y.rows, cols = y.cols;
  require_kernel_loss(k);
  require_shape(dy, rows, cols, "loss dy");
  const float* yv = values(y);
  Sum total(sum_order_);
  if (k == LossKind::mse) {
    require_shape(targets, rows, cols, "mse targets");
    const float inv_cols = 1.0f / static_cast<float>(cols);
    for (long i = 0; i < rows; ++i) {
      Sum row(sum_order_);
      for (long j = 0; j < cols; ++j) {
        const float d = yv[i * cols + j] - values(targets)[i * cols + j];
        row.add(d * d);
        values(dy)[i * cols + j] =
            round_to(element::mse_grad(yv[i * cols + j], values(targets)[i * cols + j], inv_cols, scale), dy.dtype);
      }
      total.add(row.result() * inv_cols);
    }
    return total.result();
  }
  require_shape(targets, rows, 1, "cross_entropy targets");
  std::vector<float> e(static_cast<std::size_t>(cols));
  for (long i = 0; i < rows; ++i) {
    const int cls = static_cast<int>(values(targets)[i]);
    if (cls < 0) {
      for (long j = 0; j < cols; ++j) values(dy)[i * cols + j] = 0.0f;
      continue;
    }
    GRADEQ_REQUIRE(cls < cols, "cross_entropy: class index out of range");
    float row_max = yv[i * cols];
    for (long j = 1; j < cols; ++j) row_max = std::max(row_max, yv[i * cols + j]);
    Sum terms(sum_order_);
    for (long j = 0; j < cols; ++j) {
      e[j] = std::exp(yv[i * cols + j] - row_max);
      terms.add(e[j]);
    }
    const float denom = terms.result();
    total.add(std::log(denom) - (yv[i * cols + cls] - row_max));
    for (long j = 0; j < cols; ++j) {
      const float p = e[j] / denom;
      values(dy)[i * cols + j] = round_to(scale * (j == cls ? p - 1.0f : p), dy.dtype);
    }
  }
  return total.result();
}

void CpuBackend::zero(std::span<const Tensor> ts) {
  for (const Tensor& t : ts) std::fill(values(t), values(t) + t.size(), 0.0f);
}

void CpuBackend::scale(std::span<const Tensor> ts, float s) {
  for (const Tensor& t : ts) {
    float* v = values(t);
    const long n = t.size();
    dispatch(t.dtype, [&](auto dt) {
      constexpr DType D = decltype(dt)::value;
      for (long i = 0; i < n; ++i) v[i] = store<D>(v[i] * s);
    });
  }
}

void CpuBackend::accumulate(std::span<const Tensor> dst, std::span<const Tensor> src,
                            std::span<const Tensor> compensation) {
  require_accumulate_lists(dst, src, compensation);
  for (std::size_t t = 0; t < dst.size(); ++t) {
    float* d = values(dst[t]);
    const float* s = values(src[t]);
    float* c = compensation.empty() ? nullptr : values(compensation[t]);
    const long n = dst[t].size();
    dispatch(dst[t].dtype, [&](auto dt) {
      constexpr DType D = decltype(dt)::value;
      if (c == nullptr) {
        for (long i = 0; i < n; ++i) d[i] = store<D>(d[i] + s[i]);
      } else {
        for (long i = 0; i < n; ++i) element::kahan_add(d[i], c[i], s[i], D);
      }
    });
  }
}

// Sum of squares in float32, in a fixed order that vectorizes: element i of
// each tensor goes to partial sum i mod kNormLanes (the partial sums run on
// over the list), and the partial sums are combined pairwise at the end.
// The order depends on the tensors' sizes only.
float CpuBackend::global_norm(std::span<const Tensor> ts) {
  if (sum_order_ == SumOrder::adversarial) {
    Sum squares(sum_order_);
    for (const Tensor& t : ts)
      for (long i = 0; i < t.size(); ++i) squares.add(values(t)[i] * values(t)[i]);
    return std::sqrt(squares.result());
  }
  constexpr long kNormLanes = 32;
  float part[kNormLanes] = {};
  for (const Tensor& t : ts) {
    const float* v = values(t);
    const long n = t.size();
    long i = 0;
    for (; i + kNormLanes <= n; i += kNormLanes)
      for (long j = 0; j < kNormLanes; ++j) part[j] += v[i + j] * v[i + j];
    for (long j = 0; i + j < n; ++j) part[j] += v[i + j] * v[i + j];
  }
  for (long width = kNormLanes / 2; width > 0; width /= 2)
    for (long j = 0; j < width; ++j) part[j] += part[j + width];
  return std::sqrt(part[0]);
}

// Inf or NaN: every exponent bit set. One pass per tensor without a branch
// per element.
bool CpuBackend::all_finite(std::span<const Tensor> ts) {
  for (const Tensor& t : ts) {
    const float* v = values(t);
    const long n = t.size();
    std::uint32_t non_finite = 0;
    for (long i = 0; i < n; ++i) non_finite |= static_cast<std::uint32_t>((float_bits(v[i]) & 0x7f800000u) == 0x7f800000u);
    if (non_finite != 0) return false;
  }
  return true;
}

void CpuBackend::optimizer_step(const OptimizerStep& s, std::span<const Tensor> params, std::span<const Tensor> grads,
                                std::span<const Tensor> first_moment, std::span<const Tensor> second_moment) {
  const OptimizerStateUse use = require_optimizer_lists(s, params, grads, first_moment, second_moment);
  for (std::size_t t = 0; t < params.size(); ++t) {
    float* p = values(params[t]);
    const float* g = values(grads[t]);
    const long n = params[t].size();
    if (s.kind == OptimizerKind::sgd) {
      if (use.first) {
        float* buf = values(first_moment[t]);
        for (long i = 0; i < n; ++i)
          element::sgd_update(p[i], g[i], buf[i], s.lr, s.momentum, s.one_minus_dampening, s.nesterov, s.first_step,
                              s.weight_decay);
      } else {
        for (long i = 0; i < n; ++i) {
          float unused = 0.0f;  // momentum 0: the buffer is neither read nor written
          element::sgd_update(p[i], g[i], unused, s.lr, s.momentum, s.one_minus_dampening, s.nesterov, s.first_step,
                              s.weight_decay);
        }
      }
    } else {
      float* m = values(first_moment[t]);
      float* v = values(second_moment[t]);
      const auto step = [&](auto adamw) {
        for (long i = 0; i < n; ++i)
          element::adam_update(p[i], g[i], m[i], v[i], decltype(adamw)::value, s.weight_decay, s.decay, s.beta1,
                               s.one_minus_beta1, s.beta2, s.one_minus_beta2, s.eps, s.step_size,
                               s.inv_sqrt_bias_correction2);
      };
      if (s.kind == OptimizerKind::adamw) step(std::true_type{});
      else step(std::false_type{});
    }
  }
}

}  // namespace gradeq
