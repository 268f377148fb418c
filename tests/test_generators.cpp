// The size tiers of the scenario generators give the shapes they promise:
// the large tier's widths sit at real kernels' tile boundaries, and the
// small tier is what it always was.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "properties/generators.h"

namespace gradeq {
namespace {

// Restores the small tier (the default) after a test.
struct TierScope {
  explicit TierScope(SizeTier t) { set_size_tier(t); }
  ~TierScope() { set_size_tier(SizeTier::small); }
};

TEST(Generators, LargeTierWidthsAreTileBoundaries) {
  const TierScope scope(SizeTier::large);
  long seen_large = 0;
  EXPECT_TRUE(rc::check("large widths", [&] {
    const long w = *awkward_width();
    RC_ASSERT(w == 1 || (w >= 63 && w <= 257));
    const long p = *sequence_positions();
    RC_ASSERT(p >= 8 && p <= 32);
    seen_large += w >= 63;
  }));
  EXPECT_GT(seen_large, 50);
}

TEST(Generators, SmallTierWidthsStaySmall) {
  const TierScope scope(SizeTier::small);
  EXPECT_TRUE(rc::check("small widths", [] {
    RC_ASSERT(*awkward_width() <= 33);
    const long p = *sequence_positions();
    RC_ASSERT(p >= 2 && p <= 6);
  }));
}

TEST(Generators, LargeTierReachesTheModels) {
  const TierScope scope(SizeTier::large);
  long widest = 0;
  EXPECT_TRUE(rc::check("large models", [&] {
    const ScenarioSpec s = *normalized_scenario();
    for (long w : ref::Model(s.model).widths) widest = std::max(widest, w);
  }));
  EXPECT_GE(widest, 255);
}

}  // namespace
}  // namespace gradeq
