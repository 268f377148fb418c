// gate.cpp — runs the suite and the properties; collects the report.
#include "harness/gate/gate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <numeric>
#include <stdexcept>

#include "harness/core/measured_memory.h"
#include "harness/core/memory/reference_estimate.h"
#include "harness/gate/worker.h"
#include "harness/core/suite.h"
#include "reference/parallel.h"

namespace gradeq {
namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

const std::vector<ScenarioSpec>& suite_of(const GateOptions& options) {
  return options.suite.empty() ? default_scenarios() : options.suite;
}

std::string fmt_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

bool CheckReport::passed() const { return failures() == 0; }

long CheckReport::failures() const {
  long n = 0;
  for (const ScenarioResult& s : scenarios) n += !s.passed();
  for (const PropertyRun& p : properties) n += p.ran && !p.passed;
  return n;
}

long CheckReport::not_run() const {
  long n = 0;
  for (const PropertyRun& p : properties) n += !p.ran;
  return n;
}

std::string replay_command(const CheckReport& report, const PropertyRun& run) {
  if (run.reproduce.empty()) return "";
  // A data-parallel property replays on as many ranks, each given RC_PARAMS.
  const std::string launch =
      report.ranks > 1 ? "mpirun -np " + std::to_string(report.ranks) + " -x RC_PARAMS " : std::string();
  std::string command = "RC_PARAMS=\"" + run.reproduce + "\" " + launch + report.program + " check --backend " +
                        report.backend + (report.ranks > 0 ? " --suite data_parallel" : "") + " --property " + run.name;
  if (report.size != SizeTier::small) command += std::string(" --size ") + size_tier_name(report.size);
  if (report.model.reduction == ref::ReductionBound::deterministic) command += " --error-model deterministic";
  return command;
}

std::vector<std::string> selected_scenarios(const GateOptions& options) {
  if (!options.run_scenarios) return {};
  if (!options.scenarios.empty()) return options.scenarios;
  std::vector<std::string> names;
  for (const ScenarioSpec& s : suite_of(options)) names.push_back(s.name);
  return names;
}

CheckReport begin_report(const std::string& backend, std::uint64_t seed, int cases, const ErrorModel& model,
                         const std::string& program) {
  CheckReport report;
  report.backend = backend;
  report.version = GRADEQ_VERSION;
  report.started_at = utc_now();
  report.seed = seed;
  report.cases = cases;
  report.model = model;
  report.program = program;
  return report;
}

CheckReport run_gate(const GateOptions& options, Backend& backend, const LoopFactory& loop,
                     const ProgressSink& progress) {
  const auto start = std::chrono::steady_clock::now();
  CheckReport report = begin_report(backend.name(), options.seed, options.cases, options.model, options.program);
  report.size = options.size;
  set_size_tier(options.size);

  std::vector<ScenarioSpec> scenarios;
  if (options.run_scenarios) {
    const std::vector<ScenarioSpec> suite = suite_of(options);
    if (options.scenarios.empty()) {
      scenarios = suite;
    } else {
      for (const std::string& name : options.scenarios) {
        const ScenarioSpec* s = find_scenario(suite, name);
        if (!s) throw std::invalid_argument("unknown scenario '" + name + "' (see `gradeq list scenarios`)");
        scenarios.push_back(*s);
      }
    }
  }
  std::vector<const Property*> properties;
  if (options.run_properties) {
    if (options.properties.empty()) {
      for (const Property& p : default_properties()) properties.push_back(&p);
    } else {
      for (const std::string& name : options.properties) {
        const Property* p = find_property(name);
        if (!p) throw std::invalid_argument("unknown property '" + name + "' (see `gradeq list properties`)");
        properties.push_back(p);
      }
    }
  }

  const std::vector<std::string> replayed = replayed_properties();
  if (!replayed.empty() && scenarios.empty() &&
      std::none_of(properties.begin(), properties.end(), [&](const Property* p) {
        return std::find(replayed.begin(), replayed.end(), p->name) != replayed.end();
      }))
    throw std::invalid_argument("RC_PARAMS replays " + fmt_list(replayed) +
                                ", and the run selects none of them: nothing would be checked");

  for (ScenarioSpec& s : scenarios) fit_to_memory(s, options.max_memory_bytes);
  const std::size_t total = scenarios.size() + properties.size();
  std::size_t done = 0;
  // Returns the line, so that a long check can add what it is doing to it.
  auto announce = [&](const std::string& what, std::size_t number = 0) {
    // Appended piecewise: "[" + std::string&& trips a false -Wrestrict in g++ 12.
    std::string line = "[";
    line += std::to_string(number ? number : ++done);
    line += '/';
    line += std::to_string(total);
    line += "] ";
    line += what;
    if (progress) progress(line);
    return line;
  };
  auto run_scenarios = [&] {
    for (std::size_t i = 0; i < scenarios.size(); ++i) {
      ScenarioSpec s = scenarios[i];
      s.seed = mix_seed(options.seed, s.seed);
      const std::string line = announce("scenario " + s.name);
      const ProgressSink detail =
          progress ? ProgressSink([&progress, line](const std::string& d) { progress(line + ", " + d); }) : ProgressSink{};
      report.scenarios.push_back(check_scenario(s, backend, loop, options.model, detail, /*explain=*/true));
      predict_memory(report.scenarios.back().memory, s, backend, loop);
    }
  };
  PropertyContext ctx{&backend, loop, options.model};
  // RC_PARAMS="reproduce=..." replays the properties it names and no other.
  auto run_one = [&](std::size_t i) {
    const Property& p = *properties[i];
    if (!replayed.empty() && std::find(replayed.begin(), replayed.end(), p.name) == replayed.end()) {
      PropertyRun skipped;
      skipped.name = p.name;
      skipped.ran = false;
      skipped.message = "not run: RC_PARAMS replays only " + fmt_list(replayed);
      return encode_property_run(skipped);
    }
    // Numbered by position: with a worker process they start out of order.
    announce("property " + p.name, scenarios.size() + i + 1);
    PropertyRunConfig config;
    config.cases = options.cases;
    config.seed = name_seed(options.seed, p.name);
    return encode_property_run(run_property(p, ctx, config));
  };
  // Properties also run in a worker process where the backend survives
  // fork() and a second core is allowed; the scenarios run here meanwhile.
  const bool worker = backend.survives_fork() && ref::thread_limit() > 1;
  std::vector<std::size_t> costliest_first(properties.size());
  std::iota(costliest_first.begin(), costliest_first.end(), std::size_t{0});
  std::stable_sort(costliest_first.begin(), costliest_first.end(),
                   [&](std::size_t a, std::size_t b) { return properties[a]->cost > properties[b]->cost; });
  for (const std::string& line : share_jobs(properties.size(), run_one, run_scenarios, worker, costliest_first))
    report.properties.push_back(decode_property_run(line));
  if (options.run_norm_sweep) report.norm_sweep = run_norm_sweep(options.norm_sweep, progress);
  if (options.run_precision_sweep)
    report.precision_sweep = run_precision_sweep(options.precision_sweep, backend, progress);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

ScenarioResult verify_window_set(const WindowSet& set, const ErrorModel& model) {
  const auto start = std::chrono::steady_clock::now();
  const Scenario& scenario = set.scenario;
  Runs runs;
  runs.k_acc = set.k_acc;
  if (set.k_full) runs.k_full = *set.k_full;
  add_reference_runs(scenario, runs, model);
  ScenarioResult result = judge(scenario, runs);
  explain_failure(scenario, runs, model, result);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

CheckReport run_verify(const std::filesystem::path& dir, const ErrorModel& model, const ProgressSink& progress,
                       double max_memory_bytes) {
  const auto start = std::chrono::steady_clock::now();
  CheckReport report = begin_report("external", 0, 0, model, "gradeq");
  WindowSet set = read_window_set(dir);
  fit_to_memory(set.scenario.spec, max_memory_bytes);
  if (progress) progress("verify " + set.scenario.spec.name + ": the reference over " +
                         std::to_string(set.scenario.windows.size()) + " window(s)");
  report.scenarios.push_back(verify_window_set(set, model));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

int dump_scenario_run(const GateOptions& options, Backend& backend, const std::string& name,
                      const std::filesystem::path& dir) {
  const ScenarioSpec* found = find_scenario(suite_of(options), name);
  if (!found) throw std::invalid_argument("unknown scenario '" + name + "' (see `gradeq list scenarios`)");
  ScenarioSpec spec = *found;
  spec.seed = mix_seed(options.seed, spec.seed);
  const Scenario scenario = materialize(spec);
  const Runs runs = execute(scenario, backend, correct_loop(), options.model);
  // The manifest carries the scenario as configured (its seed, with the
  // run seed beside it: the data came from mix_seed(run_seed, seed)).
  Scenario written = scenario;
  written.spec.seed = found->seed;
  return write_window_set(dir, written, runs, options.seed);
}

}  // namespace gradeq
