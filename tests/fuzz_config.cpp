// fuzz_config.cpp — seeded mutations of the README's example config, each
// through the config reader and validation; every accepted one is then run
// (in a child process, killed at 10 s). Prints how many were refused,
// accepted and run, and fails on a hang, an internal error (any exception
// other than std::invalid_argument, or a child that dies), an accepted
// config that does not round-trip through the config keys, or one whose
// run throws.
//
//   gradeq_fuzz_config [MUTATIONS] [SEED]     (ctest: 1000; a long run: 10000)
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/core/config.h"
#include "harness/core/memory/reference_estimate.h"
#include "harness/core/equivalence.h"
#include "kernels/cpu/cpu_backend.h"

namespace {

using namespace gradeq;

// The README's example (README.md, "A config file").
const char* kExample = R"([[scenario]]
name = "my_mlp"
input_features = 16
positions = 8
layers = ["linear:32", "gelu", "layernorm", "linear:11"]
loss = "cross_entropy"
data = "padded_sequences"
split = [[3, 5, 2], [4, 4]]
learning_rate = 0.1
seed = 5
normalization = "global_count"
compute_dtype = "float32"
accumulate_dtype = "float32"
compensated = false
optimizer = "adamw"
betas = [0.9, 0.999]
eps = 1e-8
weight_decay = 0.01
clip_max_norm = 1.0
warmup_steps = 10
total_steps = 100
loss_scale = 65536
dynamic_loss_scale = true
growth_interval = 2000
checkpoint_every = 2
)";

const std::vector<std::string> kValues = {
    "0", "1", "-1", "2", "3", "7", "64", "1e9", "1000000000", "4611686018427387904", "9223372036854775807",
    "-9223372036854775808", "0.5", "-0.5", "1e-300", "1e300", "1e308", "inf", "-inf", "nan", "2.0", "65536.0",
    "0.0", "true", "false", "\"\"", "\"x\"", "\"float16\"", "\"bfloat16\"", "\"sgd\"", "\"adam\"", "\"mse\"",
    "\"linear:0\"", "[]", "[[]]", "[[1]]", "[[0, 2]]", "[[1000000, 1000000]]", "[\"relu\"]", "[\"batchnorm\"]",
    "[\"linear:+4\", \"relu\"]", "[\"groupnorm:3\", \"linear:2\"]", "[0.9]", "[1.0, 1.0]", "{}", "\"a\\nb\""};

std::string mutate(const std::string& text, std::mt19937_64& rng) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  const auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits && lines.size() > 1; ++e) {
    const std::size_t at = 1 + pick(lines.size() - 1);
    std::string& line = lines[at];
    const std::size_t eq = line.find(" = ");
    switch (rng() % 7) {
      case 0:
      case 1:
      case 2:  // a value replaced
        if (eq != std::string::npos) line = line.substr(0, eq + 3) + kValues[pick(kValues.size())];
        break;
      case 3: lines.erase(lines.begin() + static_cast<long>(at)); break;  // a key dropped
      case 4: lines.insert(lines.begin() + static_cast<long>(at), line); break;  // a key twice
      case 5:  // a character changed
        if (!line.empty()) line[pick(line.size())] = " =\"[],.0x#\n"[pick(11)];
        break;
      default:  // a key that may not belong
        lines.insert(lines.begin() + static_cast<long>(at),
                     std::string(std::vector<const char*>{"momentum", "nesterov", "dampening", "norm_eps", "tf32",
                                                          "batchnorm_momentum", "frobnicate"}[pick(7)]) +
                         " = " + kValues[pick(kValues.size())]);
    }
  }
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

// Runs the scenario in a child, killed after `limit`: 0 ran, 1 threw,
// 2 crashed, 3 hung.
int run_isolated(const ScenarioSpec& spec, std::chrono::seconds limit) {
  const pid_t child = fork();
  if (child == 0) {
    try {
      CpuBackend cpu;
      check_scenario(spec, cpu, correct_loop(), ErrorModel{});
      _exit(0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "  run threw: %s\n", e.what());
      _exit(1);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return 3;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status) == 0 ? 0 : 1;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const long mutations = argc > 1 ? std::atol(argv[1]) : 1000;
  const std::uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  std::mt19937_64 rng(seed);
  long refused = 0, accepted = 0, ran = 0, too_big = 0, internal = 0, not_round_trip = 0, run_failed = 0, hung = 0;
  double slowest_refusal = 0.0;
  for (long m = 0; m < mutations; ++m) {
    const std::string text = mutate(kExample, rng);
    std::vector<ScenarioSpec> specs;
    const auto start = std::chrono::steady_clock::now();
    try {
      specs = parse_scenarios(text, "mutation " + std::to_string(m));
    } catch (const std::invalid_argument&) {
      ++refused;
      slowest_refusal = std::max(slowest_refusal, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      continue;
    } catch (const std::exception& e) {
      ++internal;
      std::printf("INTERNAL (mutation %ld): %s\n%s\n", m, e.what(), text.c_str());
      continue;
    }
    ++accepted;
    for (const ScenarioSpec& s : specs) {
      try {
        if (describe_scenario(scenario_from_json(scenario_to_json(s), "round trip")) != describe_scenario(s)) {
          ++not_round_trip;
          std::printf("NOT ROUND-TRIP (mutation %ld):\n%s\n", m, text.c_str());
        }
      } catch (const std::exception& e) {
        ++not_round_trip;
        std::printf("NOT ROUND-TRIP (mutation %ld): %s\n%s\n", m, e.what(), text.c_str());
      }
      // What the gate would refuse by its estimate is not run here either.
      if (estimated_peak_bytes(s) > 2e9) {
        ++too_big;
        continue;
      }
      ++ran;
      switch (run_isolated(s, std::chrono::seconds(10))) {
        case 0: break;
        case 3:
          ++hung;
          std::printf("HUNG (mutation %ld):\n%s\n", m, text.c_str());
          break;
        default:
          ++run_failed;
          std::printf("RUN FAILED (mutation %ld):\n%s\n", m, text.c_str());
      }
    }
  }
  std::printf("config fuzz: %ld mutations (seed %llu): %ld refused (slowest %.3f s), %ld accepted, %ld run, %ld over the "
              "memory estimate; %ld internal errors, %ld not round-tripping, %ld runs failed, %ld hung\n",
              mutations, static_cast<unsigned long long>(seed), refused, slowest_refusal, accepted, ran, too_big,
              internal, not_round_trip, run_failed, hung);
  return internal + not_round_trip + run_failed + hung == 0 ? 0 : 1;
}
