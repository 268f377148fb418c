// optimizers.h — float64 reference optimizer steps, gradient clipping and
// the learning-rate schedule, with PyTorch's semantics. One function per
// optimizer, applied to one parameter tensor, its window gradient and its
// state. Hyper-parameters a kernel receives as float32 constants (the
// step's learning rate, bias corrections) are computed here in float64 and
// enter as T(c), exactly as the kernel gets them. No I/O, no harness types.
#pragma once

#include <cmath>
#include <limits>
#include <string>

#include "reference/bounded.h"
#include "reference/tensor.h"

namespace gradeq::ref {

enum class OptimizerKind { sgd, adam, adamw };

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::sgd;
  double lr = 0.1;
  double momentum = 0.0;  // SGD
  double dampening = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;  // SGD and Adam: L2 added to the gradient; AdamW: decoupled
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

std::string optimizer_name(const OptimizerSpec& o);

// Clip by global norm, once per window: coefficient max_norm / (norm + 1e-6),
// applied only when below 1 (torch.nn.utils.clip_grad_norm_).
struct ClipSpec {
  bool enabled = false;
  double max_norm = 1.0;
};
inline constexpr double kClipEpsilon = 1e-6;  // PyTorch's, part of the definition

// Learning-rate multiplier per optimizer step: constant, or linear warmup
// then cosine decay to 0 at total_steps.
struct ScheduleSpec {
  bool warmup_cosine = false;
  long warmup_steps = 0;
  long total_steps = 1;
};

inline double schedule_multiplier(const ScheduleSpec& s, long step) {
  if (!s.warmup_cosine) return 1.0;
  if (step < s.warmup_steps) return static_cast<double>(step) / static_cast<double>(s.warmup_steps);
  const double progress = static_cast<double>(step - s.warmup_steps) / static_cast<double>(s.total_steps - s.warmup_steps);
  return 0.5 * (1.0 + std::cos(M_PI * std::min(progress, 1.0)));
}

// SGD (momentum, dampening, Nesterov, L2 weight decay). `first` is the
// optimizer's first step, when the momentum buffer starts as the gradient.
template <class T>
void sgd_step(const OptimizerSpec& o, double lr, bool first, Matrix<T>& p, const Matrix<T>& grad, Matrix<T>& buf) {
  const T lr_t(lr), wd(o.weight_decay), mu(o.momentum), keep(1.0 - o.dampening);
  for (long i = 0; i < p.size(); ++i) {
    T g = grad.data()[i];
    if (o.weight_decay != 0.0) g = g + wd * p.data()[i];
    if (o.momentum != 0.0) {
      buf.data()[i] = first ? g : mu * buf.data()[i] + keep * g;
      g = o.nesterov ? g + mu * buf.data()[i] : buf.data()[i];
    }
    p.data()[i] = p.data()[i] - lr_t * g;
  }
}

// Plain SGD, p <- p - lr g (the golden file's first case).
template <class T>
void sgd_step(Matrix<T>& p, const Matrix<T>& g, const T& lr) {
  for (long i = 0; i < p.size(); ++i) p.data()[i] = p.data()[i] - lr * g.data()[i];
}

// Adam / AdamW at step t = step + 1, PyTorch's formulation:
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc_i = 1 - b_i^t,
// with Adam's L2 (g += wd p) or AdamW's decoupled decay (p *= 1 - lr wd).
// The denominator is at least eps, which bounds the update even where the
// gradient's sign is uncertain; and Adam's invariant bounds it better:
// by Cauchy-Schwarz over the gradient history, when b1^2 < b2,
//   |m| <= (1 - b1) / sqrt((1 - b1^2 / b2) (1 - b2)) * sqrt(v),
// so |m / (sqrt(v) / sqrt(bc2) + eps)| <= that constant * sqrt(bc2), for the
// exact values and the kernel's alike (its m and v come from its own
// gradients). A margin of 1e-3 covers the rounding of m and v.
inline double adam_ratio_radius(const OptimizerSpec& o, double bc2) {
  const double q = o.beta1 * o.beta1 / o.beta2;
  if (!(q < 1.0)) return std::numeric_limits<double>::infinity();
  return (1.0 - o.beta1) / std::sqrt((1.0 - q) * (1.0 - o.beta2)) * std::sqrt(bc2) * (1.0 + 1e-3);
}

template <class T>
void adam_step(const OptimizerSpec& o, double lr, long step, Matrix<T>& p, const Matrix<T>& grad, Matrix<T>& m,
               Matrix<T>& v) {
  const double t = static_cast<double>(step + 1);
  const double bc1 = 1.0 - std::pow(o.beta1, t), bc2 = 1.0 - std::pow(o.beta2, t);
  const T b1(o.beta1), one_minus_b1(1.0 - o.beta1), b2(o.beta2), one_minus_b2(1.0 - o.beta2);
  const T step_size(lr / bc1), inv_sqrt_bc2(1.0 / std::sqrt(bc2)), eps(o.eps);
  const T decay(1.0 - lr * o.weight_decay), wd(o.weight_decay);
  const double radius = adam_ratio_radius(o, bc2);
  for (long i = 0; i < p.size(); ++i) {
    T g = grad.data()[i];
    if (o.kind == OptimizerKind::adam && o.weight_decay != 0.0) g = g + wd * p.data()[i];
    if (o.kind == OptimizerKind::adamw && o.weight_decay != 0.0) p.data()[i] = p.data()[i] * decay;
    m.data()[i] = b1 * m.data()[i] + one_minus_b1 * g;
    v.data()[i] = b2 * v.data()[i] + one_minus_b2 * (g * g);
    const T denom = sqrt(v.data()[i]) * inv_sqrt_bc2 + eps;
    p.data()[i] = p.data()[i] - step_size * within_radius(divide_by_positive(m.data()[i], denom, o.eps), radius);
  }
}

// Clip coefficient for gradients whose global 2-norm is `norm`: 1 when the
// norm is within max_norm (as if not applied), else max_norm / (norm + 1e-6).
// It lies in (0, 1] a priori (the kernel's within a few roundings of it).
template <class T>
T clip_coefficient(const ClipSpec& c, const T& norm) {
  return within_interval(min(T(1.0), divide_by_positive(T(c.max_norm), norm + T(kClipEpsilon), kClipEpsilon)), 0.0,
                         a_priori_margin(1));
}

}  // namespace gradeq::ref
