// element_math.h — per-element float32 math shared by the host and CUDA
// backends (__host__ __device__ under nvcc), so that CPU-only CI exercises
// the same formulas the GPU runs. Only scalar functions live here: no
// loops, no memory, no launch logic.
#pragma once

#include <math.h>

#include "kernels/dtype.h"

namespace gradeq::element {

GRADEQ_HD inline float relu(float x) { return x > 0.0f ? x : 0.0f; }
GRADEQ_HD inline float relu_grad(float x, float dy) { return x > 0.0f ? dy : 0.0f; }

// GELU, tanh form.
inline constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kGeluCubic = 0.044715f;

GRADEQ_HD inline float gelu_tanh(float x) {
  const float t = tanhf(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5f * x * (1.0f + t);
}

GRADEQ_HD inline float gelu_tanh_grad(float x, float dy) {
  const float t = tanhf(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float inner_grad = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * inner_grad);
}

// GELU, exact (erf) form, PyTorch's nn.GELU() default: x Phi(x), Phi the
// standard normal CDF 0.5 (1 + erf(x / sqrt 2)); its slope Phi(x) + x phi(x),
// phi = exp(-x^2 / 2) / sqrt(2 pi).
inline constexpr float kSqrtHalf = 0.7071067811865476f;
inline constexpr float kInvSqrt2Pi = 0.3989422804014327f;

GRADEQ_HD inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * kSqrtHalf)); }

GRADEQ_HD inline float gelu_erf_grad(float x, float dy) {
  const float cdf = 0.5f * (1.0f + erff(x * kSqrtHalf));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
  return dy * (cdf + x * pdf);
}

// d/dy of the per-row MSE (1/D) sum (y - t)^2, times scale.
GRADEQ_HD inline float mse_grad(float y, float t, float inv_cols, float scale) {
  return scale * (2.0f * inv_cols * (y - t));
}

// sum += value in dtype `t`, Kahan-compensated: comp holds the low part lost
// so far (Kahan 1965; Higham, Accuracy and Stability, Alg. 4.2).
GRADEQ_HD inline void kahan_add(float& sum, float& comp, float value, DType t) {
  const float y = round_to(value - comp, t);
  const float s = round_to(sum + y, t);
  comp = round_to(round_to(s - sum, t) - y, t);
  sum = s;
}

// One SGD step on one element (momentum buffer `buf` used when momentum != 0).
GRADEQ_HD inline void sgd_update(float& p, float g, float& buf, float lr, float momentum, float one_minus_dampening,
                                 bool nesterov, bool first_step, float weight_decay) {
  if (weight_decay != 0.0f) g = g + weight_decay * p;
  if (momentum != 0.0f) {
    buf = first_step ? g : momentum * buf + one_minus_dampening * g;
    g = nesterov ? g + momentum * buf : buf;
  }
  p = p - lr * g;
}

// One Adam (adamw = false, L2 weight decay) or AdamW (decoupled decay) step.
GRADEQ_HD inline void adam_update(float& p, float g, float& m, float& v, bool adamw, float weight_decay, float decay,
                                  float beta1, float one_minus_beta1, float beta2, float one_minus_beta2, float eps,
                                  float step_size, float inv_sqrt_bias_correction2) {
  if (!adamw && weight_decay != 0.0f) g = g + weight_decay * p;
  if (adamw && weight_decay != 0.0f) p = p * decay;
  m = beta1 * m + one_minus_beta1 * g;
  v = beta2 * v + one_minus_beta2 * (g * g);
  const float denom = sqrtf(v) * inv_sqrt_bias_correction2 + eps;
  p = p - step_size * (m / denom);
}

}  // namespace gradeq::element
