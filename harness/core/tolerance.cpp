// tolerance.cpp — dtype facts into the reference's RoundingModel.
#include "harness/core/tolerance.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace gradeq {
namespace {
ref::StorageFormat storage_format(DType t) {
  const DTypeFacts f = dtype_facts(t);
  // A float32 register stored as float32 is exact: no rounding added.
  if (t == DType::f32) return {0.0, 0.0, f.significand_bits, -126, HUGE_VAL};
  // Stores round to nearest: the overflow threshold is the midpoint above
  // the largest finite value, max + ulp(max) / 2.
  const double threshold = f.max_finite + std::ldexp(1.0, std::ilogb(f.max_finite) - f.significand_bits);
  return {f.unit_roundoff, f.underflow_floor, f.significand_bits, t == DType::f16 ? -14 : -126, threshold};
}
}  // namespace

std::string error_model_name(const ErrorModel& m) {
  if (m.reduction == ref::ReductionBound::deterministic)
    return "deterministic (errors add; reductions gamma_n = nu/(1-nu))";
  std::ostringstream os;
  os << "probabilistic (propagated errors in quadrature; reductions lambda sqrt(n) u, lambda = " << m.confidence << ")";
  return os.str();
}

ref::RoundingModel rounding_model_for(const PrecisionSpec& precision, const ErrorModel& model) {
  ref::RoundingModel r;
  const DTypeFacts f32 = dtype_facts(DType::f32);
  r.arithmetic_u = f32.unit_roundoff;
  r.arithmetic_floor = f32.underflow_floor;
  r.reduction_u = f32.unit_roundoff;
  r.reduction = model.reduction;
  r.confidence = model.confidence;
  r.compute = storage_format(precision.compute);
  r.accumulate = storage_format(precision.accumulate);
  r.master = storage_format(DType::f32);
  // Declared arithmetic (NUMERICS §11). TF32: every GEMM operand rounded to
  // 11 significant bits on the way in (ties away or to even: u bounds both).
  if (precision.tf32) r.gemm_operand = {0x1p-11, 0x1p-150, 11, -126, HUGE_VAL};
  // Reduced-precision reductions: partial sums in the compute dtype. Applied
  // to every reduction, not only the GEMMs': sound, and looser than needed.
  if (precision.reduced_precision_reduction)
    r.reduction_u = std::max(r.reduction_u, dtype_facts(precision.compute).unit_roundoff);
  return r;
}

}  // namespace gradeq
