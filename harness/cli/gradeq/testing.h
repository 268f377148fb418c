// gradeq/testing.h — the gate as GoogleTest tests, for a user's backend:
// one test per scenario of the default suite and one per property, each
// failing with the gate's own message.
//
//   #include <gradeq/testing.h>
//   GRADEQ_BACKEND_TESTS(Mine, [] { return std::make_unique<MyBackend>(); });
//
// gives the tests Mine/Scenario.<scenario> and Mine/Property.<property>
// (link gradeq::testing and GTest::gtest_main). `gtest_discover_tests`
// then lists each of them in ctest.
#pragma once

#include <cstdint>
#include <string>

#include "gradeq/gradeq.h"

namespace gradeq::testing {

struct BackendTestOptions {
  std::uint64_t seed = 1;       // the gate's default
  int cases = 100;              // per property
  SizeTier size = SizeTier::small;
  bool scenarios = true, properties = true;
};

// Registers the tests with GoogleTest under `suite` (a C++ identifier);
// call it before RUN_ALL_TESTS, or through GRADEQ_BACKEND_TESTS. Each test
// makes its own backend with `factory`. Returns the number registered.
int register_backend_tests(const std::string& suite, BackendFactory factory, const BackendTestOptions& options = {});

}  // namespace gradeq::testing

#define GRADEQ_BACKEND_TESTS(suite, ...)                                                          \
  [[maybe_unused]] static const int gradeq_backend_tests_##suite =                                 \
      ::gradeq::testing::register_backend_tests(#suite, __VA_ARGS__)
