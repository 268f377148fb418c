// console_report.cpp — what the command line prints: the gate's summary,
// the self-test's kill matrix and campaign, and the catalogue listings.
#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "reports/report.h"

namespace gradeq {
namespace {

// How the reference was made to fit in the memory allowed, if it had to be.
std::string fitted_to_memory(const ScenarioSpec& spec) {
  if (!spec.reference_runs_in_turn) return "";
  if (spec.reference_slice_samples == 0) return ", reference runs in turn to fit in memory";
  return fmt::format(", reference runs in turn and in slices of {} sample{} to fit in memory",
                     spec.reference_slice_samples, spec.reference_slice_samples == 1 ? "" : "s");
}

}  // namespace

std::string check_summary(const CheckReport& r) {
  std::ostringstream out;
  for (const ScenarioResult& s : r.scenarios) {
    const std::string accumulation =
        s.accumulation.status == Status::expected_divergence
            ? fmt::format("accumulation: expected divergence ({:.1e} x bound)", s.accumulation.worst_ratio)
            : fmt::format("accumulation err/bound {:.2e}", s.accumulation.worst_ratio);
    const std::string peak = s.memory.accumulated.peak > 0.0
                                 ? fmt::format("  peak {}", format_bytes(s.memory.accumulated.peak))
                                 : std::string();
    out << fmt::format("  {:4}  scenario {:30} {}  kernel {:.2e}{}  ({:.2f} s{})\n", s.passed() ? "pass" : "FAIL",
                       s.spec.name, accumulation, s.kernel.worst_ratio, peak, s.seconds,
                       fitted_to_memory(s.spec));
    if (!s.passed())
      for (const std::string& line : s.failures()) out << "        " << line << "\n";
  }
  for (const PropertyRun& p : r.properties) {
    if (!p.ran) {
      out << fmt::format("  {:4}  property {:30} {}\n", "-", p.name, p.message);
      continue;
    }
    out << fmt::format("  {:4}  property {:30} {} cases, worst err/bound {:.2e}, discarded {} vacuous + {} "
                       "ill-conditioned  ({:.2f} s)\n",
                       p.passed ? "pass" : "FAIL", p.name, p.cases, p.worst_ratio, p.discarded_vacuous,
                       p.discarded_ill_conditioned, p.seconds);
    if (!p.passed) {
      out << "        " << p.message << "\n";
      if (!p.counterexample.empty()) out << "        counterexample: " << p.counterexample << "\n";
      if (!p.reproduce.empty()) out << "        replay: " << replay_command(r, p) << "\n";
    }
  }
  out << fmt::format("result: {} ({} checks, {} failing{}) in {:.1f} s\n", r.passed() ? "PASS" : "FAIL",
                     r.scenarios.size() + r.properties.size() - r.not_run(), r.failures(),
                     r.not_run() ? fmt::format(", {} not run", r.not_run()) : "", r.seconds);
  return out.str();
}

std::string selftest_summary(const SelfTestReport& report) {
  std::ostringstream out;
  for (const PropertyRun& p : report.correct)
    out << fmt::format("  {:4}  correct code  {:30} {} {}, worst err/bound {:.2e}\n", p.passed ? "pass" : "FAIL",
                       p.name, p.cases,
                       report.suite == "data_parallel" ? "runs" : (p.name == kScenariosCheck ? "scenarios" : "cases"),
                       p.worst_ratio);
  for (const MutantSummary& m : report.mutants) {
    std::string by;
    for (const std::string& p : m.caught_by) by += (by.empty() ? "" : ", ") + p;
    std::string detection;
    if (report.scenarios_only) {
      const MutantDetection d = mutant_detection(report, m.id);
      detection = d.caught ? fmt::format(" (detecting err/bound {:.3g}, separation {:.3g})", d.smallest_detecting_ratio,
                                         d.separation)
                           : fmt::format(" (not shown: worst err/bound {:.3g}, correct code's {:.3g})",
                                         d.worst_passing_ratio, report.correct_scenarios_ratio());
    }
    out << fmt::format("  {:8}  {:4} {}{}\n", m.caught_by.empty() ? "SURVIVED" : "caught", m.id,
                       m.caught_by.empty() ? m.bug : "by " + by, detection);
  }
  for (const B16Threshold& t : report.b16)
    out << fmt::format("  B16 with {} compute: caught from N = {}\n", dtype_name(t.compute),
                       t.first_caught < 0 ? "never (up to " + std::to_string(t.points.back().micro_batches) + ")"
                       : std::to_string(t.first_caught));
  if (report.campaign) {
    const Campaign& c = *report.campaign;
    out << fmt::format("  campaign: {} cases, {} false alarms, {} discarded, worst err/bound {:.6f} ({})\n",
                       c.cases, c.false_alarms, c.discarded, c.worst_ratio,
                       c.calibrated() ? "within 1/F = 0.5" : "ABOVE 1/F = 0.5: the error model is violated");
    out << fmt::format("    mutant  float32: detected (marginal)  smallest  separation | all: detected (marginal)"
                       "  smallest  separation   [marginal: separation < {:g}]\n",
                       kSeparationGoal);
    for (const CampaignMutant& m : c.mutants)
      out << fmt::format("    {:4}   {:7}/{:<7} ({:6}) {:9.3g} {:11.3g} | {:7}/{:<7} ({:6}) {:9.3g} {:11.3g}\n", m.id,
                         m.float32_detected, m.float32_cases, m.float32_marginal, m.float32_smallest_ratio,
                         m.float32_separation, m.detected, m.cases, m.marginal, m.smallest_detecting_ratio,
                         m.separation);
  }
  if (report.scenarios_only) {
    out << fmt::format("selftest: {} (correct code {}; these scenarios catch {} of {} mutants, {} not shown) in {:.1f} s\n",
                       report.passed() ? "PASS" : "FAIL", report.passed() ? "passes" : "FAILS",
                       report.mutants.size() - report.survivors().size(), report.mutants.size(),
                       report.survivors().size(), report.seconds);
  } else {
    out << fmt::format("selftest: {} ({} mutants, {} survived) in {:.1f} s\n", report.passed() ? "PASS" : "FAIL",
                       report.mutants.size(), report.survivors().size(), report.seconds);
  }
  return out.str();
}

std::string catalogue_listing(const Catalogue& c, const std::string& what) {
  std::ostringstream out;
  const auto scenarios = [&out](const std::vector<ListedScenario>& listed) {
    for (const ListedScenario& s : listed) out << fmt::format("  {:30} {}  split {}\n", s.name, s.model, s.split);
  };
  if (what == "scenarios" || what == "all") {
    out << "scenarios:\n";
    scenarios(c.scenarios);
    out << "data_parallel suite (--suite data_parallel; each split is one rank's, rank r adds r samples to its first "
           "micro-batch):\n";
    scenarios(c.data_parallel_scenarios);
  }
  if (what == "properties" || what == "all") {
    out << "properties:\n";
    for (const ListedProperty& p : c.properties) out << fmt::format("  {:30} {}\n", p.name, p.description);
  }
  if (what == "mutants" || what == "all") {
    out << "mutants (gradeq selftest; B19 takes its CUDA form on the cuda backend):\n";
    for (const ListedMutant& m : c.mutants) out << fmt::format("  {:4} {}  [{}]\n", m.id, m.bug, m.source);
    out << "data-parallel mutants (mpirun -np W gradeq selftest --suite data_parallel, W >= 2):\n";
    for (const ListedMutant& m : c.data_parallel_mutants)
      out << fmt::format("  {:4} {} ({})  [{}]\n", m.id, m.bug, m.mode, m.source);
  }
  if (what == "backends" || what == "all") {
    out << "backends:\n";
    std::size_t width = 0;  // the longest name, registered ones included
    for (const BackendInfo& b : c.backends) width = std::max(width, b.name.size());
    for (const BackendInfo& b : c.backends)
      out << fmt::format("  {:{}} {:12} {}\n", b.name, width, b.available ? "available" : "unavailable", b.detail);
  }
  return out.str();
}

std::string plan_summary(const MemoryPlan& p, const PlanOptions& o) {
  std::ostringstream out;
  out << fmt::format("measured peaks of one micro-batch:");
  for (const auto& [samples, bytes] : p.measured) out << fmt::format(" {} sample(s) {};", samples, format_bytes(bytes));
  out << fmt::format("\nfit: {} fixed + {} per sample (worst point {:.2f}% off the line)\n", format_bytes(p.fit.fixed),
                     format_bytes(p.fit.per_sample), 100.0 * p.fit.worst_residual);
  out << fmt::format("budget {} less a {:.0f}% margin: {} usable\n", format_bytes(o.budget_bytes), 100.0 * o.margin,
                     format_bytes(p.usable_bytes));
  const bool uneven = p.last_micro_batch != p.micro_batch;
  out << fmt::format("plan: micro-batch {} x N = {} per optimizer step{} = effective batch {}\n", p.micro_batch,
                     p.micro_batches,
                     uneven ? fmt::format(" ({} of {} and a last of {})", p.micro_batches - 1, p.micro_batch,
                                          p.last_micro_batch)
                            : std::string(),
                     o.effective_batch);
  out << "  predicted peak " << format_bytes(p.predicted_peak) << ":";
  for (MemoryCategory c : kAllMemoryCategories)
    out << " " << memory_category_name(c) << " " << format_bytes(p.categories[c]) << ";";
  out << fmt::format("\n  the effective batch in one micro-batch would peak at {}\n", format_bytes(p.predicted_full_batch));
  if (uneven && p.spec.procedure.normalization == ref::Normalization::equal_split)
    out << "  note: equal_split normalization with an uneven last micro-batch weights its samples wrongly (BUGS.md "
           "B5); the check below shows it; use normalization = \"global_count\"\n";
  if (p.per_rank)
    out << fmt::format("  per rank on {} ranks ({} micro-batch(es) of {} each): replicated {}, gradients and optimizer "
                       "state sharded {}\n",
                       p.per_rank->ranks, p.per_rank->micro_batches, p.per_rank->micro_batch,
                       format_bytes(p.per_rank->replicated), format_bytes(p.per_rank->sharded));
  out << fmt::format("measured peak of the planned split: {} (predicted {}, {:.2f}% off; {}% allowed)\n",
                     format_bytes(p.measured_peak()), format_bytes(p.predicted_peak), 100.0 * p.relative_error(),
                     static_cast<int>(100 * kMemoryTolerance));
  const ScenarioResult& c = p.check;
  out << fmt::format("equivalence of the planned split: math {}, kernel {} (err/bound {:.2e}), accumulation {} "
                     "(err/bound {:.2e})\n",
                     status_name(c.math.status), status_name(c.kernel.status), c.kernel.worst_ratio,
                     status_name(c.accumulation.status), c.accumulation.worst_ratio);
  if (!c.passed()) out << "  " << c.first_failure() << "\n";
  out << "result: " << (p.passed() ? "PASS" : "FAIL") << "\n";
  return out.str();
}

}  // namespace gradeq
