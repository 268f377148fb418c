// report.h — writers that render the gate's results: report.json
// (everything, for tools), report.md (for a reviewer), junit.xml (for CI
// systems) and the console summaries the command line prints.
// Writers only format; they compute nothing a reader could not recompute
// from report.json.
#pragma once

#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/core/norm_training.h"
#include "harness/gate/catalogue.h"
#include "harness/gate/gate.h"
#include "harness/gate/plan.h"
#include "harness/gate/selftest.h"
#include "reports/plots.h"

namespace gradeq {

nlohmann::json report_json(const CheckReport& report);
nlohmann::json selftest_json(const SelfTestReport& report);
std::string selftest_markdown(const SelfTestReport& report);
nlohmann::json norm_sweep_json(const NormSweep& sweep);
std::string norm_sweep_markdown(const NormSweep& sweep);
// `gradeq sweep norms --windows K`: sweep_norms.json (a report shows it
// when given it: Attached::training) and its Markdown.
nlohmann::json norm_training_json(const NormTraining& training);
std::string norm_training_markdown(const NormTraining& training);
nlohmann::json precision_sweep_json(const PrecisionSweep& sweep);
std::string precision_sweep_markdown(const PrecisionSweep& sweep);
// report.md: a summary read in a minute (the verdict table, failures in
// full, links to the plots when figures are given; without them, the
// sweeps' tables).
std::string report_markdown(const CheckReport& report, const std::vector<Figure>* figures = nullptr);
// report.html: self-contained (inline SVG figures, no script), the verdict
// at the top, failures in full, details folded per scenario.
std::string report_html(const nlohmann::json& report, const DrawnFigures& figures, const nlohmann::json* drift = nullptr,
                        const Attached& attached = {});
// With drift (compare_to_baseline), a "drift" test case: a <failure> when
// fail_on_drift and anything drifted.
std::string report_junit(const CheckReport& report, const nlohmann::json* drift = nullptr, bool fail_on_drift = false);

// The memory table of report.md and report.html, from report.json's
// scenarios: a header and one row per scenario with a measured "memory".
std::vector<std::vector<std::string>> memory_table(const nlohmann::json& scenarios);

// report.json's schema version (bumped whenever a field changes meaning or goes away).
int report_schema_version();

// Drift against a baseline report.json (`gradeq report --baseline`): a
// tensor's or property's err/bound that grew more than kDriftFactor times
// and by at least kDriftFloor, a verdict that changed, a check new or
// missing. check_baseline refuses (std::invalid_argument) a document that
// is not a report of this schema version; compare_to_baseline also one
// that ran other scenarios. The result: {"flags": [...], "compared", ...}.
inline constexpr double kDriftFactor = 2.0, kDriftFloor = 0.05;
void check_baseline(const nlohmann::json& baseline);
void check_baseline_scenarios(const std::vector<std::string>& scenarios, const nlohmann::json& baseline);
nlohmann::json compare_to_baseline(const nlohmann::json& current, const nlohmann::json& baseline);
std::string drift_markdown(const nlohmann::json& drift);

// Beside another run's report.json (`gradeq check --report DIR --beside
// OTHER/report.json`): each tensor's worst err/bound in both runs, for the
// scenario checks and properties both ran; report.json's "beside". For two
// kernels side by side: another backend, or the host kernels in the
// worst-case order (cpu-adversarial) beside the natural one. check_beside
// refuses (std::invalid_argument) a document that is not a report of this
// schema version; compare_beside also one with nothing in common.
void check_beside(const nlohmann::json& other);
nlohmann::json compare_beside(const nlohmann::json& current, const nlohmann::json& other);
// Its table (the kernel-correctness tensors, largest err/bound here first,
// at most 30 rows after the header) and the caption that says what it is.
std::vector<std::vector<std::string>> beside_table(const nlohmann::json& beside);
std::string beside_caption(const nlohmann::json& beside);
std::string beside_markdown(const nlohmann::json& beside);

// A table in Markdown: the first row is the header.
std::string markdown_table(const std::vector<std::vector<std::string>>& rows);

// A report.json that an option (--baseline, --beside) names: refused
// (std::invalid_argument, naming the option) when it is not a gradeq
// report of this schema version with its lists of scenarios and
// properties; `remedy` says what to do about another version.
void check_report_document(const nlohmann::json& report, const std::string& option, const std::string& remedy);

// Text inside XML or HTML markup (element content or a quoted attribute).
std::string markup_escaped(const std::string& text);

// `gradeq plan`: what it prints, and what --json writes.
std::string plan_summary(const MemoryPlan& plan, const PlanOptions& options);
nlohmann::json plan_json(const MemoryPlan& plan, const PlanOptions& options);

// What `gradeq check`, `gradeq selftest` and `gradeq list` print.
std::string check_summary(const CheckReport& report);
std::string selftest_summary(const SelfTestReport& report);
// what: scenarios, properties, mutants, backends or all.
std::string catalogue_listing(const Catalogue& catalogue, const std::string& what);

// Writes report.json, report.md and junit.xml into dir (created if
// needed); with plots, also report.html and the figures in dir/plots (the
// attached studies' too). Returns why figures are missing (gnuplot absent
// or failing), empty when none is.
std::string write_reports(const std::filesystem::path& dir, const CheckReport& report, const nlohmann::json* drift = nullptr,
                          bool fail_on_drift = false, bool plots = false, const Attached& attached = {});
void write_text(const std::filesystem::path& path, const std::string& text);
// Removes an earlier run's reports from dir before a run writes new ones,
// so that a run that does not finish leaves none that look current.
void remove_stale(const std::filesystem::path& dir, std::initializer_list<const char*> files);
// Creates dir if needed and proves it writable, before a run: an output
// that cannot be written is the environment's fault (EnvironmentError,
// exit 3), said before the work, not after it.
void require_writable_directory(const std::filesystem::path& dir);
// An output file an option names: std::invalid_argument when it is a
// directory; its directory proved writable as above.
void require_writable_file(const std::string& file, const std::string& option);

}  // namespace gradeq
