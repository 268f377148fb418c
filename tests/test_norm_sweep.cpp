// The normalizer study: per-micro-batch BatchNorm diverges more the smaller
// the micro-batch; LayerNorm, GroupNorm, RMSNorm and exact-window BatchNorm
// stay within float64 rounding (checked against the reference's own bound).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "harness/core/norm_sweep.h"
#include "harness/core/norm_training.h"
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

// The training sweep, short: GroupNorm's accumulated trajectory stays at
// float64 rounding and within its bounds' reach window after window;
// BatchNorm's parts from the one-batch trajectory, far beyond its bounds,
// and is excused only as the expected divergence; one micro-batch is the
// one batch itself.
TEST(NormTraining, GroupNormStaysWithinReachAndBatchNormParts) {
  NormTrainingOptions o;
  o.windows = 3;
  o.micro_batch_sizes = {32, 2};
  o.norms = {"batchnorm", "groupnorm:4"};
  o.held_out = 64;
  const NormTraining t = run_norm_training(o);
  ASSERT_EQ(t.curves.size(), 4u);
  ASSERT_EQ(t.one_batch.size(), 2u);
  for (const NormTrainingCurve& c : t.curves) {
    ASSERT_EQ(c.distance.size(), 3u);
    ASSERT_EQ(c.accumulated.size(), 3u);
    SCOPED_TRACE(c.norm + " b=" + std::to_string(c.micro_batch));
    if (c.micro_batch == 32) {
      EXPECT_EQ(c.micro_batches, 1);
      EXPECT_EQ(c.distance.back(), 0.0);
      EXPECT_FALSE(c.expected_divergence);
    } else if (c.norm == "groupnorm:4") {
      EXPECT_FALSE(c.expected_divergence);
      EXPECT_TRUE(c.within_reach());
      EXPECT_GT(c.distance.back(), 0.0) << "16 micro-batches round differently from one batch";
      EXPECT_LT(c.distance.back(), 1e-13);
      EXPECT_TRUE(c.running_drift.empty());
    } else {
      EXPECT_TRUE(c.expected_divergence);
      EXPECT_FALSE(c.within_reach()) << "the check sees BatchNorm's departure";
      EXPECT_GT(*std::max_element(c.worst_ratio.begin(), c.worst_ratio.end()), 1e6);
      EXPECT_GT(c.distance.back(), 1e-2);
      ASSERT_EQ(c.running_drift.size(), 3u);
      EXPECT_GT(c.running_drift.back(), 1e-2);
    }
  }
  EXPECT_TRUE(t.passed());
  // The held-out figures are the model's, in evaluation mode: a trajectory
  // and the same trajectory agree, accuracy is a fraction.
  for (const TrainingPoint& p : t.one_batch[1]) {
    EXPECT_GE(p.held_out_accuracy, 0.0);
    EXPECT_LE(p.held_out_accuracy, 1.0);
    EXPECT_GT(p.held_out_loss, 0.0);
  }
}

// The verdict: a curve that should be equivalent fails the sweep when any
// window's ratio is above 1 or not a number; expected divergence never does.
TEST(NormTraining, ACurveLeavingItsReachFailsTheSweep) {
  NormTraining t;
  NormTrainingCurve c;
  c.worst_ratio = {0.2, 0.9};
  t.curves = {c};
  EXPECT_TRUE(t.passed());
  t.curves[0].worst_ratio = {0.2, 1.5};
  EXPECT_FALSE(t.passed());
  t.curves[0].worst_ratio = {std::numeric_limits<double>::quiet_NaN()};
  EXPECT_FALSE(t.passed()) << "NaN never passes";
  t.curves[0].expected_divergence = true;
  EXPECT_TRUE(t.passed());
}

TEST(NormTraining, RejectsWhatItCannotRun) {
  NormTrainingOptions o;
  o.micro_batch_sizes = {3};
  EXPECT_THROW(run_norm_training(o), std::invalid_argument);
  o.micro_batch_sizes = {2};
  o.windows = 0;
  EXPECT_THROW(run_norm_training(o), std::invalid_argument);
  o.windows = 1;
  o.norms = {"spectralnorm"};
  EXPECT_THROW(run_norm_training(o), std::invalid_argument);
}

}  // namespace
}  // namespace gradeq
