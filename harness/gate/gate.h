// gate.h — the gate layer, above the properties and below the report
// writers and the command line. One run of the correctness gate: the named scenarios of the
// suite and the properties, on one backend, with one seed. Produces the
// CheckReport that the report writers render and whose passed() decides
// the exit code of `gradeq check`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/equivalence.h"
#include "harness/core/norm_sweep.h"
#include "harness/core/precision_sweep.h"
#include "harness/core/progress.h"
#include "harness/core/window_set.h"
#include "properties/generators.h"
#include "properties/property_runner.h"

namespace gradeq {

struct GateOptions {
  std::uint64_t seed = 1;
  int cases = 100;                       // per property
  std::vector<ScenarioSpec> suite;       // empty: the embedded default suite
  std::vector<std::string> scenarios;    // empty: the whole suite
  std::vector<std::string> properties;   // empty: every property
  bool run_scenarios = true;
  bool run_properties = true;
  bool run_norm_sweep = false;           // the report's normalizer study
  NormSweepOptions norm_sweep;
  bool run_precision_sweep = false;      // the report's accumulation-precision study
  PrecisionSweepOptions precision_sweep;
  ErrorModel model;
  SizeTier size = SizeTier::small;       // of the properties' generated shapes
  std::string program = "gradeq";        // the command that replays a failure (a user's own binary)
  double max_memory_bytes = 0.0;         // refuse a scenario estimated above this (0: no limit)
};


struct CheckReport {
  std::string backend;
  std::string version;
  std::string started_at;  // UTC, ISO 8601
  std::uint64_t seed = 0;
  int cases = 0;
  ErrorModel model;
  SizeTier size = SizeTier::small;
  std::vector<ScenarioResult> scenarios;
  std::vector<PropertyRun> properties;
  std::optional<NormSweep> norm_sweep;
  std::optional<PrecisionSweep> precision_sweep;
  double seconds = 0.0;
  std::string program = "gradeq";
  int ranks = 0;  // a data-parallel run's ranks (its replay goes through mpirun); 0: not data-parallel

  // Every check that ran passed (checks that did not run are neither).
  bool passed() const;
  long failures() const;
  long not_run() const;
};

// A report's header: backend, version, start time (UTC), seed, cases,
// error model and the program that replays it; results are added by the
// caller (the gate, verify, the data-parallel gate).
CheckReport begin_report(const std::string& backend, std::uint64_t seed, int cases, const ErrorModel& model,
                         const std::string& program);

// The command line that replays a failing property on the same backend,
// shapes and error model: RC_PARAMS="reproduce=..." <program> check
// --backend B --property P [...]. Empty where there is nothing to replay.
std::string replay_command(const CheckReport& report, const PropertyRun& run);

// The names of the scenarios run_gate will run (unknown names are its to refuse).
std::vector<std::string> selected_scenarios(const GateOptions& options);

// Throws std::invalid_argument for unknown scenario or property names.
CheckReport run_gate(const GateOptions& options, Backend& backend, const LoopFactory& loop = correct_loop(),
                     const ProgressSink& progress = {});

// The reference runs for a window set and the three verdicts, exactly as
// `gradeq check` computes them for a backend's runs. Without K_full, kernel
// correctness judges K_acc alone.
ScenarioResult verify_window_set(const WindowSet& set, const ErrorModel& model);

// `gradeq verify`: judges the external run of a window set
// (harness/core/window_set.h) with the gate's verdicts, as a report of one
// scenario whose backend is "external". WindowSetError on bad input.
CheckReport run_verify(const std::filesystem::path& dir, const ErrorModel& model, const ProgressSink& progress = {},
                       double max_memory_bytes = 0.0);

// Runs the one scenario `name` of the gate's suite (with the gate's seed)
// and writes it into dir as a window set (harness/core/window_set.h). Returns the number of
// files written.
int dump_scenario_run(const GateOptions& options, Backend& backend, const std::string& name,
                      const std::filesystem::path& dir);

}  // namespace gradeq
