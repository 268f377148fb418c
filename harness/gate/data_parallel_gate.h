// data_parallel_gate.h — the data-parallel gate and its self-test, run by
// every rank of a Communicator (`mpirun -np W gradeq check --suite
// data_parallel`).
//
// Each scenario of the suite runs twice on the W ranks, replicated and
// sharded (harness/core/data_parallel.h), and is judged by the verdicts of
// harness/core/equivalence.h against the single-process full batch of the same
// global window; then a property runs the same verdicts replicated on
// random cases. Five named checks:
//   DataParallelEquivalence  every replicated run's verdicts pass
//   ShardedEquivalence       every sharded run's verdicts pass
//   RankConsistency          after every window, every rank holds bitwise
//                            the same parameters, gradient, optimizer state
//   ShardedAgreement         in the first window (both from the initial
//                            state) sharded and replicated agree within the
//                            sum of their bounds
//   RandomDataParallel       a RapidCheck property: random mixed-precision
//                            cases (data_parallel_scenario()) replicated on
//                            the W ranks pass all three verdicts and stay
//                            bitwise consistent across ranks; every rank
//                            generates and shrinks the same cases, and rank
//                            0's outcome decides each
// Rank 0 computes the references, judges and reports; the other ranks run
// their part of each window and receive the outcome. Before any of it the
// ranks agree that their input is good (agree_on_input).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/core/data_parallel.h"
#include "harness/gate/gate.h"
#include "harness/gate/selftest.h"
#include "harness/core/progress.h"

namespace gradeq {

struct DataParallelOptions {
  std::uint64_t seed = 1;
  std::vector<ScenarioSpec> suite;     // each split one rank's (data_parallel_spec); empty: the embedded suite
  std::vector<std::string> scenarios;  // empty: the whole suite
  int cases = 100;                     // of the RandomDataParallel property (0: not run)
  bool run_scenarios = true;           // false: the property only (`--property RandomDataParallel`)
  ErrorModel model;
  std::string program = "gradeq";
};

// ---- the ranks' agreement on their input, before any work

// The hash (FNV-1a) of a command line's arguments after the program's name:
// every rank of a data-parallel run must have been started with the same.
std::uint64_t command_line_hash(int argc, const char* const* argv);

struct InputAgreement {
  bool good = true;     // no rank found anything wrong
  std::string problem;  // what this rank is to say (empty: nothing)
};

// Collective; every rank calls it before any work. `validate` checks this
// rank's input and throws std::invalid_argument saying what is wrong (any
// other exception passes through); a rank whose `command` differs from rank
// 0's has a problem too. The ranks agree whether any found one, so that
// every rank stops by itself (as bad input, exit 2) without aborting the
// job, and one says why: rank 0, or when rank 0 found nothing, each rank
// that found something.
InputAgreement agree_on_input(Communicator& comm, std::uint64_t command, const std::function<void()>& validate);

// The named checks, in report order.
const std::vector<std::string>& data_parallel_check_names();

// std::invalid_argument, saying why, when a scenario of the selection is
// unknown or cannot run on `ranks` ranks (require_data_parallel).
void require_data_parallel_suite(const DataParallelOptions& options, int ranks);

// Collective. On rank 0 the full report: the scenarios (named
// "<scenario>/replicated" and "<scenario>/sharded") and the properties
// RankConsistency, ShardedAgreement and RandomDataParallel (DataParallelEquivalence and
// ShardedEquivalence are the scenarios' own verdicts). On the other ranks a
// report without results: the caller takes rank 0's outcome
// (Communicator::broadcast). Throws
// std::invalid_argument (on every rank alike) for a scenario that cannot
// run on this many ranks.
CheckReport run_data_parallel_gate(const DataParallelOptions& options, Backend& backend, Communicator& comm,
                                   const ProgressSink& progress = {});

// Collective. Correct code, then each mutant of data_parallel_mutants() in
// its mode (the other mode runs correct code), against the five checks.
// Needs at least 2 ranks (std::invalid_argument otherwise). The report is
// complete on rank 0 only, as for the gate.
SelfTestReport run_data_parallel_selftest(const DataParallelOptions& options, Backend& backend, Communicator& comm,
                                          const ProgressSink& progress = {});

}  // namespace gradeq
