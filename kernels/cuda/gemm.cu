// gemm.cu — the linear layer on cuBLAS: one GEMM helper (cublasGemmEx,
// float32 compute) for the three products, the bias epilogue, and the bias
// gradient as a fixed-order column reduction (atomics only when the
// backend is not deterministic).
#include "kernels/cuda/cuda_backend.h"

#include "kernels/cuda/cuda_internal.cuh"

namespace gradeq {
namespace {

using namespace cuda;

// y[i, o] = acc[i, o] + b[o], stored in y's dtype (acc is the GEMM's float32 result).
__global__ void bias_epilogue(const float* acc, const void* b, DType tb, void* y, DType ty, long rows, long cols) {
  const long n = rows * cols;
  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x)
    store(y, ty, i, acc[i] + (b ? load(b, tb, i % cols) : 0.0f));
}

// db[c] += sum over rows of dy[r, c]: one block per column, fixed order.
__global__ void column_sum_accumulate(const void* dy, DType t, long rows, long cols, void* db, DType tdb) {
  const float s = slice_column_sum(dy, t, rows, cols, blockIdx.x, 0, 1);
  if (threadIdx.x == 0) store(db, tdb, blockIdx.x, load(db, tdb, blockIdx.x) + s);
}

// Non-deterministic mode: each column summed by several blocks, their
// partials added into the float32 db with atomicAdd in whatever order the
// blocks finish: correct, not bitwise reproducible.
__global__ void column_sum_atomic(const void* dy, DType t, long rows, long cols, float* db, long slices) {
  const float s = slice_column_sum(dy, t, rows, cols, blockIdx.x, blockIdx.y, slices);
  if (threadIdx.x == 0) atomicAdd(db + blockIdx.x, s);
}

// cublasGemmEx with float32 compute multiplies A and B of one type into C of
// that type or float32 (f32·f32→f32, bf16·bf16→bf16|f32, f16·f16→f16|f32).
bool gemm_writes(DType ab, DType c) { return c == DType::f32 || c == ab; }

// Rows summed per block by the sliced bias-gradient kernels.
constexpr long kRowsPerSlice = 4 * kThreads;

}  // namespace

// Column-major C[m, n] = op(A) op(B) + beta C (ldc = m), float32 compute.
// A pair of different input types is multiplied as float32, the 16-bit one
// widened exactly into a scratch slot; C must be a type cuBLAS writes.
void CudaBackend::gemm(bool transpose_a, bool transpose_b, long m, long n, long k, const Tensor& a, long lda,
                       const Tensor& b, long ldb, float beta, const Tensor& c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty product: C = beta C (cuBLAS wants leading dimensions >= 1)
    if (beta == 0.0f) fill(c, 0.0f);
    return;
  }
  auto operand = [&](const Tensor& t, int slot) -> std::pair<const void*, DType> {
    if (a.dtype == b.dtype || t.dtype == DType::f32) return {t.data, t.dtype};
    float* wide = scratch(t.size(), slot);
    convert_on_device(t.data, t.dtype, wide, DType::f32, t.size());
    return {wide, DType::f32};
  };
  const auto [a_data, a_type] = operand(a, 2);
  const auto [b_data, b_type] = operand(b, 3);
  GRADEQ_REQUIRE(gemm_writes(a_type, c.dtype), "gemm: no cuBLAS kernel writes this output dtype");
  const float one = 1.0f;
  GRADEQ_CUBLAS_CHECK(cublasGemmEx(impl_->cublas, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
                                   static_cast<int>(k), &one, a_data, cuda_type(a_type), static_cast<int>(lda), b_data,
                                   cuda_type(b_type), static_cast<int>(ldb), &beta, c.data, cuda_type(c.dtype),
                                   static_cast<int>(m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Row-major Y[rows, out] = X W^T is column-major Y^T = W X^T: A = W seen as
// [in, out] (transposed), B = X seen as [in, rows].
void CudaBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  const long rows = x.rows, in = x.cols, out = w.rows;
  require_shape(w, out, in, "linear_forward weight");
  require_bias(b, out, "linear_forward bias");
  require_shape(y, rows, out, "linear_forward output");
  if (y.empty()) return;
  const Tensor acc{scratch(rows * out), rows, out, DType::f32};
  gemm(true, false, out, rows, in, w, in, x, in, 0.0f, acc);
  bias_epilogue<<<blocks_for(rows * out), kThreads>>>(static_cast<const float*>(acc.data), b.empty() ? nullptr : b.data, b.dtype, y.data,
                                                      y.dtype, rows, out);
  GRADEQ_LAUNCH_CHECK();
}

// dX[rows, in] = dY W: column-major dX^T = W^T dY^T, A = W as [in, out], B = dY as [out, rows].
void CudaBackend::linear_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx) {
  const long rows = dy.rows, out = w.rows, in = w.cols;
  require_shape(dy, rows, out, "linear_backward_data dy");
  require_shape(dx, rows, in, "linear_backward_data dx");
  if (dx.empty()) return;
  const Tensor acc{scratch(rows * in), rows, in, DType::f32};
  gemm(false, false, in, rows, out, w, in, dy, out, 0.0f, acc);
  bias_epilogue<<<blocks_for(rows * in), kThreads>>>(static_cast<const float*>(acc.data), nullptr, DType::f32,
                                                     dx.data, dx.dtype, rows, in);
  GRADEQ_LAUNCH_CHECK();
}

// dW[out, in] += dY^T X with beta = 1, straight into the gradient buffer:
// column-major dW^T = X^T dY, A = X as [in, rows], B = dY as [out, rows] transposed.
// Where cuBLAS has no such type combination (float32 inputs into a 16-bit
// buffer, bf16 into f16), the product goes to float32 scratch and is added
// by the accumulate kernel: the same roundings (float32 sum, then one store
// in the buffer's dtype), as the host backend does.
void CudaBackend::linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  const long rows = x.rows, in = x.cols, out = dy.cols;
  require_shape(dy, rows, out, "linear_backward_weight dy");
  require_shape(dw, out, in, "linear_backward_weight dw");
  require_bias(db, out, "linear_backward_weight db");
  if (rows == 0) return;
  const DType inputs = x.dtype == dy.dtype ? x.dtype : DType::f32;
  if (gemm_writes(inputs, dw.dtype)) {
    gemm(false, true, in, out, rows, x, in, dy, out, 1.0f, dw);
  } else {
    const Tensor product{scratch(out * in), out, in, DType::f32};
    gemm(false, true, in, out, rows, x, in, dy, out, 0.0f, product);
    const Tensor dst[] = {dw}, src[] = {product};
    accumulate(dst, src, {});
  }
  if (!db.empty()) bias_gradient(dy, db);
}

void CudaBackend::bias_gradient(const Tensor& dy, const Tensor& db) {
  if (dy.empty()) return;
  if (!deterministic_ && db.dtype == DType::f32 && dy.rows > kRowsPerSlice) {
    // gridDim.y is at most 65535: beyond that, slices take more rows each.
    const long slices = std::min((dy.rows + kRowsPerSlice - 1) / kRowsPerSlice, 65535L);
    column_sum_atomic<<<dim3(static_cast<unsigned>(dy.cols), static_cast<unsigned>(slices)), kThreads>>>(
        dy.data, dy.dtype, dy.rows, dy.cols, static_cast<float*>(db.data), slices);
    GRADEQ_LAUNCH_CHECK();
    return;
  }
  column_sum_accumulate<<<static_cast<unsigned>(dy.cols), kThreads>>>(dy.data, dy.dtype, dy.rows, dy.cols, db.data,
                                                                       db.dtype);
  GRADEQ_LAUNCH_CHECK();
}

}  // namespace gradeq
