// testing.cpp — GoogleTest tests that run the gate, one scenario or one
// property each, on a backend a factory makes.
#include "gradeq/testing.h"

#include <cctype>

#include <gtest/gtest.h>

#include "harness/core/suite.h"

namespace gradeq::testing {
namespace {

class GateTest : public ::testing::Test {
 public:
  GateTest(BackendFactory factory, GateOptions options) : factory_(std::move(factory)), options_(std::move(options)) {}

  void TestBody() override {
    std::unique_ptr<Backend> backend = factory_();
    ASSERT_NE(backend, nullptr) << "the backend factory made no backend";
    const CheckReport report = run_gate(options_, *backend);
    for (const PropertyRun& p : report.properties)
      if (!p.ran) GTEST_SKIP() << p.name << ": " << p.message;
    EXPECT_TRUE(report.passed()) << check_summary(report);
  }

 private:
  BackendFactory factory_;
  GateOptions options_;
};

// Test names are identifiers: every other character becomes '_'.
std::string identifier(const std::string& name) {
  std::string out = name;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return out;
}

}  // namespace

int register_backend_tests(const std::string& suite, BackendFactory factory, const BackendTestOptions& options) {
  if (!factory) throw std::invalid_argument("register_backend_tests(" + suite + "): no factory");
  GateOptions base;
  base.seed = options.seed;
  base.cases = options.cases;
  base.size = options.size;
  int registered = 0;
  const auto add = [&](const std::string& group, const std::string& name, GateOptions gate) {
    ::testing::RegisterTest((identifier(suite) + "/" + group).c_str(), identifier(name).c_str(), nullptr,
                            nullptr, __FILE__, __LINE__,
                            [factory, gate]() -> ::testing::Test* { return new GateTest(factory, gate); });
    ++registered;
  };
  if (options.scenarios)
    for (const ScenarioSpec& s : default_scenarios()) {
      GateOptions gate = base;
      gate.scenarios = {s.name};
      gate.run_properties = false;
      add("Scenario", s.name, gate);
    }
  if (options.properties)
    for (const Property& p : default_properties()) {
      GateOptions gate = base;
      gate.properties = {p.name};
      gate.run_scenarios = false;
      add("Property", p.name, gate);
    }
  return registered;
}

}  // namespace gradeq::testing
