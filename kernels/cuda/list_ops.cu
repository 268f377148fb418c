// list_ops.cu — zero, scale, accumulate (optionally Kahan), global norm
// and finiteness over many tensors in one launch: chunks of 4096 elements,
// float4 where aligned, scalar tails.
#include "kernels/cuda/cuda_backend.h"
#include "kernels/element_math.h"

#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

// One block: the sum of n values in a fixed order.
__global__ void sum_kernel(const float* v, long n, float* out) {
  float s = 0.0f;
  for (long i = threadIdx.x; i < n; i += blockDim.x) s += v[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

// Vectorized float4 path where a float32 chunk is 16-byte aligned, scalar
// for the rest and every other dtype.
__global__ void list_kernel(ListOp op, const Chunk* chunks, float factor, float* partials, int* non_finite) {
  const Chunk ch = chunks[blockIdx.x];
  float s = 0.0f;
  long i = ch.begin + threadIdx.x;
  const bool vector = ch.dst_type == DType::f32 && (op == ListOp::zero || op == ListOp::scale ||
                                                    (op == ListOp::accumulate && ch.src_type == DType::f32));
  if (vector && ch.begin % 4 == 0 && reinterpret_cast<std::uintptr_t>(ch.dst) % 16 == 0 &&
      (op != ListOp::accumulate || reinterpret_cast<std::uintptr_t>(ch.src) % 16 == 0)) {
    const long vector_end = ch.begin + (ch.end - ch.begin) / 4 * 4;
    float4* d4 = reinterpret_cast<float4*>(static_cast<float*>(ch.dst));
    const float4* s4 = reinterpret_cast<const float4*>(static_cast<const float*>(ch.src));
    for (long k = ch.begin / 4 + threadIdx.x; k < vector_end / 4; k += blockDim.x) {
      float4 v = op == ListOp::zero ? make_float4(0.f, 0.f, 0.f, 0.f) : d4[k];
      if (op == ListOp::scale) v = make_float4(v.x * factor, v.y * factor, v.z * factor, v.w * factor);
      if (op == ListOp::accumulate) {
        const float4 a = s4[k];
        v = make_float4(v.x + a.x, v.y + a.y, v.z + a.z, v.w + a.w);
      }
      d4[k] = v;
    }
    i = vector_end + threadIdx.x;
  }
  for (; i < ch.end; i += blockDim.x) {
    switch (op) {
      case ListOp::zero: store(ch.dst, ch.dst_type, i, 0.0f); break;
      case ListOp::scale: store(ch.dst, ch.dst_type, i, load(ch.dst, ch.dst_type, i) * factor); break;
      case ListOp::accumulate:
        store(ch.dst, ch.dst_type, i, load(ch.dst, ch.dst_type, i) + load(ch.src, ch.src_type, i));
        break;
      case ListOp::accumulate_compensated: {
        float sum = load(ch.dst, ch.dst_type, i), comp = load(ch.comp, ch.dst_type, i);
        element::kahan_add(sum, comp, load(ch.src, ch.src_type, i), ch.dst_type);
        store(ch.dst, ch.dst_type, i, sum);
        store(ch.comp, ch.dst_type, i, comp);
        break;
      }
      case ListOp::square_sum: {
        const float v = load(ch.dst, ch.dst_type, i);
        s += v * v;
        break;
      }
      case ListOp::finite:
        if (!isfinite(load(ch.dst, ch.dst_type, i))) atomicExch(non_finite, 1);  // order-free
        break;
    }
  }
  if (op == ListOp::square_sum) {
    s = block_sum(s);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
  }
}

constexpr long kChunk = 4096;

std::vector<Chunk> chunks_of(std::span<const Tensor> dst, std::span<const Tensor> src, std::span<const Tensor> comp) {
  std::vector<Chunk> out;
  for (std::size_t t = 0; t < dst.size(); ++t)
    for (long b = 0; b < dst[t].size(); b += kChunk)
      out.push_back({dst[t].data, src.empty() ? nullptr : src[t].data, comp.empty() ? nullptr : comp[t].data,
                     dst[t].dtype, src.empty() ? DType::f32 : src[t].dtype, b, std::min(dst[t].size(), b + kChunk)});
  return out;
}

}  // namespace

void CudaBackend::Impl::launch_list(ListOp op, const std::vector<Chunk>& list, float factor) {
  if (list.empty()) return;
  const long n = static_cast<long>(list.size());
  if (n > chunk_capacity) reallocate(chunks, chunk_capacity, n);
  if (n > partial_capacity) reallocate(partials, partial_capacity, n);
  GRADEQ_CUDA_CHECK(cudaMemcpy(chunks, list.data(), list.size() * sizeof(Chunk), cudaMemcpyHostToDevice));
  list_kernel<<<static_cast<unsigned>(n), kThreads>>>(op, chunks, factor, partials, flag);
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::Impl::sum_to_scalar(const float* values, long n) {
  sum_kernel<<<1, kThreads>>>(values, n, scalar);
  GRADEQ_LAUNCH_CHECK();
}

void CudaBackend::zero(std::span<const Tensor> ts) { impl_->launch_list(ListOp::zero, chunks_of(ts, {}, {}), 0.0f); }

void CudaBackend::scale(std::span<const Tensor> ts, float s) {
  impl_->launch_list(ListOp::scale, chunks_of(ts, {}, {}), s);
}

void CudaBackend::accumulate(std::span<const Tensor> dst, std::span<const Tensor> src,
                             std::span<const Tensor> compensation) {
  require_accumulate_lists(dst, src, compensation);
  impl_->launch_list(compensation.empty() ? ListOp::accumulate : ListOp::accumulate_compensated,
              chunks_of(dst, src, compensation), 0.0f);
}

float CudaBackend::global_norm(std::span<const Tensor> ts) {
  const std::vector<Chunk> chunks = chunks_of(ts, {}, {});
  if (chunks.empty()) return 0.0f;
  impl_->launch_list(ListOp::square_sum, chunks, 0.0f);
  impl_->sum_to_scalar(impl_->partials, static_cast<long>(chunks.size()));
  float sum = 0.0f;
  GRADEQ_CUDA_CHECK(cudaMemcpy(&sum, impl_->scalar, sizeof(float), cudaMemcpyDeviceToHost));
  return std::sqrt(sum);
}

bool CudaBackend::all_finite(std::span<const Tensor> ts) {
  GRADEQ_CUDA_CHECK(cudaMemset(impl_->flag, 0, sizeof(int)));
  impl_->launch_list(ListOp::finite, chunks_of(ts, {}, {}), 0.0f);
  int non_finite = 0;
  GRADEQ_CUDA_CHECK(cudaMemcpy(&non_finite, impl_->flag, sizeof(int), cudaMemcpyDeviceToHost));
  return non_finite == 0;
}

}  // namespace gradeq
