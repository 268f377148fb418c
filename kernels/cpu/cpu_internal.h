// cpu_internal.h — what the host backend's kernel files share: the float32
// storage of a tensor, and a store to a dtype known at compile time, so
// that a loop is written once per dtype (dispatch) with no switch inside.
#pragma once

#include <type_traits>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
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
// b [k, n] (stored [n, k] where b_transposed). natural: Eigen's blocked
// product (cpu_backend.cpp, the one file that instantiates the host's
// float32 products). adversarial: each element's k products rounded to
// float32 and summed by adversarial_sum.
void gemm(const float* a, bool a_transposed, const float* b, bool b_transposed, float* c, long m, long n, long k,
          SumOrder order);

// The sum of n float32 terms in a correct but worst-case order (the
// cpu-adversarial backend, NUMERICS §10): the terms sorted by sign, stably
// (the non-negative ones first, each group in the order given), so that
// the partial sums grow as large as the terms allow before they cancel;
// then cut into kAdversarialSplits consecutive blocks, each summed in
// order in float32, as a split-K kernel's splits; then the blocks' sums
// added pairwise. Every term is added once and in float32: a valid order
// for any bound that holds for every order.
float adversarial_sum(const float* terms, long n);
// Two splits: the fewest of a split-K kernel's, so the longest sequential
// chains. Each doubling of the splits halves the error of a sum sorted by
// sign (8,192 normal terms of mean 0: error / (sqrt(n) u sum|t|) 0.10 at 2
// splits, 0.047 at 4; the loop's order 0.003).
inline constexpr long kAdversarialSplits = 2;

// out[j] = sum over i of m[i cols + j], for a row-major [rows, cols]: in
// row order (natural) or by adversarial_sum over each column.
void column_sums(const float* m, long rows, long cols, float* out, SumOrder order);

// A float32 sum written once for both orders: add() each term in the
// loop's order; natural sums as it goes (s += t, the loop's own
// arithmetic), adversarial keeps the terms for adversarial_sum.
class Sum {
 public:
  explicit Sum(SumOrder order) : adversarial_(order == SumOrder::adversarial) {}
  void add(float t) {
    if (adversarial_) {
      terms_.push_back(t);
    } else {
      s_ += t;
    }
  }
  float result() const { return adversarial_ ? adversarial_sum(terms_.data(), static_cast<long>(terms_.size())) : s_; }

 private:
  bool adversarial_;
  float s_ = 0.0f;
  std::vector<float> terms_;
};

}  // namespace gradeq::cpu
