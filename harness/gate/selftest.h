// selftest.h — the harness proving it can fail. Every property that runs
// the backend is run against correct code and against every mutant
// (kernels/mutants): each mutant must be caught by at least one property,
// with a shrunk counterexample, and correct code must pass. The optional
// calibration campaign runs many random cases on correct code and on each
// mutant and measures how far apart they are: the worst error/bound of
// correct code, the smallest error/bound that detected each mutant, and
// their ratio (the separation).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/equivalence.h"
#include "harness/core/progress.h"
#include "properties/generators.h"
#include "properties/property_runner.h"

namespace gradeq {

struct SelfTestOptions {
  std::uint64_t seed = 1;
  int cases = 100;             // per property and mutant (a run stops at the first failure)
  long campaign_cases = 0;     // 0: no campaign
  long campaign_mutant_cases = 2000;  // cases each mutant sees in the campaign
  int threads = 2;
  ErrorModel model;
  SizeTier size = SizeTier::small;  // of the generated shapes
  // Named scenarios (the scale suite's) run on correct code, where each
  // must pass, and against every mutant, which one of them must fail: as
  // one check, kScenariosCheck, that stops at the first scenario a mutant
  // fails (a property stops at its first failing case).
  std::vector<ScenarioSpec> scenarios;
  std::string suite = "default";  // the name reports give the run: default, scale or a config file's path
  // `selftest --config F`: F's scenarios only (no generated cases, no B16
  // threshold, no campaign), each run against every mutant (no stop at the
  // first failure): every scenario gets its own cell, with the err/bound
  // that detected the mutant and its separation from correct code.
  bool scenarios_only = false;
};

inline constexpr const char* kScenariosCheck = "SuiteScenarios";

struct KillCell {
  std::string mutant, property;
  bool caught = false;
  PropertyRun run;  // counterexample, message, reproduce string
  long counterexample_samples = 0, counterexample_parameters = 0;
  // scenarios_only: the largest err/bound of the verdicts that failed (0
  // where none did; Inf where a failing tensor had no finite ratio).
  double detecting_ratio = 0.0;
};

// scenarios_only: a cell's property is kScenarioCellPrefix + the scenario's name.
inline constexpr const char* kScenarioCellPrefix = "scenario ";

struct MutantSummary {
  std::string id, bug, source;
  std::vector<std::string> caught_by;
};

// Where the low-precision-buffer mutant (B16) starts to be caught, by the
// number of micro-batches, for a float32 buffer declared over a compute dtype.
struct ThresholdPoint {
  long micro_batches = 0;
  bool caught = false;
  double ratio = 0.0;  // largest error/bound of the accumulation verdict
};
struct B16Threshold {
  DType compute = DType::f32;
  std::vector<ThresholdPoint> points;
  long first_caught = -1;  // smallest N from which every larger N is caught; -1: never
};

// A mutant's detections in the campaign, over all cases and over the cases
// computing and accumulating in float32 (where correct code's error is
// float32 rounding; with bfloat16 / float16 it legitimately reaches the
// size of small bugs, and detections there can be arbitrarily close to 1).
// A detection is marginal when its error/bound is less than
// kSeparationGoal x the worst error/bound of correct code.
inline constexpr double kSeparationGoal = 10.0;

struct CampaignMutant {
  std::string id;
  long cases = 0, detected = 0, marginal = 0;
  double smallest_detecting_ratio = HUGE_VAL;
  std::string smallest_case;
  double separation = 0.0;  // smallest_detecting_ratio / worst correct ratio
  long float32_cases = 0, float32_detected = 0, float32_marginal = 0;
  double float32_smallest_ratio = HUGE_VAL;
  std::string float32_smallest_case;
  double float32_separation = 0.0;
};

struct Campaign {
  long cases = 0, false_alarms = 0, discarded = 0;
  double worst_ratio = 0.0;
  std::string worst_case, worst_property;
  std::vector<std::string> false_alarm_cases;
  std::vector<double> bin_edges;  // histogram of error/bound of correct code
  std::vector<long> histogram;    // counts in [edge_i, edge_i+1)
  std::vector<CampaignMutant> mutants;
  double seconds = 0.0;

  // The error model's claim: a correct kernel uses at most 1 / F of a
  // verdict's bound (F, the formulation factor, NUMERICS §4).
  bool calibrated() const;
};

// selftest --config: one mutant over the scenario cells. The smallest
// err/bound among the cells that caught it, and that ÷ correct code's
// worst (the separation); where none did, the largest err/bound it left
// in the scenarios (equal to correct code's: not exercised at all).
struct MutantDetection {
  bool caught = false;
  double smallest_detecting_ratio = HUGE_VAL, separation = 0.0, worst_passing_ratio = 0.0;
};

struct SelfTestReport {
  std::string backend;
  // "default": generated cases against the single-process mutants;
  // "scale": the same on large shapes, and the scale suite's named
  // scenarios against them (kScenariosCheck);
  // "data_parallel": the suite's named scenarios on `ranks` ranks against
  // the data-parallel mutants (no generated cases, nothing to shrink).
  std::string suite = "default";
  int ranks = 1;
  std::uint64_t seed = 0;
  int cases = 0;
  SizeTier size = SizeTier::small;
  std::vector<PropertyRun> correct;  // every backend-exercising property on correct code
  std::vector<KillCell> cells;
  std::vector<MutantSummary> mutants;
  std::vector<B16Threshold> b16;
  std::optional<Campaign> campaign;
  double seconds = 0.0;

  bool scenarios_only = false;  // selftest --config: the cells are scenarios

  std::vector<std::string> survivors() const;
  // Correct code passes and no mutant survives (scenarios_only: survivors
  // are reported, not failures); campaign: no false alarm, calibrated.
  bool passed() const;
  // The worst err/bound of correct code over the named scenarios (kScenariosCheck), 0 without them.
  double correct_scenarios_ratio() const;
};

MutantDetection mutant_detection(const SelfTestReport& report, const std::string& mutant);

SelfTestReport run_selftest(const SelfTestOptions& options, Backend& backend, const ProgressSink& progress = {});

// kScenariosCheck: `scenarios` run in turn on `backend` under `loop`, each
// checked as the gate checks it (options.seed mixed into the scenario's;
// its peak memory against the prediction), until one fails. The failing
// scenario is the counterexample (its spec, its name) and its first failure
// the message; worst_ratio is the largest error/bound of the verdicts that
// passed; cases counts the scenarios that passed.
PropertyRun run_scenarios_check(const std::vector<ScenarioSpec>& scenarios, const SelfTestOptions& options,
                                Backend& backend, const LoopFactory& loop, const std::string& label,
                                const ProgressSink& progress = {});

}  // namespace gradeq
