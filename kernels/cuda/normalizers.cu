// normalizers.cu — LayerNorm, RMSNorm, GroupNorm and BatchNorm: one block
// per statistics group (kernels/norm_geometry.h), two-pass statistics, the
// coupling means of the backward, and per-channel parameter gradients.
#include "kernels/cuda/cuda_backend.h"
#include "kernels/norm_geometry.h"

#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

// One block per statistics group: two-pass mean and variance, y, the
// saved statistics, and BatchNorm's running statistics.
__global__ void norm_forward_kernel(NormGeometry geo, float eps, float momentum, const void* x, DType tx,
                                    const void* gamma, DType tg, const void* beta, DType tb, void* y, DType ty,
                                    float* saved_mean, float* saved_rstd, float* running_mean, float* running_var) {
  const long g = blockIdx.x;
  const long n = geo.group_size();
  const bool centred = geo.kind != NormKind::rms;
  float s = 0.0f;
  if (centred)
    for (long i = threadIdx.x; i < n; i += blockDim.x) s += load(x, tx, geo.element(g, i));
  const float mean = centred ? block_sum(s) / static_cast<float>(n) : 0.0f;
  float q = 0.0f;
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    const float d = load(x, tx, geo.element(g, i)) - mean;
    q += d * d;
  }
  const float sum_sq = block_sum(q);
  const float rstd = 1.0f / sqrtf(sum_sq / static_cast<float>(n) + eps);
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    const long e = geo.element(g, i);
    const long c = geo.channel(e);
    const float x_hat = (load(x, tx, e) - mean) * rstd;
    const float v = load(gamma, tg, c) * x_hat;
    store(y, ty, e, centred ? v + load(beta, tb, c) : v);
  }
  if (threadIdx.x == 0) {
    saved_mean[g] = mean;
    saved_rstd[g] = rstd;
    if (running_mean) {
      const float unbiased = n > 1 ? sum_sq / static_cast<float>(n - 1) : 0.0f;
      running_mean[g] = (1.0f - momentum) * running_mean[g] + momentum * mean;
      running_var[g] = (1.0f - momentum) * running_var[g] + momentum * unbiased;
    }
  }
}

// One block per statistics group: the coupling means, then dx.
__global__ void norm_backward_dx_kernel(NormGeometry geo, const void* x, DType tx, const void* gamma, DType tg,
                                        const void* dy, DType tdy, const float* saved_mean, const float* saved_rstd,
                                        void* dx, DType tdx) {
  const long g = blockIdx.x;
  const long n = geo.group_size();
  const bool centred = geo.kind != NormKind::rms;
  const float mean = saved_mean[g], rstd = saved_rstd[g];
  float sg = 0.0f, sgx = 0.0f;
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    const long e = geo.element(g, i);
    const float gd = load(gamma, tg, geo.channel(e)) * load(dy, tdy, e);
    sg += gd;
    sgx += gd * ((load(x, tx, e) - mean) * rstd);
  }
  const float mean_g = centred ? block_sum(sg) / static_cast<float>(n) : 0.0f;
  const float mean_gx = block_sum(sgx) / static_cast<float>(n);
  for (long i = threadIdx.x; i < n; i += blockDim.x) {
    const long e = geo.element(g, i);
    const float x_hat = (load(x, tx, e) - mean) * rstd;
    store(dx, tdx, e, rstd * (load(gamma, tg, geo.channel(e)) * load(dy, tdy, e) - mean_g - x_hat * mean_gx));
  }
}

// One block per channel: dgamma += sum dy x_hat, dbeta += sum dy, over
// every row and the channel's spatial columns.
__global__ void norm_backward_params_kernel(NormGeometry geo, const void* x, DType tx, const void* dy, DType tdy,
                                            const float* saved_mean, const float* saved_rstd, void* dgamma,
                                            DType tdg, void* dbeta, DType tdb) {
  const long c = blockIdx.x;
  float sgx = 0.0f, sd = 0.0f;
  for (long i = threadIdx.x; i < geo.rows * geo.spatial; i += blockDim.x) {
    const long e = i / geo.spatial * geo.cols + c * geo.spatial + i % geo.spatial;
    const long g = geo.group_of(e);
    const float d = load(dy, tdy, e);
    sgx += d * ((load(x, tx, e) - saved_mean[g]) * saved_rstd[g]);
    sd += d;
  }
  sgx = block_sum(sgx);
  sd = block_sum(sd);
  if (threadIdx.x == 0) {
    store(dgamma, tdg, c, load(dgamma, tdg, c) + sgx);
    if (dbeta) store(dbeta, tdb, c, load(dbeta, tdb, c) + sd);
  }
}

}  // namespace

void CudaBackend::norm_forward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& y, const Tensor& saved_mean, const Tensor& saved_rstd,
                               const Tensor& running_mean, const Tensor& running_var) {
  require_norm(c, x, "norm_forward");
  const NormGeometry geo = norm_geometry(c, x.rows, x.cols);
  require_shape(gamma, 1, geo.channels(), "norm_forward gamma");
  if (c.kind != NormKind::rms) require_shape(beta, 1, geo.channels(), "norm_forward beta");
  require_shape(y, x.rows, x.cols, "norm_forward y");
  const long groups = geo.group_count();
  require_shape(saved_mean, 1, groups, "norm_forward saved_mean");
  require_shape(saved_rstd, 1, groups, "norm_forward saved_rstd");
  GRADEQ_REQUIRE(saved_mean.dtype == DType::f32 && saved_rstd.dtype == DType::f32, "norm_forward: statistics are float32");
  const bool update = c.kind == NormKind::batch && !running_mean.empty();
  GRADEQ_REQUIRE(!update || (running_mean.dtype == DType::f32 && running_var.dtype == DType::f32),
                 "norm_forward: running statistics are float32");
  if (groups == 0) return;
  norm_forward_kernel<<<static_cast<unsigned>(groups), kThreads>>>(
      geo, c.eps, c.momentum, x.data, x.dtype, gamma.data, gamma.dtype, beta.data, beta.dtype, y.data, y.dtype,
      static_cast<float*>(saved_mean.data), static_cast<float*>(saved_rstd.data),
      update ? static_cast<float*>(running_mean.data) : nullptr, update ? static_cast<float*>(running_var.data) : nullptr);
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::norm_backward(const NormConfig& c, const Tensor& x, const Tensor& gamma, const Tensor& dy,
                                const Tensor& saved_mean, const Tensor& saved_rstd, const Tensor& dx,
                                const Tensor& dgamma, const Tensor& dbeta) {
  require_norm(c, x, "norm_backward");
  const NormGeometry geo = norm_geometry(c, x.rows, x.cols);
  require_shape(dy, x.rows, x.cols, "norm_backward dy");
  require_shape(dx, x.rows, x.cols, "norm_backward dx");
  require_shape(dgamma, 1, geo.channels(), "norm_backward dgamma");
  const bool centred = c.kind != NormKind::rms;
  if (centred) require_shape(dbeta, 1, geo.channels(), "norm_backward dbeta");
  if (x.empty() || geo.group_count() == 0) return;
  norm_backward_dx_kernel<<<static_cast<unsigned>(geo.group_count()), kThreads>>>(
      geo, x.data, x.dtype, gamma.data, gamma.dtype, dy.data, dy.dtype, static_cast<const float*>(saved_mean.data),
      static_cast<const float*>(saved_rstd.data), dx.data, dx.dtype);
  GRADEQ_LAUNCH_CHECK();
  norm_backward_params_kernel<<<static_cast<unsigned>(geo.channels()), kThreads>>>(
      geo, x.data, x.dtype, dy.data, dy.dtype, static_cast<const float*>(saved_mean.data),
      static_cast<const float*>(saved_rstd.data), dgamma.data, dgamma.dtype, centred ? dbeta.data : nullptr,
      dbeta.dtype);
  GRADEQ_LAUNCH_CHECK();
}

}  // namespace gradeq
