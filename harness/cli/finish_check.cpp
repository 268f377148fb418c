// finish_check.cpp — a check's outputs, before and after the run.
#include "harness/cli/finish_check.h"

#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "reports/report.h"

namespace gradeq {
namespace {

// A JSON file an option names; bad input (exit 2) when it is not JSON.
nlohmann::json read_json_file(const std::string& path, const std::string& option) {
  std::ifstream in(path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(option + " " + path + ": not JSON (" + e.what() + ")");
  }
}

// Writes the reports; says on stderr why figures are missing, if they are.
void write_all_reports(const std::string& dir, const CheckReport& report, const nlohmann::json* drift,
                       bool fail_on_drift, const Attached& attached) {
  const std::string problem = write_reports(dir, report, drift, fail_on_drift, /*plots=*/true, attached);
  std::cout << "wrote " << dir << "/report.json, report.md, report.html, junit.xml and plots/\n";
  if (!problem.empty()) std::cerr << "gradeq: warning: figures missing from the report: " << problem << "\n";
}

// The drift line and each flagged check.
void print_drift(const nlohmann::json& drift, const CheckOutputs& o) {
  const nlohmann::json& flags = drift.at("flags");
  const bool fails = o.fail_on_drift && !flags.empty();
  std::cout << fmt::format("drift against {}: {} of {} checks flagged{}\n", o.baseline_file, flags.size(),
                           drift.value("compared", 0L), fails ? " (fails the run)" : "");
  for (const nlohmann::json& f : flags)
    std::cout << fmt::format("  {:16} {}: {} (err/bound {} -> {})\n", f.value("kind", ""), f.value("check", ""),
                             f.value("what", ""), f.at("baseline_ratio").dump(), f.at("ratio").dump());
}

}  // namespace

void prepare_check_outputs(const CheckOutputs& o) {
  if (o.report_dir) require_writable_directory(*o.report_dir);
  if (!o.junit_file.empty()) require_writable_file(o.junit_file, "--junit");
  if (o.report_dir) remove_stale(*o.report_dir, {"report.json", "report.md", "report.html", "junit.xml"});
}

nlohmann::json read_baseline(const std::string& path) {
  const nlohmann::json j = read_json_file(path, "--baseline");
  check_baseline(j);
  return j;
}

nlohmann::json read_selftest(const std::string& path) {
  const nlohmann::json j = read_json_file(path, "--selftest");
  if (!j.is_object() || !j.contains("kill_matrix") || !j.at("kill_matrix").is_array() || !j.contains("passed"))
    throw std::invalid_argument("--selftest " + path + ": not a selftest.json (no kill_matrix); write one with "
                                "`gradeq selftest --out DIR`");
  return j;
}

nlohmann::json read_training(const std::string& path) {
  const nlohmann::json j = read_json_file(path, "--norm-training");
  if (!j.is_object() || j.value("study", "") != "norm_training" || !j.contains("curves") || !j.contains("one_batch"))
    throw std::invalid_argument("--norm-training " + path + ": not a training sweep's sweep_norms.json; write one with "
                                "`gradeq sweep norms --windows K --out DIR`");
  return j;
}

nlohmann::json read_beside(const std::string& path) {
  const nlohmann::json j = read_json_file(path, "--beside");
  check_beside(j);
  return j;
}

bool finish_check(const CheckReport& report, const CheckOutputs& o) {
  std::cout << check_summary(report);
  std::optional<nlohmann::json> drift;
  if (o.baseline) {
    drift = compare_to_baseline(report_json(report), *o.baseline);
    print_drift(*drift, o);
  }
  const nlohmann::json* drift_json = drift ? &*drift : nullptr;
  if (o.report_dir) write_all_reports(*o.report_dir, report, drift_json, o.fail_on_drift,
                      {o.selftest ? &*o.selftest : nullptr, o.training ? &*o.training : nullptr,
                       o.beside ? &*o.beside : nullptr});
  if (!o.junit_file.empty()) {
    write_text(o.junit_file, report_junit(report, drift_json, o.fail_on_drift));
    std::cout << "wrote " << o.junit_file << "\n";
  }
  const bool drifted = drift && !drift->at("flags").empty();
  return report.passed() && !(drifted && o.fail_on_drift);
}

}  // namespace gradeq
