// cpu_backend.cpp — host implementations. Each op: check shapes, loop in
// float32 with float32 accumulators, round every store to the dtype of the
// tensor written.
#include "kernels/cpu/cpu_backend.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/element_math.h"
#include "kernels/norm_geometry.h"

namespace gradeq {
namespace {

float* values(const Tensor& t) { return static_cast<float*>(t.data); }

std::size_t bytes_of(long count, DType t) { return static_cast<std::size_t>(count) * (t == DType::f32 ? 4 : 2); }

}  // namespace

Tensor CpuBackend::allocate(long rows, long cols, DType dtype) {
  GRADEQ_REQUIRE(rows >= 0 && cols >= 0, "allocate: negative shape");
  Tensor t{nullptr, rows, cols, dtype};
  const long n = rows * cols;
  auto storage = std::make_unique<float[]>(static_cast<std::size_t>(n > 0 ? n : 1));
  t.data = storage.get();
  const std::size_t bytes = bytes_of(n, dtype);
  allocations_.emplace(t.data, std::make_pair(std::move(storage), bytes));
  live_bytes_ += bytes;
  if (live_bytes_ > peak_bytes_) peak_bytes_ = live_bytes_;
  return t;
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
  for (long i = 0; i < dst.size(); ++i) values(dst)[i] = round_to(host[i], dst.dtype);
}

void CpuBackend::download(const Tensor& src, std::span<float> host) {
  GRADEQ_REQUIRE(static_cast<long>(host.size()) == src.size(), "download: size mismatch");
  for (long i = 0; i < src.size(); ++i) host[i] = values(src)[i];
}

void CpuBackend::fill(const Tensor& t, float value) {
  for (long i = 0; i < t.size(); ++i) values(t)[i] = round_to(value, t.dtype);
}

void CpuBackend::convert(const Tensor& src, const Tensor& dst) {
  require_shape(dst, src.rows, src.cols, "convert");
  for (long i = 0; i < src.size(); ++i) values(dst)[i] = round_to(values(src)[i], dst.dtype);
}

void CpuBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  const long rows = x.rows, in = x.cols, out = w.rows;
  require_shape(w, out, in, "linear_forward weight");
  require_shape(b, 1, out, "linear_forward bias");
  require_shape(y, rows, out, "linear_forward output");
  const float *xv = values(x), *wv = values(w), *bv = values(b);
  for (long i = 0; i < rows; ++i)
    for (long o = 0; o < out; ++o) {
      float acc = 0.0f;
      for (long k = 0; k < in; ++k) acc += xv[i * in + k] * wv[o * in + k];
      values(y)[i * out + o] = round_to(acc + bv[o], y.dtype);
    }
}

void CpuBackend::linear_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx) {
  const long rows = dy.rows, out = w.rows, in = w.cols;
  require_shape(dy, rows, out, "linear_backward_data dy");
  require_shape(dx, rows, in, "linear_backward_data dx");
  const float *dyv = values(dy), *wv = values(w);
  std::vector<float> acc(static_cast<std::size_t>(in));
  for (long i = 0; i < rows; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (long o = 0; o < out; ++o) {
      const float d = dyv[i * out + o];
      for (long k = 0; k < in; ++k) acc[k] += d * wv[o * in + k];
    }
    for (long k = 0; k < in; ++k) values(dx)[i * in + k] = round_to(acc[k], dx.dtype);
  }
}

// The weight-gradient GEMM with beta = 1: dw = dw + dy^T x, the product
// formed in float32 and added once into the gradient buffer, rounded to its
// dtype (float32, or bfloat16 / float16 for low-precision accumulation).
void CpuBackend::linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  const long rows = x.rows, in = x.cols, out = dy.cols;
  require_shape(dy, rows, out, "linear_backward_weight dy");
  require_shape(dw, out, in, "linear_backward_weight dw");
  require_shape(db, 1, out, "linear_backward_weight db");
  const float *dyv = values(dy), *xv = values(x);
  std::vector<float> acc(static_cast<std::size_t>(in));
  for (long o = 0; o < out; ++o) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    float bias_acc = 0.0f;
    for (long i = 0; i < rows; ++i) {
      const float d = dyv[i * out + o];
      bias_acc += d;
      for (long k = 0; k < in; ++k) acc[k] += d * xv[i * in + k];
    }
    for (long k = 0; k < in; ++k) values(dw)[o * in + k] = round_to(values(dw)[o * in + k] + acc[k], dw.dtype);
    values(db)[o] = round_to(values(db)[o] + bias_acc, db.dtype);
  }
}

void CpuBackend::activation_forward(Activation a, const Tensor& x, const Tensor& y) {
  require_shape(y, x.rows, x.cols, "activation_forward");
  for (long i = 0; i < x.size(); ++i) {
    const float v = values(x)[i];
    values(y)[i] = round_to(a == Activation::relu ? element::relu(v) : element::gelu_tanh(v), y.dtype);
  }
}

void CpuBackend::activation_backward(Activation a, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  require_shape(dy, x.rows, x.cols, "activation_backward dy");
  require_shape(dx, x.rows, x.cols, "activation_backward dx");
  for (long i = 0; i < x.size(); ++i) {
    const float v = values(x)[i], d = values(dy)[i];
    values(dx)[i] = round_to(a == Activation::relu ? element::relu_grad(v, d) : element::gelu_tanh_grad(v, d), dx.dtype);
  }
}

void CpuBackend::norm_forward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                              const Tensor& y, const Tensor& saved_mean, const Tensor& saved_rstd,
                              const Tensor& running_mean, const Tensor& running_var) {
  const long rows = x.rows, cols = x.cols;
  const bool centred = c.kind != NormKind::rms;
  GRADEQ_REQUIRE(c.kind != NormKind::group || (c.groups > 0 && cols % c.groups == 0 && rows % c.positions == 0),
                 "norm_forward: groups must divide channels and positions must divide rows");
  require_shape(gamma, 1, cols, "norm_forward gamma");
  if (centred) require_shape(beta, 1, cols, "norm_forward beta");
  require_shape(y, rows, cols, "norm_forward y");
  const NormGeometry geo = norm_geometry(c, rows, cols);
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
      for (long i = 0; i < n; ++i) mean += xv[element(i)];
      mean /= static_cast<float>(n);
    }
    float sum_sq = 0.0f;
    for (long i = 0; i < n; ++i) {
      const float d = xv[element(i)] - mean;
      sum_sq += d * d;
    }
    const float rstd = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + c.eps);
    for (long i = 0; i < n; ++i) {
      const long e = element(i);
      const long ch = e % cols;
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
  require_shape(dy, rows, cols, "norm_backward dy");
  require_shape(dx, rows, cols, "norm_backward dx");
  require_shape(dgamma, 1, cols, "norm_backward dgamma");
  if (centred) require_shape(dbeta, 1, cols, "norm_backward dbeta");
  const float *xv = values(x), *dyv = values(dy), *gv = values(gamma);
  std::vector<float> x_hat(static_cast<std::size_t>(x.size()));
  const NormGeometry geo = norm_geometry(c, rows, cols);
  const long n = geo.group_size();
  for (long g = 0; g < geo.group_count(); ++g) {
    const auto element = [&](long i) { return geo.element(g, i); };
    const float mean = values(saved_mean)[g], rstd = values(saved_rstd)[g];
    float mean_g = 0.0f, mean_gx = 0.0f;
    for (long i = 0; i < n; ++i) {
      const long e = element(i);
      x_hat[e] = (xv[e] - mean) * rstd;
      const float gd = gv[e % cols] * dyv[e];
      mean_g += gd;
      mean_gx += gd * x_hat[e];
    }
    mean_g = centred ? mean_g / static_cast<float>(n) : 0.0f;
    mean_gx /= static_cast<float>(n);
    for (long i = 0; i < n; ++i) {
      const long e = element(i);
      values(dx)[e] = round_to(rstd * (gv[e % cols] * dyv[e] - mean_g - x_hat[e] * mean_gx), dx.dtype);
    }
  }
  for (long ch = 0; ch < cols; ++ch) {
    float sum_gx = 0.0f, sum_d = 0.0f;
    for (long r = 0; r < rows; ++r) {
      sum_gx += dyv[r * cols + ch] * x_hat[r * cols + ch];
      sum_d += dyv[r * cols + ch];
    }
    values(dgamma)[ch] = round_to(values(dgamma)[ch] + sum_gx, dgamma.dtype);
    if (centred) values(dbeta)[ch] = round_to(values(dbeta)[ch] + sum_d, dbeta.dtype);
  }
}

double CpuBackend::loss_forward_backward(LossKind k, const Tensor& y, const Tensor& targets, float scale,
                                         const Tensor& dy) {
  const long rows = y.rows, cols = y.cols;
  require_shape(dy, rows, cols, "loss dy");
  const float* yv = values(y);
  float total = 0.0f;
  if (k == LossKind::mse) {
    require_shape(targets, rows, cols, "mse targets");
    const float inv_cols = 1.0f / static_cast<float>(cols);
    for (long i = 0; i < rows; ++i) {
      float row = 0.0f;
      for (long j = 0; j < cols; ++j) {
        const float d = yv[i * cols + j] - values(targets)[i * cols + j];
        row += d * d;
        values(dy)[i * cols + j] =
            round_to(element::mse_grad(yv[i * cols + j], values(targets)[i * cols + j], inv_cols, scale), dy.dtype);
      }
      total += row * inv_cols;
    }
    return total;
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
    float denom = 0.0f;
    for (long j = 0; j < cols; ++j) {
      e[j] = std::exp(yv[i * cols + j] - row_max);
      denom += e[j];
    }
    total += std::log(denom) - (yv[i * cols + cls] - row_max);
    for (long j = 0; j < cols; ++j) {
      const float p = e[j] / denom;
      values(dy)[i * cols + j] = round_to(scale * (j == cls ? p - 1.0f : p), dy.dtype);
    }
  }
  return total;
}

void CpuBackend::zero(std::span<const Tensor> ts) {
  for (const Tensor& t : ts) std::fill(values(t), values(t) + t.size(), 0.0f);
}

void CpuBackend::scale(std::span<const Tensor> ts, float s) {
  for (const Tensor& t : ts)
    for (long i = 0; i < t.size(); ++i) values(t)[i] = round_to(values(t)[i] * s, t.dtype);
}

void CpuBackend::accumulate(std::span<const Tensor> dst, std::span<const Tensor> src,
                            std::span<const Tensor> compensation) {
  require_accumulate_lists(dst, src, compensation);
  for (std::size_t t = 0; t < dst.size(); ++t) {
    float* d = values(dst[t]);
    const float* s = values(src[t]);
    if (compensation.empty()) {
      for (long i = 0; i < dst[t].size(); ++i) d[i] = round_to(d[i] + s[i], dst[t].dtype);
    } else {
      float* c = values(compensation[t]);
      for (long i = 0; i < dst[t].size(); ++i) element::kahan_add(d[i], c[i], s[i], dst[t].dtype);
    }
  }
}

float CpuBackend::global_norm(std::span<const Tensor> ts) {
  float sum = 0.0f;
  for (const Tensor& t : ts)
    for (long i = 0; i < t.size(); ++i) sum += values(t)[i] * values(t)[i];
  return std::sqrt(sum);
}

bool CpuBackend::all_finite(std::span<const Tensor> ts) {
  for (const Tensor& t : ts)
    for (long i = 0; i < t.size(); ++i)
      if (!std::isfinite(values(t)[i])) return false;
  return true;
}

void CpuBackend::optimizer_step(const OptimizerStep& s, std::span<const Tensor> params, std::span<const Tensor> grads,
                                std::span<const Tensor> first_moment, std::span<const Tensor> second_moment) {
  const OptimizerStateUse use = require_optimizer_lists(s, params, grads, first_moment, second_moment);
  for (std::size_t t = 0; t < params.size(); ++t) {
    float* p = values(params[t]);
    const float* g = values(grads[t]);
    float* a = use.first ? values(first_moment[t]) : nullptr;
    float* b = use.second ? values(second_moment[t]) : nullptr;
    float unused = 0.0f;
    for (long i = 0; i < params[t].size(); ++i) {
      if (s.kind == OptimizerKind::sgd) {
        element::sgd_update(p[i], g[i], a ? a[i] : unused, s.lr, s.momentum, s.one_minus_dampening, s.nesterov,
                            s.first_step, s.weight_decay);
      } else {
        element::adam_update(p[i], g[i], a[i], b[i], s.kind == OptimizerKind::adamw, s.weight_decay, s.decay, s.beta1,
                             s.one_minus_beta1, s.beta2, s.one_minus_beta2, s.eps, s.step_size,
                             s.inv_sqrt_bias_correction2);
      }
    }
  }
}

}  // namespace gradeq
