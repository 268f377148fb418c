// The whole window on the host backend: the precision study's claims, the
// dynamic loss scaler's bookkeeping, clipping that binds.
#include <gtest/gtest.h>

#include "harness/core/equivalence.h"
#include "harness/core/precision_sweep.h"
#include "harness/core/suite.h"
#include "kernels/cpu/cpu_backend.h"

namespace gradeq {
namespace {

const PrecisionSweepRow& row(const PrecisionSweep& s, DType acc, bool compensated, long n) {
  for (const PrecisionSweepRow& r : s.rows)
    if (r.accumulate == acc && r.compensated == compensated && r.micro_batches == n) return r;
  throw std::logic_error("no such row");
}

// bfloat16 accumulation leaves float32 behind as N grows; float32 and
// compensated accumulation stay within their bounds everywhere.
TEST(PrecisionSweep, BfloatLeavesFloat32AndEveryVariantStaysWithinItsBound) {
  PrecisionSweepOptions o;
  o.micro_batches = {1, 16, 256};
  o.seeds = 2;
  CpuBackend cpu;
  const PrecisionSweep sweep = run_precision_sweep(o, cpu);
  const double bf16_small = row(sweep, DType::bf16, false, 1).error.mean;
  const double bf16_large = row(sweep, DType::bf16, false, 256).error.mean;
  const double f32_large = row(sweep, DType::f32, false, 256).error.mean;
  EXPECT_GT(bf16_large, 4.0 * bf16_small) << "bfloat16 error grows with N";
  EXPECT_GT(bf16_large, 1e3 * f32_large) << "and leaves float32 behind";
  EXPECT_LT(row(sweep, DType::bf16, true, 256).error.mean, bf16_large / 4.0) << "Kahan keeps bfloat16 in check";
  for (const PrecisionSweepRow& r : sweep.rows) {
    EXPECT_LE(r.worst_ratio, 1.0) << accumulation_name(r.accumulate, r.compensated) << " N=" << r.micro_batches;
    EXPECT_GT(r.error.mean, 0.0);
  }
}

// The loss-scale trajectory of each float16 scenario, default and scale
// suite: an overflowing window is skipped and backs the scale off, a good
// run grows it. (The scale scenario's verdict is the scale suite's.)
void expect_skips_backs_off_and_grows(const ScenarioSpec& spec) {
  SCOPED_TRACE(spec.name);
  const Scenario sc = materialize(spec);
  CpuBackend cpu;
  const KernelRun run = correct_loop()(cpu)->run(sc, spec.split);
  long skipped = 0, grew = 0;
  double scale = spec.procedure.loss_scaling.scale;
  for (const KernelWindow& w : run.windows) {
    const double after = find_tensor(w, "state/loss_scale").values[0];
    if (w.skipped) {
      ++skipped;
      EXPECT_EQ(after, scale * spec.procedure.loss_scaling.backoff_factor);
    } else if (after > scale) {
      ++grew;
      EXPECT_EQ(after, scale * spec.procedure.loss_scaling.growth_factor);
    }
    scale = after;
  }
  EXPECT_GE(skipped, 1) << "the scenario must exercise an overflow";
  EXPECT_GE(grew, 1) << "and a growth";
  EXPECT_EQ(find_tensor(run.windows.back(), "state/step").values[0],
            static_cast<double>(spec.split.size() - static_cast<std::size_t>(skipped)))
      << "skipped windows take no step";
}

TEST(DynamicLossScale, SkipsOverflowingWindowsBacksOffAndGrows) {
  const ScenarioSpec spec = *find_scenario(default_scenarios(), "fp16_dynamic_loss_scale");
  expect_skips_backs_off_and_grows(spec);
  CpuBackend cpu;
  const ScenarioResult r = check_scenario(spec, cpu, correct_loop(), ErrorModel{});
  EXPECT_TRUE(r.passed()) << r.first_failure();
}

TEST(DynamicLossScale, TheScaleSuiteScenarioSkipsBacksOffAndGrows) {
  expect_skips_backs_off_and_grows(*find_scenario(scale_scenarios(), "fp16_loss_scale_256_1024"));
}

// A loop that forgets to clip: caught whenever clipping binds.
class NeverClips : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  void clip_gradients() override {}
};

TEST(Clipping, BindingClipIsPartOfTheStep) {
  ScenarioSpec spec = *find_scenario(default_scenarios(), "lm_finetune_adamw_bf16_n16");
  CpuBackend cpu;
  EXPECT_TRUE(check_scenario(spec, cpu, correct_loop(), ErrorModel{}).passed());
  const ScenarioResult r = check_scenario(spec, cpu, [](Backend& b) { return std::make_unique<NeverClips>(b); }, ErrorModel{});
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.kernel.status, Status::fail);
}

}  // namespace
}  // namespace gradeq
