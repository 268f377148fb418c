// The registered properties as GoogleTest cases, one per property and
// backend: the cpu backend always, cuda where a device is present (skipped
// with the reason otherwise; the reference-only properties run once, on
// cpu), and ConvEquivalence on cpu-direct and cuda-direct. Each runs RapidCheck through the same runner as `gradeq check`
// (properties/property_runner.h): RC_PARAMS is honoured (max_success,
// seed, reproduce) and the RapidCheck test id is "Properties/<name>", so a
// reproduce string printed by either works with both.
#include <algorithm>

#include <gtest/gtest.h>

#include "properties/property_runner.h"
#include "support.h"

namespace gradeq {
namespace {

struct PropertyOnBackend {
  std::string backend;
  const Property* property;
};

std::vector<PropertyOnBackend> cases() {
  std::vector<PropertyOnBackend> out;
  for (const char* backend : {"cpu", "cuda"})
    for (const Property& p : default_properties())
      if (p.exercises_backend || std::string(backend) == "cpu") out.push_back({backend, &p});
  for (const char* backend : {"cpu-direct", "cuda-direct"})  // the direct-form convolutions
    out.push_back({backend, find_property("ConvEquivalence")});
  return out;
}

void PrintTo(const PropertyOnBackend& c, std::ostream* os) { *os << c.property->name << " on " << c.backend; }

class PropertyTest : public ::testing::TestWithParam<PropertyOnBackend> {};

TEST_P(PropertyTest, Holds) {
  const auto& [name, property] = GetParam();
  GRADEQ_BACKEND_OR_SKIP(backend, name);
  PropertyContext ctx{backend.get(), correct_loop(), ErrorModel{}};
  PropertyRunConfig config;
  config.cases = 0;  // RapidCheck's default (100) or RC_PARAMS max_success
  const PropertyRun run = run_property(*property, ctx, config);
  EXPECT_TRUE(run.passed) << run.message << "\n  counterexample: " << run.counterexample
                          << "\n  reproduce: RC_PARAMS=\"" << run.reproduce << "\"";
  EXPECT_GT(run.cases, 0);
  std::cout << "  " << property->name << " on " << name << ": " << run.cases << " cases, worst error/bound "
            << run.worst_ratio << ", discarded " << run.discarded_vacuous << " vacuous, "
            << run.discarded_ill_conditioned << " ill-conditioned\n";
}

INSTANTIATE_TEST_SUITE_P(Registered, PropertyTest, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string backend = info.param.backend;
  std::replace(backend.begin(), backend.end(), '-', '_');
  return backend + "_" + info.param.property->name;
});

}  // namespace
}  // namespace gradeq
