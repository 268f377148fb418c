// gate.cpp — runs the suite and the properties; collects the report.
#include "harness/gate/gate.h"

#include <chrono>
#include <ctime>
#include <stdexcept>

#include "harness/dump.h"
#include "harness/suite.h"

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

}  // namespace

bool CheckReport::passed() const { return failures() == 0; }

long CheckReport::failures() const {
  long n = 0;
  for (const ScenarioResult& s : scenarios) n += !s.passed();
  for (const PropertyRun& p : properties) n += !p.passed;
  return n;
}

CheckReport run_gate(const GateOptions& options, Backend& backend, const LoopFactory& loop,
                     const ProgressSink& progress) {
  const auto start = std::chrono::steady_clock::now();
  CheckReport report;
  report.backend = backend.name();
  report.version = GRADEQ_VERSION;
  report.started_at = utc_now();
  report.seed = options.seed;
  report.cases = options.cases;
  report.model = options.model;
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

  const std::size_t total = scenarios.size() + properties.size();
  std::size_t done = 0;
  auto announce = [&](const std::string& what) {
    if (!progress) return;
    // Appended piecewise: "[" + std::string&& trips a false -Wrestrict in g++ 12.
    std::string line = "[";
    line += std::to_string(++done);
    line += '/';
    line += std::to_string(total);
    line += "] ";
    line += what;
    progress(line);
  };
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    ScenarioSpec s = scenarios[i];
    s.seed = mix_seed(options.seed, s.seed);
    announce("scenario " + s.name);
    report.scenarios.push_back(check_scenario(s, backend, loop, options.model));
  }
  PropertyContext ctx{&backend, loop, options.model};
  for (std::size_t i = 0; i < properties.size(); ++i) {
    announce("property " + properties[i]->name);
    PropertyRunConfig config;
    config.cases = options.cases;
    config.seed = name_seed(options.seed, properties[i]->name);
    report.properties.push_back(run_property(*properties[i], ctx, config));
  }
  if (options.run_norm_sweep) report.norm_sweep = run_norm_sweep(options.norm_sweep, progress);
  if (options.run_precision_sweep)
    report.precision_sweep = run_precision_sweep(options.precision_sweep, backend, progress);
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
  return dump_scenario(dir, scenario, execute(scenario, backend, correct_loop(), options.model));
}

}  // namespace gradeq
