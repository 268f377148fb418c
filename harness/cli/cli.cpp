// cli.cpp — the `gradeq` command line: argument parsing and dispatch to
// the gate layer (harness/gate) and the writers (reports/), nothing else.
// run_cli() is the whole program; `gradeq` (main.cpp) and a user's own
// binary (gradeq/gradeq.h) call it.
//
//   gradeq check   [options]            the gate: exit 0 pass, 1 failure
//   gradeq report  --out DIR [options]  the gate, plus report.json/.md and junit.xml
//   gradeq sweep   norms|precision [--seeds N] [--windows K] [--seed S] [--backend B] [--out DIR]   the studies
//   gradeq selftest [--campaign N] [--out DIR]      every property vs every mutant
//   gradeq verify  DIR [--report DIR] [--junit F]  judge an external run's window set
//   gradeq list    [scenarios|properties|mutants|backends|all]
//
// Exit codes: 0 pass, 1 verification failure, 2 bad usage or input,
// 3 environment (e.g. cuda asked for but unavailable, out of memory),
// 4 internal error (a bug in gradeq), 128 + N killed by signal N.
#include <charconv>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "harness/cli/cli.h"
#include "harness/cli/finish_check.h"
#include "harness/cli/process.h"
#include "harness/core/memory/reference_estimate.h"
#include "harness/cli/progress_line.h"
#include "harness/core/backends.h"
#include "harness/core/config.h"
#include "harness/gate/catalogue.h"
#include "harness/gate/data_parallel_gate.h"
#include "harness/gate/gate.h"
#include "harness/gate/selftest.h"
#include "harness/core/suite.h"
#include "kernels/communicator.h"
#include "reports/report.h"

namespace gradeq {
namespace {

constexpr int kExitPass = 0, kExitFail = 1, kExitUsage = 2, kExitEnvironment = 3, kExitInternal = 4;
// How long a data-parallel collective may wait for the other ranks before
// the run stops (a rank died or hangs). Rank 0 computes the references
// while the others wait, so it is generous.
constexpr double kDefaultTimeout = 300.0;

// Says on stderr what went wrong (from `rank` of a data-parallel run, or
// -1) and returns the exit code for it.
int report_error(std::exception_ptr error, int rank) {
  const std::string who = rank < 0 ? "gradeq: " : "gradeq (rank " + std::to_string(rank) + "): ";
  try {
    std::rethrow_exception(error);
  } catch (const EnvironmentError& e) {
    std::cerr << who << e.what() << "\n";
    return kExitEnvironment;
  } catch (const std::invalid_argument& e) {
    std::cerr << who << e.what() << "\n";
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    std::cerr << who << "out of memory: the run needs more memory than this machine gives it (smaller shapes, "
                        "or fewer scenarios at once)\n";
    return kExitEnvironment;
  } catch (const std::exception& e) {
    std::cerr << who << "internal error: " << e.what()
              << "\nThis is a bug in gradeq, not in the code under test: please report it with the command line "
                 "that gave it.\n";
    return kExitInternal;
  }
}

struct CheckArgs {
  std::string max_memory;  // empty: the memory available
  std::string backend = "cpu";
  std::string seed = "1";
  int cases = 100;
  std::vector<std::string> scenarios, properties;
  std::string error_model = "probabilistic";
  std::string size;  // empty: the suite's (small for default, large for scale)
  std::string suite = "default";
  std::string report_dir, junit_file, dump_dir, config_file;
  std::string baseline;        // an earlier report.json to compare against
  bool fail_on_drift = false;  // drift fails the run (exit 1)
  std::string selftest;        // a selftest.json whose figures the report shows
  std::string training;        // a training sweep's sweep_norms.json the report shows
  std::string beside;          // another run's report.json to set beside this one's
  double timeout = kDefaultTimeout;  // data-parallel: seconds a collective may wait
  bool cases_given = false, size_given = false, timeout_given = false;
  std::uint64_t command = 0;  // a hash of the command line (every rank must run the same)
  bool data_parallel = false;  // --data-parallel (implied by --suite data_parallel)
  bool data_parallel_run() const { return data_parallel || suite == "data_parallel"; }
};

SizeTier size_tier_of(const std::string& name) { return name == "large" ? SizeTier::large : SizeTier::small; }

// The properties' shapes: small (the gate) or large (real layers' tile
// boundaries); one option for check, report and selftest.
void add_size_option(CLI::App& cmd, std::string& size) {
  cmd.add_option("--size", size, "Shapes the properties generate: small or large (widths 63-257); default: the suite's")
      ->check(CLI::IsMember({"small", "large"}));
}

// Every backend this program knows: built in, and registered by a user's
// program before run_cli.
CLI::Option* add_backend_option(CLI::App& cmd, std::string& backend, const std::string& what) {
  std::string names;
  for (const std::string& n : backend_names()) names += (names.empty() ? "" : ", ") + n;
  return cmd.add_option("--backend", backend, what + " (" + names + ")")->check(CLI::IsMember(backend_names()));
}

// The memory a run may use, e.g. 16G, 512M or a number of bytes; empty:
// what /proc/meminfo says is available (no limit where it cannot be read).
double memory_limit(const std::string& text) {
  if (text.empty()) return available_memory_bytes();
  double bytes = 0.0;
  try {
    bytes = parse_bytes(text);
  } catch (const std::invalid_argument&) {
  }
  if (!(bytes > 0.0))
    throw std::invalid_argument("--max-memory must be a positive size like 16G, 512MiB or 1000000 (bytes), got '" + text + "'");
  return bytes;
}

void add_memory_option(CLI::App& cmd, std::string& max_memory) {
  cmd.add_option("--max-memory", max_memory,
                 "Refuse a scenario estimated to need more memory than this (16G, 512M); default: what is available");
}

void add_timeout_option(CLI::App& cmd, double& timeout) {
  cmd.add_option("--timeout", timeout,
                 "Data-parallel suite: stop (exit 3) when a collective waits longer than this many seconds for the "
                 "other ranks (default 300)")
      ->check(CLI::Range(1.0, 86400.0));
}

void add_check_options(CLI::App& cmd, CheckArgs& a) {
  add_backend_option(cmd, a.backend, "Backend under test");
  cmd.add_option("--seed", a.seed, "Run seed (any 64-bit value): the same seed reproduces the same run");
  cmd.add_option("--cases", a.cases, "Successful cases per property")->check(CLI::Range(1, 1000000));
  CLI::Option* config = cmd.add_option("--config", a.config_file, "Scenarios from this TOML file instead of the embedded suite")
      ->check(CLI::ExistingFile);
  cmd.add_option("--suite", a.suite,
                 "Embedded suite: default, scale (tile and reduction boundaries) or data_parallel (under mpirun -np W)")
      ->check(CLI::IsMember({"default", "scale", "data_parallel"}))
      ->excludes(config);
  add_timeout_option(cmd, a.timeout);
  cmd.add_flag("--data-parallel", a.data_parallel,
               "Run the suite's (or --config's) scenarios across the ranks of mpirun, replicated and sharded; each "
               "split is one rank's (implied by --suite data_parallel)");
  cmd.add_option("--scenario", a.scenarios, "Run only this named scenario (repeatable)");
  cmd.add_option("--property", a.properties, "Run only this property (repeatable)");
  cmd.add_option("--error-model", a.error_model, "Error model: probabilistic (default) or deterministic")
      ->check(CLI::IsMember({"deterministic", "probabilistic"}));
  cmd.add_option("--junit", a.junit_file, "Also write JUnit XML to this file");
  cmd.add_option("--dump", a.dump_dir, "Write the tensors of the one --scenario as .npy files into this directory");
  add_size_option(cmd, a.size);
  add_memory_option(cmd, a.max_memory);
  CLI::Option* baseline =
      cmd.add_option("--baseline", a.baseline, "Compare with this earlier report.json: err/bound grown > 2x (and by >= 0.05), "
                                               "verdicts changed, checks new or missing")
          ->check(CLI::ExistingFile);
  cmd.add_flag("--fail-on-drift", a.fail_on_drift, "Drift against the baseline fails the run (exit 1, a JUnit failure)")
      ->needs(baseline);
  cmd.add_option("--selftest", a.selftest,
                 "Show this selftest.json (from `gradeq selftest --out`) in the report: kill matrix, campaign")
      ->check(CLI::ExistingFile);
  cmd.add_option("--norm-training", a.training,
                 "Show this sweep_norms.json (from `gradeq sweep norms --windows K --out`) in the report: "
                 "BatchNorm against GroupNorm and LayerNorm over training")
      ->check(CLI::ExistingFile);
  cmd.add_option("--beside", a.beside,
                 "Show each tensor's worst err/bound beside this other run's report.json (another backend, or "
                 "cpu-adversarial beside cpu) in the report")
      ->check(CLI::ExistingFile);
}

// A run seed: any 64-bit unsigned value, written in decimal, nothing else
// (no sign, no wrap-around, no saturation).
std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t seed = 0;
  const char* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, seed);
  if (text.empty() || error != std::errc() || at != end)
    throw std::invalid_argument("--seed must be an integer from 0 to 18446744073709551615, got '" + text + "'");
  return seed;
}

// ---- data parallelism (`mpirun -np W gradeq check --suite data_parallel`)

// Bad input to a data-parallel run, found by every rank before any work
// (agree_on_input): the rank that is to say what is wrong says it, and
// every rank returns exit 2 by itself. Returns whether the run may go on.
bool agree_input_is_good(Communicator& comm, std::uint64_t command, const std::function<void()>& validate) {
  const InputAgreement agreement = agree_on_input(comm, command, validate);
  if (!agreement.problem.empty())
    std::cerr << (comm.rank() == 0 ? "gradeq: " : "gradeq (rank " + std::to_string(comm.rank()) + "): ")
              << agreement.problem << "\n";
  return agreement.good;
}

// Options that mean nothing to the data-parallel suite are refused, not ignored.
void refuse_for_data_parallel(const CheckArgs& a) {
  const auto refuse = [](bool given, const char* option, const char* why) {
    if (given) throw std::invalid_argument(std::string(option) + " does not apply to the data_parallel suite: " + why);
  };
  for (const std::string& p : a.properties)
    refuse(p != "RandomDataParallel", ("--property " + p).c_str(),
           "its one property is RandomDataParallel (the other checks run with the scenarios)");
  refuse(!a.dump_dir.empty(), "--dump", "a window set holds one process's run");
  refuse(a.size_given, "--size", "its generated cases have the small shapes");
}

// The outputs a check's options name; the baseline and the self-test are
// read where the check reads its input.
CheckOutputs outputs_of(const CheckArgs& a, const std::optional<std::string>& report_dir) {
  CheckOutputs outputs;
  outputs.report_dir = report_dir;
  outputs.junit_file = a.junit_file;
  outputs.baseline_file = a.baseline;
  outputs.fail_on_drift = a.fail_on_drift;
  return outputs;
}

// The studies a written report shows (--selftest, --norm-training,
// --beside), read and checked before any work.
void read_attached(const CheckArgs& a, const std::optional<std::string>& report_dir, CheckOutputs& outputs) {
  for (const auto& [option, file] : {std::pair{"--selftest", &a.selftest}, std::pair{"--norm-training", &a.training},
                                     std::pair{"--beside", &a.beside}})
    if (!file->empty() && !report_dir)
      throw std::invalid_argument(std::string(option) +
                                  " shows a study in a written report: give --report DIR (or use `gradeq report`)");
  if (!a.selftest.empty()) outputs.selftest = read_selftest(a.selftest);
  if (!a.training.empty()) outputs.training = read_training(a.training);
  if (!a.beside.empty()) outputs.beside = read_beside(a.beside);
}

int run_data_parallel_check(const CheckArgs& a, const std::optional<std::string>& report_dir,
                            const std::string& program) {
  refuse_for_data_parallel(a);
  const std::unique_ptr<Communicator> comm = make_communicator(a.timeout);
  const bool root = comm->rank() == 0;
  DataParallelOptions options;
  CheckOutputs outputs = outputs_of(a, report_dir);
  const bool good = agree_input_is_good(*comm, a.command, [&] {
    options.seed = parse_seed(a.seed);
    options.scenarios = a.scenarios;
    options.program = program;
    options.cases = a.cases;
    // Naming only the property runs only it; naming only scenarios, only them.
    options.run_scenarios = a.properties.empty() || !a.scenarios.empty();
    if (!a.scenarios.empty() && a.properties.empty()) options.cases = 0;
    if (!a.config_file.empty()) options.suite = load_scenarios(a.config_file);
    if (a.suite != "default" && a.suite != "data_parallel") options.suite = named_suite(a.suite);
    options.model.reduction =
        a.error_model == "probabilistic" ? ref::ReductionBound::probabilistic : ref::ReductionBound::deterministic;
    require_data_parallel_suite(options, comm->size());
    if (!root) return;
    prepare_check_outputs(outputs);
    if (!a.baseline.empty()) outputs.baseline = read_baseline(a.baseline);
    read_attached(a, report_dir, outputs);
  });
  if (!good) return kExitUsage;
  try {
    std::unique_ptr<Backend> backend = make_backend(a.backend);
    if (root)
      std::cout << fmt::format("gradeq check: backend {}, {} on {} rank{} ({}), seed {}, {} error model\n",
                               backend->name(),
                               a.config_file.empty() ? (a.suite == "default" ? "data_parallel" : a.suite) + " suite"
                                                     : a.config_file,
                               comm->size(), comm->size() == 1 ? "" : "s", comm->name(), options.seed, a.error_model);
    const CheckReport report = run_data_parallel_gate(options, *backend, *comm, root ? make_progress() : ProgressSink{});
    int code = kExitPass;
    if (root) {
      end_progress();
      code = finish_check(report, outputs) ? kExitPass : kExitFail;
    }
    return comm->broadcast(code);
  } catch (...) {
    // An error on one rank while the others wait in a collective: stop them all.
    const int code = report_error(std::current_exception(), comm->size() > 1 ? comm->rank() : -1);
    comm->abort(code);
    return code;
  }
}

int run_check(const CheckArgs& a, const std::optional<std::string>& report_dir, const std::string& program) {
  if (a.data_parallel_run()) return run_data_parallel_check(a, report_dir, program);
  if (a.timeout_given) throw std::invalid_argument("--timeout applies to the data_parallel suite only");
  const std::uint64_t seed = parse_seed(a.seed);
  if (!a.dump_dir.empty() && a.scenarios.size() != 1)
    throw std::invalid_argument("--dump needs exactly one --scenario (see `gradeq list scenarios`)");
  CheckOutputs outputs = outputs_of(a, report_dir);
  prepare_check_outputs(outputs);
  if (!a.dump_dir.empty()) require_writable_directory(a.dump_dir);
  if (!a.baseline.empty()) outputs.baseline = read_baseline(a.baseline);
  read_attached(a, report_dir, outputs);
  GateOptions options;
  if (!a.config_file.empty()) options.suite = load_scenarios(a.config_file);
  if (a.suite != "default") options.suite = named_suite(a.suite);
  std::unique_ptr<Backend> backend = make_backend(a.backend);
  options.seed = seed;
  options.program = program;
  options.max_memory_bytes = memory_limit(a.max_memory);
  options.cases = a.cases;
  options.scenarios = a.scenarios;
  options.properties = a.properties;
  // Naming only scenarios (or only properties) runs only those; a config
  // file always runs its scenarios.
  options.run_scenarios = !(a.scenarios.empty() && !a.properties.empty()) || !options.suite.empty();
  options.run_properties = !(a.properties.empty() && !a.scenarios.empty());
  options.model.reduction =
      a.error_model == "probabilistic" ? ref::ReductionBound::probabilistic : ref::ReductionBound::deterministic;
  // A written report carries the studies too.
  options.run_norm_sweep = options.run_precision_sweep = report_dir.has_value();
  options.norm_sweep.seed = options.precision_sweep.seed = options.seed;
  options.size = size_tier_of(a.size.empty() ? (a.suite == "scale" ? "large" : "small") : a.size);

  // A baseline of other scenarios cannot be compared: said before the run.
  if (outputs.baseline) check_baseline_scenarios(selected_scenarios(options), *outputs.baseline);
  std::cout << fmt::format("gradeq check: backend {}, {} suite, seed {}, {} cases per property, {} shapes, {} error model\n",
                           backend->name(), a.config_file.empty() ? a.suite : a.config_file, options.seed, a.cases,
                           size_tier_name(options.size), a.error_model);
  const ProgressSink progress = make_progress();
  const CheckReport report = run_gate(options, *backend, correct_loop(), progress);
  end_progress();
  const bool passed = finish_check(report, outputs);
  if (!a.dump_dir.empty()) {
    const int files = dump_scenario_run(options, *backend, a.scenarios.front(), a.dump_dir);
    std::cout << "wrote " << files << " files into " << a.dump_dir << " (manifest.json names them)\n";
  }
  return passed ? kExitPass : kExitFail;
}

struct VerifyArgs {
  std::string dir, max_memory;
  std::string error_model = "probabilistic";
  std::string report_dir, junit_file;
};

int run_verify_command(const VerifyArgs& a) {
  CheckOutputs outputs;
  if (!a.report_dir.empty()) outputs.report_dir = a.report_dir;
  outputs.junit_file = a.junit_file;
  prepare_check_outputs(outputs);
  ErrorModel model;
  model.reduction = a.error_model == "probabilistic" ? ref::ReductionBound::probabilistic : ref::ReductionBound::deterministic;
  const ProgressSink progress = make_progress();
  const CheckReport report = run_verify(a.dir, model, progress, memory_limit(a.max_memory));
  end_progress();
  std::cout << fmt::format("gradeq verify: {} ({}), {} error model\n", a.dir, report.scenarios.front().spec.name,
                           a.error_model);
  return finish_check(report, outputs) ? kExitPass : kExitFail;
}

struct PlanArgs {
  std::string config_file, scenario, budget, json_file;
  std::string backend = "cpu";
  long effective_batch = -1;
  double margin = 0.1;
  long ranks = 0;
  std::string error_model = "probabilistic";
};

int run_plan_command(const PlanArgs& a) {
  PlanOptions options;
  try {
    options.budget_bytes = parse_bytes(a.budget);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--budget: ") + e.what());
  }
  options.effective_batch = a.effective_batch;
  options.margin = a.margin;
  options.ranks = a.ranks;
  options.model.reduction =
      a.error_model == "probabilistic" ? ref::ReductionBound::probabilistic : ref::ReductionBound::deterministic;
  if (!a.json_file.empty()) require_writable_file(a.json_file, "--json");
  const std::vector<ScenarioSpec> scenarios = load_scenarios(a.config_file);
  const ScenarioSpec* spec = nullptr;
  std::string names;
  for (const ScenarioSpec& s : scenarios) {
    names += (names.empty() ? "" : ", ") + s.name;
    if (s.name == a.scenario || (a.scenario.empty() && scenarios.size() == 1)) spec = &s;
  }
  if (!spec)
    throw std::invalid_argument(a.scenario.empty() ? a.config_file + " has " + std::to_string(scenarios.size()) +
                                                         " scenarios: name one with --scenario (" + names + ")"
                                                   : "no scenario '" + a.scenario + "' in " + a.config_file + " (" +
                                                         names + ")");
  std::unique_ptr<Backend> backend = make_backend(a.backend);
  std::cout << fmt::format("gradeq plan: scenario {}, backend {}, budget {}, effective batch {}\n", spec->name,
                           backend->name(), format_bytes(options.budget_bytes), options.effective_batch);
  const ProgressSink progress = make_progress();
  MemoryPlan plan;
  try {
    plan = make_plan(*spec, options, *backend, progress);
  } catch (const PlanFailure& e) {
    end_progress();
    std::cout << "result: FAIL: " << e.what() << "\n";
    return kExitFail;
  }
  end_progress();
  std::cout << plan_summary(plan, options);
  if (!a.json_file.empty()) {
    write_text(a.json_file, plan_json(plan, options).dump(2) + "\n");
    std::cout << "wrote " << a.json_file << "\n";
  }
  return plan.passed() ? kExitPass : kExitFail;
}

struct SweepArgs {
  std::string study;
  std::string backend = "cpu";
  int seeds = 5;
  std::string seed = "1";
  std::string out_dir;
  bool backend_given = false;
  long windows = 0;  // norms: train this many windows (0: the one-window study)
  bool seeds_given = false;
};

int run_sweep(const SweepArgs& a) {
  const std::uint64_t seed = parse_seed(a.seed);
  if (a.windows > 0 && a.study != "norms") throw std::invalid_argument("--windows applies to `sweep norms`");
  if (a.windows > 0 && a.seeds_given)
    throw std::invalid_argument("--seeds applies to the one-window study; --windows trains one seed");
  if (a.study == "norms" && a.backend_given)
    throw std::invalid_argument("--backend applies to `sweep precision`; the norms study runs the float64 reference only");
  if (!a.out_dir.empty()) require_writable_directory(a.out_dir);
  if (!a.out_dir.empty()) {
    const std::string stem = "sweep_" + a.study;
    remove_stale(a.out_dir, {(stem + ".json").c_str(), (stem + ".md").c_str()});
  }
  const ProgressSink progress = make_progress();
  std::string md;
  nlohmann::json json;
  bool passed = true;
  if (a.study == "norms" && a.windows > 0) {
    NormTrainingOptions options;
    options.windows = a.windows;
    options.seed = seed;
    const NormTraining training = run_norm_training(options, progress);
    md = norm_training_markdown(training);
    json = norm_training_json(training);
    passed = training.passed();
  } else if (a.study == "norms") {
    NormSweepOptions options;
    options.seeds = a.seeds;
    options.seed = seed;
    const NormSweep sweep = run_norm_sweep(options, progress);
    md = norm_sweep_markdown(sweep);
    json = norm_sweep_json(sweep);
  } else {
    std::unique_ptr<Backend> backend = make_backend(a.backend);
    PrecisionSweepOptions options;
    options.seeds = a.seeds;
    options.seed = seed;
    const PrecisionSweep sweep = run_precision_sweep(options, *backend, progress);
    md = precision_sweep_markdown(sweep);
    json = precision_sweep_json(sweep);
  }
  end_progress();
  std::cout << md;
  if (!a.out_dir.empty()) {
    const std::string stem = "sweep_" + a.study;
    write_text(std::filesystem::path(a.out_dir) / (stem + ".json"), json.dump(2) + "\n");
    write_text(std::filesystem::path(a.out_dir) / (stem + ".md"), md);
    std::cout << "wrote " << a.out_dir << "/" << stem << ".json, " << stem << ".md\n";
  }
  return passed ? kExitPass : kExitFail;
}

struct SelfTestArgs {
  std::string backend = "cpu";
  std::string seed = "1";
  int cases = 100;
  long campaign = 0;
  long campaign_mutant_cases = 2000;
  int threads = 2;
  std::string size = "small";
  std::string out_dir;
  std::string suite = "default";
  std::string config_file;  // selftest --config: these scenarios only
  double timeout = kDefaultTimeout;
  bool cases_given = false, size_given = false, timeout_given = false, campaign_given = false, suite_given = false;
  std::uint64_t command = 0;
};

void write_selftest(const std::string& out_dir, const SelfTestReport& report) {
  write_text(std::filesystem::path(out_dir) / "selftest.json", selftest_json(report).dump(2) + "\n");
  write_text(std::filesystem::path(out_dir) / "selftest.md", selftest_markdown(report));
  std::cout << "wrote " << out_dir << "/selftest.json, selftest.md\n";
}

// `mpirun -np W gradeq selftest --suite data_parallel`: the data-parallel
// mutants against the data-parallel checks.
int run_data_parallel_selftest_command(const SelfTestArgs& a) {
  const auto refuse = [](bool given, const char* option) {
    if (given)
      throw std::invalid_argument(std::string(option) + " does not apply to the data_parallel self-test: it runs the "
                                                        "named scenarios of the suite against each mutant");
  };
  refuse(a.size_given, "--size");
  refuse(a.campaign_given, "--campaign");
  const std::unique_ptr<Communicator> comm = make_communicator(a.timeout);
  const bool root = comm->rank() == 0;
  DataParallelOptions options;
  const bool good = agree_input_is_good(*comm, a.command, [&] {
    options.seed = parse_seed(a.seed);
    options.cases = a.cases;
    if (comm->size() < 2)
      throw std::invalid_argument("the data-parallel self-test needs at least 2 ranks (its bugs live between "
                                  "ranks): run it as `mpirun -np 2 gradeq selftest --suite data_parallel`");
    require_data_parallel_suite(options, comm->size());
    if (root && !a.out_dir.empty()) require_writable_directory(a.out_dir);
    if (root && !a.out_dir.empty()) remove_stale(a.out_dir, {"selftest.json", "selftest.md"});
  });
  if (!good) return kExitUsage;
  try {
    std::unique_ptr<Backend> backend = make_backend(a.backend);
    if (root)
      std::cout << fmt::format("gradeq selftest: backend {}, data_parallel suite on {} ranks ({}), seed {}\n",
                               backend->name(), comm->size(), comm->name(), options.seed);
    const SelfTestReport report =
        run_data_parallel_selftest(options, *backend, *comm, root ? make_progress() : ProgressSink{});
    int code = kExitPass;
    if (root) {
      end_progress();
      std::cout << selftest_summary(report);
      if (!a.out_dir.empty()) write_selftest(a.out_dir, report);
      code = report.passed() ? kExitPass : kExitFail;
    }
    return comm->broadcast(code);
  } catch (...) {
    const int code = report_error(std::current_exception(), comm->size() > 1 ? comm->rank() : -1);
    comm->abort(code);
    return code;
  }
}

int run_selftest_command(const SelfTestArgs& a) {
  if (a.suite == "data_parallel") return run_data_parallel_selftest_command(a);
  if (a.timeout_given) throw std::invalid_argument("--timeout applies to the data_parallel self-test only");
  if (!a.config_file.empty()) {
    // Its scenarios only: the options of the generated cases do not apply.
    for (const auto& [given, option] : {std::pair{a.suite_given, "--suite"}, std::pair{a.cases_given, "--cases"},
                                        std::pair{a.size_given, "--size"}, std::pair{a.campaign_given, "--campaign"}})
      if (given)
        throw std::invalid_argument(std::string(option) + " does not apply to selftest --config (its scenarios only, "
                                                          "against every mutant)");
  }
  const std::uint64_t seed = parse_seed(a.seed);
  if (!replayed_properties().empty())
    throw std::invalid_argument("selftest runs every property against every mutant; RC_PARAMS replays a failure "
                                "(reproduce=...): unset it, or replay with `check --property`");
  if (!a.out_dir.empty()) require_writable_directory(a.out_dir);
  if (!a.out_dir.empty()) remove_stale(a.out_dir, {"selftest.json", "selftest.md"});
  std::unique_ptr<Backend> backend = make_backend(a.backend);
  SelfTestOptions options;
  options.seed = seed;
  options.cases = a.cases;
  options.campaign_cases = a.campaign;
  options.campaign_mutant_cases = a.campaign_mutant_cases;
  options.threads = a.threads;
  options.size = size_tier_of(a.size_given ? a.size : (a.suite == "scale" ? "large" : "small"));
  options.suite = a.suite;
  if (a.suite == "scale") options.scenarios = scale_scenarios();
  if (!a.config_file.empty()) {
    options.scenarios = load_scenarios(a.config_file);
    options.scenarios_only = true;
    options.suite = a.config_file;
  }
  const ProgressSink progress = make_progress();
  const SelfTestReport report = run_selftest(options, *backend, progress);
  end_progress();
  std::cout << selftest_summary(report);
  if (!a.out_dir.empty()) write_selftest(a.out_dir, report);
  return report.passed() ? kExitPass : kExitFail;
}

int run_list(const std::string& what) {
  std::cout << catalogue_listing(make_catalogue(), what);
  return kExitPass;
}

}  // namespace

int run_cli(int argc, char** argv) {
  set_up_process(argc, argv);
  const std::string program = argc > 0 && argv[0] && *argv[0] ? argv[0] : "gradeq";
  CLI::App app{"gradeq: do N loss-scaled micro-batches give the same gradients, step and weights as one batch?"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("gradeq ") + GRADEQ_VERSION);

  CheckArgs check_args;
  CLI::App* check = app.add_subcommand("check", "Run the gate (default suite and properties); exit 0 pass, 1 fail");
  add_check_options(*check, check_args);
  check->add_option("--report", check_args.report_dir, "Also write report.json, report.md, report.html, junit.xml and plots/ here");

  CheckArgs report_args;
  std::string out_dir;
  CLI::App* report = app.add_subcommand("report", "Run the gate and write report.json, report.md, report.html (with plots), junit.xml");
  add_check_options(*report, report_args);
  report->add_option("--out", out_dir, "Directory for the reports")->required();

  VerifyArgs verify_args;
  CLI::App* verify = app.add_subcommand(
      "verify", "Judge an external run's window set (manifest.json + .npy, e.g. from python/gradeq_export)");
  verify->add_option("dir", verify_args.dir, "The window set's directory")->required();
  verify->add_option("--error-model", verify_args.error_model, "Error model: probabilistic (default) or deterministic")
      ->check(CLI::IsMember({"deterministic", "probabilistic"}));
  verify->add_option("--report", verify_args.report_dir, "Also write report.json, report.md, report.html, junit.xml and plots/ here");
  verify->add_option("--junit", verify_args.junit_file, "Also write JUnit XML to this file");
  add_memory_option(*verify, verify_args.max_memory);

  SweepArgs sweep_args;
  CLI::App* sweep = app.add_subcommand("sweep", "Studies: normalizer divergence by micro-batch size (norms), buffer error by N (precision)");
  sweep->add_option("study", sweep_args.study, "norms or precision")->required()->check(CLI::IsMember({"norms", "precision"}));
  CLI::Option* sweep_backend = add_backend_option(*sweep, sweep_args.backend, "Backend for the precision study");
  CLI::Option* sweep_seeds =
      sweep->add_option("--seeds", sweep_args.seeds, "Seeds per point (mean and spread)")->check(CLI::Range(1, 1000));
  sweep->add_option("--windows", sweep_args.windows,
                    "norms: train K windows (effective batch 32, micro-batches 32-2) accumulated and as one batch, "
                    "and compare the trajectories; without it, one window")
      ->check(CLI::Range(1L, 10000L));
  sweep->add_option("--seed", sweep_args.seed, "Run seed (any 64-bit value)");
  sweep->add_option("--out", sweep_args.out_dir, "Also write sweep_<study>.json and sweep_<study>.md here");

  SelfTestArgs selftest_args;
  CLI::App* selftest = app.add_subcommand("selftest", "Show the harness can fail: every property against every mutant");
  add_backend_option(*selftest, selftest_args.backend, "Backend the mutants wrap");
  selftest->add_option("--seed", selftest_args.seed, "Run seed (any 64-bit value)");
  selftest->add_option("--cases", selftest_args.cases, "Cases per property and mutant")->check(CLI::Range(1, 1000000));
  CLI::Option* campaign =
      selftest->add_option("--campaign", selftest_args.campaign, "Also run a calibration campaign of this many cases")
          ->check(CLI::Range(1L, 100000000L));
  selftest->add_option("--campaign-mutant-cases", selftest_args.campaign_mutant_cases,
                       "Cases each mutant sees in the campaign")
      ->check(CLI::Range(1L, 100000000L))
      ->needs(campaign);
  selftest->add_option("--threads", selftest_args.threads, "Worker threads for the campaign")
      ->check(CLI::Range(1, 64))
      ->needs(campaign);
  selftest->add_option("--out", selftest_args.out_dir, "Write selftest.json and selftest.md here");
  add_size_option(*selftest, selftest_args.size);
  selftest->add_option("--suite", selftest_args.suite,
                       "default (every property against the single-process mutants), scale (the same on large "
                       "shapes, and the scale suite's scenarios against them) or data_parallel (the data-parallel "
                       "mutants, under mpirun -np W with W >= 2)")
      ->check(CLI::IsMember({"default", "scale", "data_parallel"}));
  selftest->add_option("--config", selftest_args.config_file,
                       "Only this TOML file's scenarios: each on correct code and against every single-process "
                       "mutant, with each mutant's detecting err/bound and separation")
      ->check(CLI::ExistingFile);
  add_timeout_option(*selftest, selftest_args.timeout);

  PlanArgs plan_args;
  CLI::App* plan = app.add_subcommand(
      "plan", "Choose the micro-batch and N for a memory budget and an effective batch, and check that split");
  plan->add_option("--config", plan_args.config_file, "The model and procedure (a scenario TOML file)")
      ->required()
      ->check(CLI::ExistingFile);
  plan->add_option("--scenario", plan_args.scenario, "The scenario of --config to plan (needed when it has several)");
  plan->add_option("--budget", plan_args.budget, "Memory for one process: 8GiB, 512MiB, 2GB, 1e9 (bytes)")->required();
  plan->add_option("--effective-batch", plan_args.effective_batch, "Samples per optimizer step")->required();
  plan->add_option("--margin", plan_args.margin, "Fraction of the budget kept free (default 0.1)");
  plan->add_option("--ranks", plan_args.ranks, "Also predict per-rank bytes on this many data-parallel ranks")
      ->check(CLI::Range(2L, 1L << 20));
  add_backend_option(*plan, plan_args.backend, "Backend to measure and check on");
  plan->add_option("--error-model", plan_args.error_model, "Error model: probabilistic (default) or deterministic")
      ->check(CLI::IsMember({"deterministic", "probabilistic"}));
  plan->add_option("--json", plan_args.json_file, "Also write the plan as JSON to this file");

  std::string list_what = "all";
  CLI::App* list = app.add_subcommand("list", "List scenarios, properties, mutants and backends");
  list->add_option("what", list_what, "scenarios, properties, mutants, backends or all")
      ->check(CLI::IsMember({"scenarios", "properties", "mutants", "backends", "all"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitPass;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return kExitPass;
  } catch (const CLI::CallForVersion&) {
    std::cout << "gradeq " << GRADEQ_VERSION << "\n";
    return kExitPass;
  } catch (const CLI::ParseError& e) {
    std::cerr << "gradeq: " << e.what() << "\nRun `gradeq --help` for usage.\n";
    return kExitUsage;
  }

  // Which options were given (some do not apply to every suite), and the
  // command line every rank of a data-parallel run must share.
  const auto given = [](CLI::App* cmd, const char* option) { return cmd->get_option(option)->count() > 0; };
  for (auto [cmd, args] : {std::pair{check, &check_args}, std::pair{report, &report_args}}) {
    args->cases_given = given(cmd, "--cases");
    args->size_given = given(cmd, "--size");
    args->timeout_given = given(cmd, "--timeout");
  }
  selftest_args.cases_given = given(selftest, "--cases");
  selftest_args.size_given = given(selftest, "--size");
  selftest_args.timeout_given = given(selftest, "--timeout");
  selftest_args.campaign_given = given(selftest, "--campaign");
  selftest_args.suite_given = given(selftest, "--suite");
  check_args.command = report_args.command = selftest_args.command = command_line_hash(argc, argv);

  try {
    // Under mpirun with several ranks only the data-parallel suite runs:
    // anything else would run W times side by side.
    const char* ranks = std::getenv("OMPI_COMM_WORLD_SIZE");
    const bool data_parallel = (*check && check_args.data_parallel_run()) ||
                               (*report && report_args.data_parallel_run()) ||
                               (*selftest && selftest_args.suite == "data_parallel");
    if (ranks && std::atoi(ranks) > 1 && !data_parallel)
      throw std::invalid_argument(std::string("started as one of ") + ranks +
                                  " ranks by mpirun: only data-parallel runs (`check --suite data_parallel`, "
                                  "`check --config FILE --data-parallel`, `selftest --suite data_parallel`) run across "
                                  "ranks");
    if (*check) {
      const std::optional<std::string> dir =
          check_args.report_dir.empty() ? std::nullopt : std::optional<std::string>(check_args.report_dir);
      return run_check(check_args, dir, program);
    }
    if (*report) return run_check(report_args, out_dir, program);
    if (*list) return run_list(list_what);
    if (*verify) return run_verify_command(verify_args);
    if (*sweep) {
      sweep_args.backend_given = sweep_backend->count() > 0;
      sweep_args.seeds_given = sweep_seeds->count() > 0;
      return run_sweep(sweep_args);
    }
    if (*selftest) return run_selftest_command(selftest_args);
    if (*plan) return run_plan_command(plan_args);
  } catch (...) {
    return report_error(std::current_exception(), -1);
  }
  return kExitUsage;
}

}  // namespace gradeq
