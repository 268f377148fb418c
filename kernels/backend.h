// backend.h — the Backend interface: every kernel the harness drives.
//
// The harness never calls a kernel directly; it composes a training step
// from these ops, so the same scenario runs on the host backend, the CUDA
// backend, a mutant, or a user's own backend. Conventions, which every
// implementation must keep:
//   * Tensors are row-major [rows, cols] views of backend memory; vectors
//     are [1, n]. A tensor's dtype says how values are rounded when stored;
//     arithmetic is float32 and reductions accumulate in float32.
//   * "overwrite" outputs are written; "accumulate" outputs get += (beta = 1,
//     as PyTorch's .grad and a cuBLAS wgrad with beta = 1). Zeroing is
//     explicit (zero()); nothing is zeroed behind the caller's back.
//   * Statistics of normalizers are two-pass or Welford, never E[x^2]-E[x]^2
//     (docs/NUMERICS.md assumes it).
// The ops themselves, with their contracts, are listed in backend_ops.def;
// this class makes each a pure virtual method. A user overrides the ops
// they own and inherits the rest from a backend (or ForwardingBackend).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "kernels/dtype.h"
#include "reference/kinds.h"

namespace gradeq {

struct Tensor {
  void* data = nullptr;
  long rows = 0, cols = 0;
  DType dtype = DType::f32;

  long size() const { return rows * cols; }
  bool empty() const { return size() == 0; }
};

enum class Activation { relu, gelu_tanh, gelu_erf };

using ref::NormKind;

struct NormConfig {
  NormKind kind = NormKind::layer;
  long groups = 1;        // group: channel groups
  long positions = 1;     // rows per sample
  long spatial = 1;       // batch, group: columns per channel (an image's H W, NCHW); gamma and beta are per channel
  float eps = 1e-5f;       // PyTorch's default for every normalizer
  float momentum = 0.1f;  // batch: weight of the new statistics in the running ones
};

using ref::LossKind;

// Multi-head self-attention over samples of `positions` consecutive rows
// (kernels/backend_ops.def: attention_forward).
struct AttentionConfig {
  long heads = 1;
  long positions = 1;       // rows per sample: its keys are its own rows
  bool causal = true;       // query i sees keys j <= i of its sample
  long padding_idx = -1;    // keys whose token id is this are masked (< 0: none)
};

// A 2-D convolution (PyTorch's nn.Conv2d) over images stored one sample
// per row in NCHW order: x [samples, C_in H W], y [samples, C_out H_out
// W_out], w [C_out, C_in/groups k k], b [1, C_out] (kernels/backend_ops.def:
// conv2d_forward).
struct Conv2dConfig {
  long in_channels = 1, height = 1, width = 1;
  long out_channels = 1, kernel = 1, stride = 1, padding = 0, dilation = 1, groups = 1;

  GRADEQ_HD long out_height() const { return (height + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1; }
  GRADEQ_HD long out_width() const { return (width + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1; }
  // The input row (column) that tap k of output row (column) o reads;
  // outside [0, height) ([0, width)) it is padding.
  GRADEQ_HD long input_index(long o, long k) const { return o * stride - padding + k * dilation; }
  // The output row (column), among `out`, whose tap k reads input row
  // (column) i; -1 where none does (padding, or between strides).
  GRADEQ_HD long output_index(long i, long k, long out) const {
    const long t = i + padding - k * dilation;
    return t < 0 || t % stride != 0 || t / stride >= out ? -1 : t / stride;
  }
  GRADEQ_HD long in_per_group() const { return in_channels / groups; }
  GRADEQ_HD long out_per_group() const { return out_channels / groups; }
  GRADEQ_HD long taps() const { return in_per_group() * kernel * kernel; }  // a weight row
  GRADEQ_HD long in_size() const { return in_channels * height * width; }
  GRADEQ_HD long out_size() const { return out_channels * out_height() * out_width(); }
};

// How a backend computes conv2d_*: through a column buffer (im2col) and
// its GEMM, or in the direct form, with no column buffer (backends
// "cpu-direct" and "cuda-direct"; kernels/cpu/conv2d.cpp and
// kernels/cuda/conv2d.cu say what each form sums in which order).
enum class ConvForm { im2col, direct };

// Average pooling over windows of kernel_h x kernel_w pixels at stride_h,
// stride_w, no padding, on images stored one sample per row (NCHW): x
// [samples, C H W], y [samples, C H_out W_out] (kernels/backend_ops.def:
// avgpool_forward). The global average pool is one window over the image.
struct PoolConfig {
  long channels = 1, height = 1, width = 1;
  long kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;

  GRADEQ_HD long out_height() const { return (height - kernel_h) / stride_h + 1; }
  GRADEQ_HD long out_width() const { return (width - kernel_w) / stride_w + 1; }
  GRADEQ_HD long in_size() const { return channels * height * width; }
  GRADEQ_HD long out_size() const { return channels * out_height() * out_width(); }
  GRADEQ_HD long count() const { return kernel_h * kernel_w; }
};

enum class OptimizerKind { sgd, adam, adamw };

// One optimizer step's constants, as float32. Everything derived from the
// hyper-parameters (1 - beta, bias corrections, AdamW's decay factor) is
// computed by the caller in float64 and rounded once, so that every
// backend and the reference use the same constants.
struct OptimizerStep {
  OptimizerKind kind = OptimizerKind::sgd;
  float lr = 0.0f;  // this step's learning rate (schedule already applied)
  // SGD: g += weight_decay p; buf = first_step ? g : momentum buf + (1 - dampening) g;
  //      g = nesterov ? g + momentum buf : buf (when momentum != 0); p -= lr g
  float momentum = 0.0f, one_minus_dampening = 1.0f;
  bool nesterov = false, first_step = false;
  float weight_decay = 0.0f;  // SGD and Adam: L2 on the gradient
  // Adam / AdamW: m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
  //   p -= step_size * m / (sqrt(v) * inv_sqrt_bias_correction2 + eps),
  //   step_size = lr / (1 - beta1^t); AdamW first p *= decay = 1 - lr wd.
  // Defaults: PyTorch's Adam/AdamW hyper-parameters (callers set their own).
  float beta1 = 0.9f, one_minus_beta1 = 0.1f, beta2 = 0.999f, one_minus_beta2 = 0.001f, eps = 1e-8f;
  float step_size = 0.0f, inv_sqrt_bias_correction2 = 1.0f, decay = 1.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory
  virtual Tensor allocate(long rows, long cols, DType dtype) = 0;
  virtual void release(Tensor& t) = 0;
  // Host floats into t, rounded to t.dtype; and back.
  virtual void upload(const Tensor& dst, std::span<const float> host) = 0;
  virtual void download(const Tensor& src, std::span<float> host) = 0;
  // Bytes this backend holds now: the tensors it allocated plus any
  // workspace of its own (GEMM results, staging, reduction partials). Peak:
  // the most it held since construction or the last reset_peak_bytes(),
  // which also drops cached workspace so that the next measurement sees it
  // allocated again (harness/core/measured_memory.h measures a run this way).
  virtual std::size_t live_bytes() const = 0;
  virtual std::size_t peak_bytes() const = 0;
  virtual void reset_peak_bytes() = 0;

  // ---- the ops, listed with their contracts in kernels/backend_ops.def
#define GRADEQ_BACKEND_OP(R, NAME, PARAMETERS, ARGUMENTS) virtual R NAME PARAMETERS = 0;
#include "kernels/backend_ops.def"
#undef GRADEQ_BACKEND_OP

  // ---- determinism: when on, results are bitwise identical run to run.
  virtual void set_deterministic(bool on) = 0;
  virtual bool deterministic() const = 0;

  // ---- processes: whether a copy of this backend made by fork() works in
  // the child (host memory only, no driver state). The gate then runs
  // properties in a worker process beside this one. Off unless a backend
  // says so.
  virtual bool survives_fork() const { return false; }
};

}  // namespace gradeq
