// The registered properties as RapidCheck/GoogleTest properties (RC_PARAMS
// honoured: max_success, seed, reproduce). Each case runs the four runs of
// a generated scenario on the host backend. Test ids are
// "Properties/<name>", as in `gradeq check`, so reproduce strings carry over.
#include <set>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "kernels/cpu/cpu_backend.h"
#include "properties/properties.h"

namespace gradeq {
namespace {

// Asserts the property on one generated case; discards cases that cannot
// decide it (vacuous or ill-conditioned), as `gradeq check` does.
void check_property(const std::string& name) {
  const Property* p = find_property(name);
  RC_ASSERT(p != nullptr);
  const ScenarioSpec spec = *p->generator;
  CpuBackend cpu;
  PropertyContext ctx{&cpu, correct_loop(), ErrorModel{}};
  const Evidence e = p->check(spec, ctx);
  if (!e.holds) RC_FAIL(e.message);
  RC_PRE(!e.discard);
}

RC_GTEST_PROP(Properties, ReferenceSelfConsistency, ()) { check_property("ReferenceSelfConsistency"); }
RC_GTEST_PROP(Properties, KernelCorrectness, ()) { check_property("KernelCorrectness"); }
RC_GTEST_PROP(Properties, AccumulationEquivalence, ()) { check_property("AccumulationEquivalence"); }
RC_GTEST_PROP(Properties, Exactness, ()) { check_property("Exactness"); }
RC_GTEST_PROP(Properties, BatchNormKernelCorrectness, ()) { check_property("BatchNormKernelCorrectness"); }
RC_GTEST_PROP(Properties, BatchNormDivergence, ()) { check_property("BatchNormDivergence"); }
RC_GTEST_PROP(Properties, ExactBatchNormEquivalence, ()) { check_property("ExactBatchNormEquivalence"); }
RC_GTEST_PROP(Properties, OptimizerTrajectoryEquivalence, ()) { check_property("OptimizerTrajectoryEquivalence"); }
RC_GTEST_PROP(Properties, MixedPrecisionEquivalence, ()) { check_property("MixedPrecisionEquivalence"); }
RC_GTEST_PROP(Properties, LongAccumulation, ()) { check_property("LongAccumulation"); }
RC_GTEST_PROP(Properties, EqualSplitShortcut, ()) { check_property("EqualSplitShortcut"); }

TEST(PropertyRegistry, EveryRegisteredPropertyHasAWrapper) {
  std::set<std::string> wrapped;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    if (std::string(suite.name()) != "Properties") continue;
    for (int j = 0; j < suite.total_test_count(); ++j) wrapped.insert(suite.GetTestInfo(j)->name());
  }
  ASSERT_FALSE(default_properties().empty());
  for (const Property& p : default_properties()) EXPECT_TRUE(wrapped.count(p.name)) << p.name << " has no RC_GTEST_PROP";
}

}  // namespace
}  // namespace gradeq
