// data_parallel_gate.cpp — the data-parallel gate and its self-test.
#include "harness/gate/data_parallel_gate.h"

#include <array>
#include <chrono>
#include <functional>
#include <stdexcept>

#include "harness/core/data_parallel_mutants.h"
#include "harness/core/suite.h"
#include "properties/generators.h"
#include "properties/property_runner.h"

namespace gradeq {
namespace {

constexpr std::array<ShardMode, 2> kModes = {ShardMode::replicated, ShardMode::sharded};

// What one pass over the suite found, complete on rank 0.
struct Outcome {
  std::vector<ScenarioResult> scenarios;  // replicated, sharded for each scenario
  PropertyRun rank_consistency, sharded_agreement, random;
};

std::vector<ScenarioSpec> selected(const DataParallelOptions& options) {
  const std::vector<ScenarioSpec>& suite = options.suite.empty() ? data_parallel_scenarios() : options.suite;
  if (options.scenarios.empty()) return suite;
  std::vector<ScenarioSpec> out;
  for (const std::string& name : options.scenarios) {
    const ScenarioSpec* s = find_scenario(suite, name);
    if (!s) throw std::invalid_argument("unknown scenario '" + name + "' (see `gradeq list scenarios`)");
    out.push_back(*s);
  }
  return out;
}

ScenarioSpec spec_for(const ScenarioSpec& base, const DataParallelOptions& options, int ranks, ShardMode mode) {
  ScenarioSpec spec = data_parallel_spec(base, ranks, mode);
  spec.seed = mix_seed(options.seed, base.seed);
  spec.name = base.name + "/" + shard_mode_name(mode);
  return spec;
}

PropertyRun named_check(const std::string& name) {
  PropertyRun p;
  p.name = name;
  p.passed = true;
  return p;
}

void fail(PropertyRun& p, const std::string& message) {
  if (!p.passed) return;  // the first failure is the one reported
  p.passed = false;
  p.message = message;
}

// Window 0 starts from the initial state in both modes, and in exact
// arithmetic both compute the same update: each mode's kernel run is within
// its bound of its reference, so they are within the sum of the bounds of
// each other (the bounds include the references' own float64 error).
void check_agreement(const std::string& scenario, const Runs& replicated, const Runs& sharded, PropertyRun& check) {
  if (replicated.r_acc_at_k_acc.windows.empty() || sharded.r_acc_at_k_acc.windows.empty()) return;
  const ReferenceWindow& r = replicated.r_acc_at_k_acc.windows.front();
  const ReferenceWindow& s = sharded.r_acc_at_k_acc.windows.front();
  for (const ReferenceTensor& e : r.tensors) {
    const ReferenceTensor* e_sharded = find_optional(s, e.name);
    if (!e_sharded) continue;
    const std::vector<double> bound_r = kernel_bounds(e), bound_s = kernel_bounds(*e_sharded);
    std::vector<double> bound(bound_r.size());
    for (std::size_t i = 0; i < bound.size(); ++i) bound[i] = bound_r[i] + bound_s[i];
    const TensorCheck c =
        compare_tensor(e.name, e.rows, e.cols, DType::f32, find_tensor(replicated.k_acc.windows.front(), e.name).values,
                       find_tensor(sharded.k_acc.windows.front(), e.name).values, bound);
    check.worst_ratio = std::max(check.worst_ratio, c.worst_ratio);
    if (!c.passed()) fail(check, scenario + ", window 0, " + e.name + ": sharded vs replicated: " + c.failure_reason());
  }
}

// RandomDataParallel: one generated case, replicated on every rank. Each
// rank runs its part; rank 0 judges and its outcome is every rank's, so
// that RapidCheck takes the same path (shrinking included) on all of them.
Evidence random_case(const ScenarioSpec& base, PropertyContext& ctx, Communicator& comm) {
  const Scenario scenario = materialize(data_parallel_spec(base, comm.size(), ShardMode::replicated));
  const Runs runs = execute_data_parallel(scenario, *ctx.backend, comm, ctx.loop, ctx.model);
  const std::string difference = rank_difference(runs.k_acc, comm);
  Evidence e;
  int outcome = 0;  // bit 0: holds, bit 1: discard
  if (comm.rank() == 0) {
    const ScenarioResult r = judge(scenario, runs);
    for (const Verdict* v : {&r.math, &r.kernel, &r.accumulation})
      if (v->status == Status::pass) e.worst_ratio = std::max(e.worst_ratio, v->worst_ratio);
    if (r.vacuous || r.inconclusive()) {
      e.discard = true;
      e.discard_reason = r.vacuous ? "vacuous" : "ill-conditioned";
    } else if (!r.passed() || !difference.empty()) {
      e.holds = false;
      e.message = !r.passed() ? r.first_failure() : difference;
    }
    outcome = (e.holds ? 1 : 0) | (e.discard ? 2 : 0);
  }
  outcome = comm.broadcast(outcome);
  e.holds = (outcome & 1) != 0;
  e.discard = (outcome & 2) != 0;
  if (e.discard && e.discard_reason.empty()) e.discard_reason = "vacuous";  // its kind is rank 0's to count
  return e;
}

PropertyRun run_random_cases(const DataParallelOptions& options, Backend& backend, Communicator& comm,
                             const LoopFactory& loop) {
  const Property property{"RandomDataParallel",
                          "random mixed-precision cases replicated on the ranks: all three verdicts, ranks bitwise "
                          "consistent",
                          data_parallel_scenario(),
                          [&comm](const ScenarioSpec& s, PropertyContext& ctx) { return random_case(s, ctx, comm); },
                          true, 0.0};
  PropertyContext ctx{&backend, loop, options.model};
  PropertyRunConfig config;
  config.cases = options.cases;
  config.seed = name_seed(options.seed, property.name);
  return run_property(property, ctx, config);
}

Outcome run_checks(const DataParallelOptions& options, Backend& backend, Communicator& comm,
                   const std::function<LoopFactory(ShardMode)>& loop_for, const ProgressSink& progress,
                   const std::string& label) {
  const std::vector<ScenarioSpec> suite = options.run_scenarios ? selected(options) : std::vector<ScenarioSpec>{};
  const int ranks = comm.size();
  require_data_parallel_suite(options, ranks);  // before anything runs, on every rank alike
  Outcome out{{}, named_check("RankConsistency"), named_check("ShardedAgreement"), {}};
  std::size_t done = 0;
  for (const ScenarioSpec& base : suite) {
    std::array<Runs, 2> runs;
    for (std::size_t m = 0; m < kModes.size(); ++m) {
      const ScenarioSpec spec = spec_for(base, options, ranks, kModes[m]);
      if (progress && comm.rank() == 0)
        progress("[" + std::to_string(++done) + "/" + std::to_string(2 * suite.size()) + "] " + label + spec.name +
                 " on " + std::to_string(ranks) + " ranks");
      const auto start = std::chrono::steady_clock::now();
      const Scenario scenario = materialize(spec);
      runs[m] = execute_data_parallel(scenario, backend, comm, loop_for(kModes[m]), options.model);
      const std::string difference = rank_difference(runs[m].k_acc, comm);
      if (comm.rank() != 0) continue;
      ScenarioResult result = judge(scenario, runs[m]);
      result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      out.scenarios.push_back(std::move(result));
      ++out.rank_consistency.cases;
      if (!difference.empty()) fail(out.rank_consistency, spec.name + ": " + difference);
    }
    if (comm.rank() != 0) continue;
    ++out.sharded_agreement.cases;
    check_agreement(base.name, runs[0], runs[1], out.sharded_agreement);
  }
  if (options.cases > 0) {
    if (progress && comm.rank() == 0)
      progress("[" + std::to_string(done) + "/" + std::to_string(2 * suite.size()) + "] " + label +
               "RandomDataParallel, " + std::to_string(options.cases) + " cases on " + std::to_string(ranks) +
               " ranks");
    out.random = run_random_cases(options, backend, comm, loop_for(ShardMode::replicated));
  } else {
    out.random = named_check("RandomDataParallel");
    out.random.ran = false;
    out.random.message = "not run: 0 cases";
  }
  return out;
}

// The check named `name` in `outcome`, as a PropertyRun: passed, its first
// failure, the scenarios it covered and their worst error/bound.
PropertyRun check_outcome(const Outcome& o, const std::string& name) {
  if (name == "RankConsistency") return o.rank_consistency;
  if (name == "ShardedAgreement") return o.sharded_agreement;
  if (name == "RandomDataParallel") return o.random;
  PropertyRun run = named_check(name);
  const std::string suffix = name == "DataParallelEquivalence" ? "/replicated" : "/sharded";
  for (const ScenarioResult& s : o.scenarios) {
    const std::string& n = s.spec.name;
    if (n.size() < suffix.size() || n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    ++run.cases;
    for (const Verdict* v : {&s.math, &s.kernel, &s.accumulation})
      if (v->status == Status::pass) run.worst_ratio = std::max(run.worst_ratio, v->worst_ratio);
    if (!s.passed()) fail(run, n + ": " + s.first_failure());
  }
  return run;
}

}  // namespace

std::uint64_t command_line_hash(int argc, const char* const* argv) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (int i = 1; i < argc; ++i)
    for (const char* c = argv[i];; ++c) {
      hash = (hash ^ static_cast<unsigned char>(*c)) * 0x100000001b3ULL;
      if (!*c) break;
    }
  return hash;
}

InputAgreement agree_on_input(Communicator& comm, std::uint64_t command, const std::function<void()>& validate) {
  std::string problem;
  try {
    validate();
  } catch (const std::invalid_argument& e) {
    problem = e.what();
  }
  const std::vector<std::uint64_t> commands = comm.all_gather(command);
  for (std::size_t r = 1; r < commands.size() && problem.empty(); ++r)
    if (commands[r] != commands[0])
      problem = "rank " + std::to_string(r) + " was started with other arguments than rank 0: every rank of a "
                "data-parallel run must run the same command";
  const std::vector<std::uint64_t> bad = comm.all_gather(problem.empty() ? 0 : 1);
  InputAgreement agreement;
  for (std::uint64_t b : bad)
    if (b) agreement.good = false;
  if (comm.rank() == 0 || bad[0] == 0) agreement.problem = problem;
  return agreement;
}

void require_data_parallel_suite(const DataParallelOptions& options, int ranks) {
  for (const ScenarioSpec& base : selected(options))
    for (ShardMode mode : kModes) require_data_parallel(spec_for(base, options, ranks, mode), ranks, mode);
}

const std::vector<std::string>& data_parallel_check_names() {
  static const std::vector<std::string> names = {"DataParallelEquivalence", "ShardedEquivalence", "RankConsistency",
                                                 "ShardedAgreement", "RandomDataParallel"};
  return names;
}

CheckReport run_data_parallel_gate(const DataParallelOptions& options, Backend& backend, Communicator& comm,
                                   const ProgressSink& progress) {
  const auto start = std::chrono::steady_clock::now();
  CheckReport report = begin_report(backend.name(), options.seed, options.cases, options.model, options.program);
  report.ranks = comm.size();
  Outcome o = run_checks(options, backend, comm, [&](ShardMode m) { return data_parallel_loop(comm, m); }, progress, "");
  if (comm.rank() == 0) {
    report.scenarios = std::move(o.scenarios);
    if (options.run_scenarios) report.properties = {o.rank_consistency, o.sharded_agreement};
    if (o.random.ran) report.properties.push_back(o.random);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

SelfTestReport run_data_parallel_selftest(const DataParallelOptions& options, Backend& backend, Communicator& comm,
                                          const ProgressSink& progress) {
  if (comm.size() < 2)
    throw std::invalid_argument("the data-parallel self-test needs at least 2 ranks (its bugs live between ranks): "
                                "run it as `mpirun -np 2 gradeq selftest --suite data_parallel`");
  const auto start = std::chrono::steady_clock::now();
  SelfTestReport report;
  report.backend = backend.name();
  report.seed = options.seed;
  report.suite = "data_parallel";
  report.ranks = comm.size();
  report.cases = options.cases;
  const auto correct = [&](ShardMode m) { return data_parallel_loop(comm, m); };
  const Outcome baseline = run_checks(options, backend, comm, correct, progress, "correct code: ");
  for (const std::string& name : data_parallel_check_names()) report.correct.push_back(check_outcome(baseline, name));
  for (const DataParallelMutant& m : data_parallel_mutants()) {
    const auto loop_for = [&](ShardMode mode) -> LoopFactory {
      if (mode != m.mode) return data_parallel_loop(comm, mode);
      return [&](Backend& b) { return m.make(b, comm); };
    };
    const Outcome o = run_checks(options, backend, comm, loop_for, progress, m.id + ": ");
    if (comm.rank() != 0) continue;
    MutantSummary summary{m.id, m.bug, m.source, {}};
    for (const std::string& name : data_parallel_check_names()) {
      KillCell cell;
      cell.mutant = m.id;
      cell.property = name;
      cell.run = check_outcome(o, name);
      cell.caught = cell.run.ran && !cell.run.passed;
      report.cells.push_back(cell);
      if (cell.caught) summary.caught_by.push_back(name);
    }
    report.mutants.push_back(summary);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace gradeq
