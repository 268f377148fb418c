// What a failing verdict says about its bug (harness/core/diagnosis.h): each
// diagnosis is shown on the mutant it exists for, and correct code gets
// none.
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "harness/core/mutants.h"
#include "harness/core/suite.h"
#include "kernels/cpu/cpu_backend.h"

namespace gradeq {
namespace {

ScenarioResult check_with(const std::string& mutant_id, const std::string& scenario, const LoopFactory& loop = {}) {
  const std::vector<ScenarioSpec> suite = default_scenarios();
  CpuBackend cpu;
  if (loop) return check_scenario(*find_scenario(suite, scenario), cpu, loop, ErrorModel{});
  const Mutant* m = find_mutant(mutant_id);
  if (!m) throw std::logic_error("no mutant " + mutant_id);
  MutantRig rig(*m, cpu);
  return check_scenario(*find_scenario(suite, scenario), *rig.backend, rig.loop, ErrorModel{});
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

bool says(const std::vector<std::string>& lines, const std::string& what) {
  return joined(lines).find(what) != std::string::npos;
}

// B4 divides every micro-batch by N once more: with N = 4 equal
// micro-batches the window's gradient is exactly 1/4 of the reference's.
TEST(Diagnosis, AConstantFactorOnEveryGradientIsANormalisationFactor) {
  const ScenarioResult r = check_with("B4", "mlp_mse_equal");
  ASSERT_EQ(r.accumulation.status, Status::fail);
  EXPECT_TRUE(says(r.accumulation.diagnosis, "K_acc ≈ 0.25 × R_full in window 0 (every gradient; cosine ≥ 0.9999): "
                                             "a normalisation factor"))
      << joined(r.accumulation.diagnosis);
  // Kernel correctness compares K_acc with the accumulated reference, which
  // does not divide twice: the same factor, named by its runs.
  EXPECT_TRUE(says(r.kernel.diagnosis, "K_acc ≈ 0.25 × R_acc in window 0")) << joined(r.kernel.diagnosis);
  // B5: only the partial last window (2 of 4 micro-batches) is scaled, by 2/4.
  const ScenarioResult b5 = check_with("B5", "partial_last_window");
  EXPECT_TRUE(says(b5.accumulation.diagnosis, "K_acc ≈ 0.5 × R_full in window 2 ")) << joined(b5.accumulation.diagnosis);
  // B3 on equal micro-batches multiplies by N = 4, a power of two: a loss
  // scale left in is named beside the normalisation.
  const ScenarioResult b3 = check_with("B3", "mlp_mse_equal");
  EXPECT_TRUE(says(b3.accumulation.diagnosis, "K_acc ≈ 4 × R_full in window 0 (every gradient; cosine ≥ 0.9999): a "
                                              "normalisation factor"))
      << joined(b3.accumulation.diagnosis);
  EXPECT_TRUE(says(b3.accumulation.diagnosis, " or, a power of two, a loss scale left in"))
      << joined(b3.accumulation.diagnosis);
  // A gradient wrong in direction (B17: a sample twice, one never) is no factor.
  const ScenarioResult b17 = check_with("B17", "mlp_mse_equal");
  EXPECT_FALSE(says(b17.accumulation.diagnosis, "normalisation factor")) << joined(b17.accumulation.diagnosis);
}

// B15 steps the schedule once per micro-batch: the first step's learning
// rate is the schedule's at step 4 - 1 = 3 (warmup 1, cosine to 6; N = 4),
// where the schedule gives 0 (warmup from 0).
TEST(Diagnosis, ALearningRateOffTheScheduleIsNamedWithBothValues) {
  const ScenarioResult r = check_with("B15", "mlp_adamw_clip_warmup");
  ASSERT_EQ(r.accumulation.status, Status::fail);
  const double lr = 1e-2, at_3 = 0.5 * (1.0 + std::cos(M_PI * 2.0 / 5.0));
  char expected[200];
  std::snprintf(expected, sizeof expected, "step 0 used learning rate %.6g; the schedule gives 0 (a scheduler", lr * at_3);
  EXPECT_TRUE(says(r.accumulation.diagnosis, expected)) << joined(r.accumulation.diagnosis);
}

// B18 applies the weight decay N times: the gradients, the learning rate and
// the clip agree, the weights do not.
TEST(Diagnosis, WeightsThatDifferWhereTheGradientAgreesPointAtTheStep) {
  const ScenarioResult r = check_with("B18", "mlp_adamw_clip_warmup");
  ASSERT_EQ(r.accumulation.status, Status::fail);
  EXPECT_TRUE(says(r.accumulation.diagnosis, "the gradient, the learning rate and the clip agree, the weights or the "
                                             "optimizer state do not: the optimizer step"))
      << joined(r.accumulation.diagnosis);
  EXPECT_FALSE(says(r.accumulation.diagnosis, "normalisation factor"));
}

// A loop that measures the norm but never applies the clip: the gradient
// agrees, the clip does not.
class ForgetsToClip : public TrainingLoop {
 public:
  using TrainingLoop::TrainingLoop;
  void clip_gradients() override {
    clip_norm_ = gradient_norm();
    clip_coefficient_ = 1.0f;
  }
};

TEST(Diagnosis, AClipThatDiffersWhereTheGradientAgreesIsNamed) {
  const LoopFactory loop = [](Backend& b) { return std::make_unique<ForgetsToClip>(b); };
  const ScenarioResult r = check_with("", "mlp_adamw_clip_warmup", loop);
  ASSERT_EQ(r.accumulation.status, Status::fail);
  EXPECT_TRUE(says(r.accumulation.diagnosis, "window 0: K_acc's gradient agrees with R_full's, its clip does not: "
                                             "norm "))
      << joined(r.accumulation.diagnosis);
  EXPECT_TRUE(says(r.accumulation.diagnosis, ", coefficient 1 where 0.")) << joined(r.accumulation.diagnosis);
}

// The mean of per-micro-batch means (B1) is no constant factor: it is
// recognised by running its own reference from K_acc's states. B3 (each
// micro-batch over its own count, without the 1/N) is N times it: no match.
TEST(Diagnosis, TheMeanOfPerMicroBatchMeansIsRecognised) {
  const std::vector<ScenarioSpec> suite = default_scenarios();
  const ScenarioSpec& s = *find_scenario(suite, "token_ce_padded_uneven");
  CpuBackend cpu;
  for (const auto& [id, named] : {std::pair{"B1", true}, std::pair{"B3", false}}) {
    MutantRig rig(*find_mutant(id), cpu);
    const ScenarioResult r = check_scenario(s, *rig.backend, rig.loop, ErrorModel{}, {}, /*explain=*/true);
    ASSERT_EQ(r.accumulation.status, Status::fail) << id;
    EXPECT_EQ(says(r.accumulation.diagnosis, "K_acc's gradient is the mean of per-micro-batch means"), named)
        << id << ": " << joined(r.accumulation.diagnosis);
  }
  const ScenarioResult correct = check_scenario(s, cpu, correct_loop(), ErrorModel{}, {}, /*explain=*/true);
  EXPECT_TRUE(correct.passed());
  EXPECT_TRUE(correct.accumulation.diagnosis.empty());
}

TEST(Diagnosis, CorrectCodeHasNone) {
  CpuBackend cpu;
  for (const ScenarioSpec& s : default_scenarios()) {
    const ScenarioResult r = check_scenario(s, cpu, correct_loop(), ErrorModel{});
    EXPECT_TRUE(r.passed()) << s.name << ": " << r.first_failure();
    for (const Verdict* v : {&r.math, &r.kernel, &r.accumulation}) EXPECT_TRUE(v->diagnosis.empty()) << s.name;
  }
}

// Every failing verdict is said, each with its worst tensor, not only the
// first failure.
TEST(Diagnosis, FailuresListEveryFailingVerdictWithItsWorstTensor) {
  const ScenarioResult r = check_with("B4", "mlp_mse_equal");
  const std::string all = joined(r.failures());
  EXPECT_NE(all.find("kernel correctness: "), std::string::npos) << all;
  EXPECT_NE(all.find("accumulation equivalence: "), std::string::npos) << all;
  EXPECT_NE(all.find("  worst: "), std::string::npos) << all;
}

}  // namespace
}  // namespace gradeq
