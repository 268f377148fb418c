// cpu_internal.h — what the host backend's kernel files share: the float32
// storage of a tensor, and a store to a dtype known at compile time, so
// that a loop is written once per dtype (dispatch) with no switch inside.
#pragma once

#include <type_traits>

#include "kernels/backend.h"
#include "kernels/element_math.h"

namespace gradeq::cpu {

// A tensor's storage: float32 values, rounded to the tensor's dtype.
inline float* values(const Tensor& t) { return static_cast<float*>(t.data); }

// A store to dtype D, known at compile time: a kernel's loop is written
// once per dtype (dispatch), with no switch inside it.
template <DType D>
inline float store(float x) {
  if constexpr (D == DType::bf16) return round_to_bf16(x);
  else if constexpr (D == DType::f16) return round_to_f16(x);
  else return x;
}

template <DType D>
using DTypeTag = std::integral_constant<DType, D>;

// f(DTypeTag<t>{}): one instantiation of f per dtype.
template <class F>
inline void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(DTypeTag<DType::f32>{}); return;
    case DType::bf16: f(DTypeTag<DType::bf16>{}); return;
    case DType::f16: f(DTypeTag<DType::f16>{}); return;
  }
}

// c [m, n] = a b in float32, a [m, k] (stored [k, m] where a_transposed),
// b [k, n] (stored [n, k] where b_transposed): Eigen's blocked product as
// the linear ops run it (cpu_backend.cpp, the one file that instantiates
// the host's float32 products).
void gemm(const float* a, bool a_transposed, const float* b, bool b_transposed, float* c, long m, long n, long k);

}  // namespace gradeq::cpu
