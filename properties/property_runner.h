// property_runner.h — runs a Property through RapidCheck outside GoogleTest
// (for `gradeq check` and the self-test): generation, shrinking, the shrunk
// counterexample and the RC_PARAMS string that reproduces it. Test ids are
// "Properties/<name>", the same as the gtest wrappers', so a reproduce
// string printed by either works with both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "properties/properties.h"

namespace gradeq {

// A property that cannot decide more than this share of the cases it
// generates (vacuous or ill-conditioned: discarded) does not test what it
// claims, even when every decided case holds: the run fails.
inline constexpr double kMaxDiscardRate = 0.01;

struct PropertyRunConfig {
  int cases = 100;          // successful cases required
  std::uint64_t seed = 0;   // RapidCheck seed
  bool shrink = true;
  double max_discard_rate = kMaxDiscardRate;
};

struct PropertyRun {
  std::string name;
  // False for a property the run left out (RC_PARAMS replays others only):
  // it neither passed nor failed, and reports say "not run" with `message`.
  bool ran = true;
  bool passed = false;
  int cases = 0;                 // successful cases run
  std::string counterexample;    // shrunk, as shown by showValue
  std::optional<ScenarioSpec> counterexample_spec;
  std::string message;           // why the counterexample fails
  std::string reproduce;         // RC_PARAMS value that replays the failure
  double worst_ratio = 0.0;      // largest error/bound over passing cases
  std::string worst_case;        // the passing case that reached it
  long discarded_vacuous = 0;    // cases whose reference gradients were all zero
  long discarded_ill_conditioned = 0;  // cases the error model could not bound
  // Discarded over generated cases (successful + discarded).
  double discard_rate() const;
  double seconds = 0.0;
};

std::string property_test_id(const Property& p);

// The properties whose failures RC_PARAMS="reproduce=..." replays (empty
// when it replays none). RapidCheck runs only those: any other property
// would "pass" with 0 cases, so the gate reports them as not run.
std::vector<std::string> replayed_properties();

// RC_PARAMS (seed, max_success, reproduce) applies unless the config sets
// seed / cases explicitly (non-zero seed, cases > 0).
PropertyRun run_property(const Property& p, PropertyContext& ctx, const PropertyRunConfig& config);

// A run as one line of text and back, exactly (doubles by their bits): how a
// worker process hands its results to the gate.
std::string encode_property_run(const PropertyRun& run);
PropertyRun decode_property_run(const std::string& line);

}  // namespace gradeq
