// ceiling.h — what the benchmark executables share: random inputs, and a
// console reporter that turns each rate into a fraction of the ceiling
// measured in the same run. A benchmark whose name starts with
// "BM_Ceiling" sets the ceiling for its counter (bytes_per_s or
// flops_per_s); every later benchmark reporting that counter gets
// fraction_of_ceiling. Register the ceilings first.
#pragma once

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace gradeq::bench {

inline std::vector<float> random_values(long n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

class CeilingReporter : public benchmark::ConsoleReporter {
 public:
  using benchmark::ConsoleReporter::ConsoleReporter;
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> out = runs;
    for (Run& r : out) {
      const bool is_ceiling = r.benchmark_name().starts_with("BM_Ceiling");
      for (const char* rate : {"bytes_per_s", "flops_per_s"}) {
        const auto it = r.counters.find(rate);
        if (it == r.counters.end()) continue;
        const double v = static_cast<double>(it->second);
        double& ceiling = ceilings_[rate];
        if (is_ceiling) {
          ceiling = std::max(ceiling, v);
        } else if (ceiling > 0) {
          r.counters["fraction_of_ceiling"] = benchmark::Counter(v / ceiling);
        }
      }
    }
    ConsoleReporter::ReportRuns(out);
  }

 private:
  std::map<std::string, double> ceilings_;
};

inline int run_benchmarks(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Colour only on a terminal (logs stay plain text).
  CeilingReporter reporter(isatty(STDOUT_FILENO) == 1 ? benchmark::ConsoleReporter::OO_ColorTabular : benchmark::ConsoleReporter::OO_Tabular);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace gradeq::bench
