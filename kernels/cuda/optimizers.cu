// optimizers.cu — SGD (momentum, Nesterov, weight decay), Adam and AdamW,
// one thread per element, sharing their math with the host backend.
#include "kernels/cuda/cuda_backend.h"
#include "kernels/element_math.h"

#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

__global__ void optimizer_kernel(OptimizerStep st, float* p, const void* g, DType tg, float* a, float* b, long n) {
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    float unused = 0.0f;
    if (st.kind == OptimizerKind::sgd) {
      element::sgd_update(p[i], load(g, tg, i), a ? a[i] : unused, st.lr, st.momentum, st.one_minus_dampening,
                          st.nesterov, st.first_step, st.weight_decay);
    } else {
      element::adam_update(p[i], load(g, tg, i), a[i], b[i], st.kind == OptimizerKind::adamw, st.weight_decay,
                           st.decay, st.beta1, st.one_minus_beta1, st.beta2, st.one_minus_beta2, st.eps, st.step_size,
                           st.inv_sqrt_bias_correction2);
    }
  }
}


}  // namespace

void CudaBackend::optimizer_step(const OptimizerStep& step, std::span<const Tensor> params,
                                 std::span<const Tensor> grads, std::span<const Tensor> first_moment,
                                 std::span<const Tensor> second_moment) {
  const OptimizerStateUse use = require_optimizer_lists(step, params, grads, first_moment, second_moment);
  for (std::size_t t = 0; t < params.size(); ++t) {
    if (params[t].empty()) continue;
    optimizer_kernel<<<blocks_for(params[t].size()), kThreads>>>(
        step, static_cast<float*>(params[t].data), grads[t].data, grads[t].dtype,
        use.first ? static_cast<float*>(first_moment[t].data) : nullptr, use.second ? static_cast<float*>(second_moment[t].data) : nullptr,
        params[t].size());
    GRADEQ_LAUNCH_CHECK();
  }
}

}  // namespace gradeq
