// The normalizer study: per-micro-batch BatchNorm diverges more the smaller
// the micro-batch; LayerNorm, GroupNorm, RMSNorm and exact-window BatchNorm
// stay within float64 rounding (checked against the reference's own bound).
#include <gtest/gtest.h>

#include "harness/core/norm_sweep.h"
#include "harness/core/reference_run.h"
#include "harness/core/tolerance.h"

namespace gradeq {
namespace {

TEST(NormSweep, BatchNormDivergenceShrinksAsTheMicroBatchGrows) {
  NormSweepOptions o;
  o.seeds = 3;
  const NormSweep sweep = run_norm_sweep(o);
  std::vector<const NormSweepRow*> bn;
  for (const NormSweepRow& r : sweep.rows)
    if (r.norm == "batchnorm") bn.push_back(&r);
  ASSERT_EQ(bn.size(), o.micro_batch_sizes.size());
  for (std::size_t i = 0; i + 1 < bn.size(); ++i) {
    EXPECT_GT(bn[i]->gradient.mean, bn[i + 1]->gradient.mean) << "b=" << bn[i]->micro_batch;
    EXPECT_GT(bn[i]->running.mean, bn[i + 1]->running.mean) << "b=" << bn[i]->micro_batch;
  }
  EXPECT_EQ(bn.back()->micro_batches, 1);
  EXPECT_EQ(bn.back()->gradient.max, 0.0) << "one micro-batch is the full batch";
  for (const NormSweepRow& r : sweep.rows) {
    if (r.norm == "batchnorm (exact window)" && r.micro_batches > 1) {
      EXPECT_EQ(r.forward_passes, 3);
    }
  }
}

// At the smallest micro-batch, the float64 difference of every
// batch-independent normalizer (and exact-window BatchNorm) is within the
// reference's propagated float64 bound, element by element.
TEST(NormSweep, OtherNormalizersAndExactBatchNormAreEquivalentToRounding) {
  NormSweepOptions o;
  for (const std::string& norm : norm_sweep_variants()) {
    if (norm == "batchnorm") continue;
    const ScenarioSpec spec = norm_sweep_scenario(o, norm, 1, 7);
    const Scenario sc = materialize(spec);
    const ReferenceRun full = run_reference(sc, full_batch_split(spec.split), ErrorModel{});
    const ReferenceRun acc = run_reference(sc, spec.split, ErrorModel{});
    double nonzero = 0.0;
    for (const ReferenceTensor& f : full.windows[0].tensors) {
      const ReferenceTensor& a = find_tensor(acc.windows[0], f.name);
      for (std::size_t i = 0; i < f.value.size(); ++i) {
        EXPECT_LE(std::abs(a.value[i] - f.value[i]), math_bound(a.reference_bound[i], f.reference_bound[i]))
            << norm << " " << f.name << "[" << i << "]";
        nonzero += std::abs(f.value[i]);
      }
    }
    EXPECT_GT(nonzero, 0.0);
  }
}

TEST(NormSweep, RejectsSizesThatDoNotDivideTheBatch) {
  NormSweepOptions o;
  o.micro_batch_sizes = {3};
  EXPECT_THROW(run_norm_sweep(o), std::invalid_argument);
  o.micro_batch_sizes = {0};
  EXPECT_THROW(run_norm_sweep(o), std::invalid_argument);
}

}  // namespace
}  // namespace gradeq
