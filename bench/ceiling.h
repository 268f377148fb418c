// ceiling.h — what the benchmark executables share: random inputs, and a
// console reporter that turns each rate into a fraction of the ceiling
// measured in the same run.
//
// A rate is a counter whose name ends in "_per_s" (bytes_per_s,
// flops_per_s, f64_flops_per_s, ...). Its ceiling key is the counter name,
// followed by "@" and the benchmark's label when it has one (SetLabel):
// "bytes_per_s" for a bandwidth that does not depend on a shape,
// "flops_per_s@256x256x256" for the arithmetic rate of one GEMM shape. A
// benchmark whose name starts with "BM_Ceiling" sets the ceiling for each
// of its keys (the largest value seen); every later benchmark reporting a
// rate under the same key, counter name and label both, gets
// fraction_of_ceiling = rate / ceiling. Keys match exactly: a rate whose
// key has no ceiling gets no fraction. Register the ceilings first (and do
// not filter them out).
#pragma once

#include <benchmark/benchmark.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

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

// The label that keys a GEMM's ceiling to its shape: "rows x in x out".
inline std::string shape_label(long rows, long in, long out) {
  return std::to_string(rows) + "x" + std::to_string(in) + "x" + std::to_string(out);
}

class CeilingReporter : public benchmark::ConsoleReporter {
 public:
  using benchmark::ConsoleReporter::ConsoleReporter;
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> out = runs;
    for (Run& r : out) {
      // Repetitions' spread (stddev, cv) is not a rate.
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "mean" && r.aggregate_name != "median") continue;
      const bool is_ceiling = r.run_name.function_name.starts_with("BM_Ceiling");
      double fraction = -1.0;
      for (const auto& [name, counter] : r.counters) {
        if (!name.ends_with("_per_s")) continue;
        const std::string key = r.report_label.empty() ? name : name + "@" + r.report_label;
        const double v = static_cast<double>(counter);
        if (is_ceiling) {
          double& ceiling = ceilings_[key];
          ceiling = std::max(ceiling, v);
        } else if (const auto it = ceilings_.find(key); it != ceilings_.end() && it->second > 0) {
          fraction = v / it->second;
        }
      }
      if (fraction >= 0) r.counters["fraction_of_ceiling"] = benchmark::Counter(fraction);
    }
    ConsoleReporter::ReportRuns(out);
  }

 private:
  std::map<std::string, double> ceilings_;
};

inline int run_benchmarks(int argc, char** argv) {
#if defined(__GLIBC__)
  // Buffers allocated and freed every iteration (Eigen's GEMM packing
  // blocks) come from the heap and stay mapped, for every benchmark alike:
  // by default glibc maps and trims them afresh, page faults included,
  // until a large enough free raises its thresholds, so that a benchmark's
  // speed would depend on what ran before it.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Colour only on a terminal (logs stay plain text).
  CeilingReporter reporter(isatty(STDOUT_FILENO) == 1 ? benchmark::ConsoleReporter::OO_ColorTabular : benchmark::ConsoleReporter::OO_Tabular);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace gradeq::bench
