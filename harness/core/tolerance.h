// tolerance.h — the one tolerance model (docs/NUMERICS.md). Bounds are not
// chosen here: the reference propagates them (reference/bounded.h). This
// file only (1) describes the kernel to the error model — unit roundoff of
// each storage dtype, the reduction form — and (2) combines the reference's
// per-element bounds into the bound each verdict compares against, with the
// named safety factor. No other file may hold a tolerance.
#pragma once

#include <string>

#include "harness/core/scenario.h"
#include "reference/bounded.h"

namespace gradeq {

// The default is the probabilistic form: the deterministic one is rigorous
// but vacuous for bfloat16 / float16 compute, where its worst-case sum of
// per-element errors reaches the size of the gradient itself (NUMERICS §2).
struct ErrorModel {
  ref::ReductionBound reduction = ref::ReductionBound::probabilistic;
  // lambda of the probabilistic form sqrt(n) lambda u: with lambda = 6 a
  // reduction exceeds it with probability < 2 exp(-lambda^2 / 2) ~ 3e-8 per
  // element under the random-rounding model (NUMERICS §2).
  double confidence = 6.0;
};

std::string error_model_name(const ErrorModel& m);

// Formulation factor: a kernel may evaluate the reference's expression in a
// different but equivalent form (x * (1/y) for x / y, a fused multiply-add, a
// different association inside an element-wise formula). Each such change
// at most doubles the number of roundings the bound counts for that
// operation, so the kernel's propagated bound is multiplied by 2 (NUMERICS §4).
inline constexpr double kFormulationFactor = 2.0;

// The RoundingModel under which the reference bounds a kernel with this
// precision. Storing into float32 adds nothing (arithmetic is float32 and
// already rounded); storing into bfloat16 / float16 adds that dtype's u.
ref::RoundingModel rounding_model_for(const PrecisionSpec& precision, const ErrorModel& model);

// Bound for |kernel - reference| where both ran the same procedure:
// formulation factor x kernel bound + the reference's own float64 bound.
inline double kernel_bound(double kernel, double reference) { return kFormulationFactor * kernel + reference; }

// Bound for |R_acc - R_full| (math equivalence of layers that treat samples
// independently): only float64 rounding separates them.
inline double math_bound(double reference_acc, double reference_full) { return reference_acc + reference_full; }

// Bound for |K_acc - R_full|: the kernel's accumulated error plus the float64
// rounding of both reference runs (exact math equivalence assumed).
inline double accumulation_bound(double kernel_acc, double reference_acc, double reference_full) {
  return kFormulationFactor * kernel_acc + reference_acc + reference_full;
}

}  // namespace gradeq
