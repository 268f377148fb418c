// finish_check.h — a check's outputs: made ready before the run (the
// directories proved writable, an earlier run's reports removed, the
// baseline and the self-test read) and written after it (the summary, the
// drift against the baseline, the reports, JUnit). `check`, `report`, their
// data-parallel form and `verify` share them.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/gate/gate.h"

namespace gradeq {

struct CheckOutputs {
  std::optional<std::string> report_dir;   // report.json, report.md, report.html, junit.xml and plots/
  std::string junit_file;                  // empty: none
  std::string baseline_file;               // the baseline's path, as the drift line names it
  std::optional<nlohmann::json> baseline;  // an earlier report.json (read_baseline)
  bool fail_on_drift = false;              // drift fails the run
  std::optional<nlohmann::json> selftest;  // a selftest.json the report shows (read_selftest)
  std::optional<nlohmann::json> training;  // a training sweep's sweep_norms.json it shows (read_training)
  std::optional<nlohmann::json> beside;    // another run's report.json it sets beside this one (read_beside)
};

// Before the run: the report directory and the JUnit file's directory
// proved writable (EnvironmentError otherwise), an earlier run's reports
// removed from the report directory.
void prepare_check_outputs(const CheckOutputs& outputs);

// The baseline report (--baseline) and the self-test's results
// (--selftest), read and checked before any work: std::invalid_argument
// for a file that is not one.
nlohmann::json read_baseline(const std::string& path);
nlohmann::json read_selftest(const std::string& path);
// --norm-training: a sweep_norms.json from `gradeq sweep norms --windows K --out DIR`.
nlohmann::json read_training(const std::string& path);
// --beside: another run's report.json.
nlohmann::json read_beside(const std::string& path);

// After the run: prints the summary and the drift against the baseline,
// writes the reports and the JUnit file. Returns whether the run passes:
// the report passed, and no drift fails it.
bool finish_check(const CheckReport& report, const CheckOutputs& outputs);

}  // namespace gradeq
