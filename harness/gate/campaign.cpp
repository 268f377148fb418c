// campaign.cpp — the calibration campaign: many random cases on correct
// code and on every mutant, on a pool of worker threads (one host backend
// each), with the worst error/bound of correct code, its histogram and
// each mutant's separation from it.
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "harness/gate/selftest_internal.h"
#include "harness/core/mutants.h"
#include "harness/core/backends.h"
#include "reference/parallel.h"

namespace gradeq::selftest_internal {
Campaign run_campaign(const SelfTestOptions& o, Backend& base, const ProgressSink& progress) {
  const auto start = std::chrono::steady_clock::now();
  Campaign c;
  // Histogram bins, for reading only (no verdict uses them): decades below
  // 0.01, tenths up to 1/F = 0.5, then up to the verdict threshold 1.
  c.bin_edges = {0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.2, 0.3, 0.4, 0.5, 1.0, HUGE_VAL};
  c.histogram.assign(c.bin_edges.size() - 1, 0);
  const std::vector<const Property*> properties = backend_properties();
  // Cases are drawn up front (RapidCheck generators are used from one
  // thread), round-robin over the properties that run the backend.
  struct Case {
    const Property* property;
    ScenarioSpec spec;
  };
  std::vector<Case> cases;
  for (long i = 0; i < o.campaign_cases; ++i) {
    const Property* p = properties[static_cast<std::size_t>(i) % properties.size()];
    const rc::Random random(mix_seed(o.seed, static_cast<std::uint64_t>(i)));
    cases.push_back({p, p->generator(random, static_cast<int>(i % 100)).value()});
  }
  if (progress) progress("campaign: " + std::to_string(cases.size()) + " cases on correct code");
  std::mutex lock;
  // One backend per thread: the host backend is not shared between threads.
  std::vector<std::unique_ptr<Backend>> backends;
  const bool host = is_host_backend(base.name());
  for (int t = 0; host && t < o.threads; ++t) backends.push_back(make_backend(base.name()));
  auto backend_for = [&](long t) -> Backend& { return host ? *backends[static_cast<std::size_t>(t)] : base; };
  const int threads = host ? o.threads : 1;
  ref::parallel_for(static_cast<long>(cases.size()), threads, [&](long i, long t) {
    PropertyContext ctx{&backend_for(t), correct_loop(), o.model};
    const Evidence e = cases[i].property->check(cases[i].spec, ctx);
    std::lock_guard<std::mutex> guard(lock);
    ++c.cases;
    if (progress && c.cases % std::max(1L, o.campaign_cases / 200) == 0)
      progress(fmt::format("campaign: {}/{} cases on correct code, {} false alarms, worst error/bound {:.3f}", c.cases,
                           o.campaign_cases, c.false_alarms, c.worst_ratio));
    if (!e.holds) {
      ++c.false_alarms;
      c.false_alarm_cases.push_back(cases[i].property->name + ": " + describe_scenario(cases[i].spec) + " — " + e.message);
      return;
    }
    if (e.discard) {
      ++c.discarded;
      return;
    }
    if (e.worst_ratio >= c.worst_ratio) {
      c.worst_ratio = e.worst_ratio;
      c.worst_case = describe_scenario(cases[i].spec);
      c.worst_property = cases[i].property->name;
    }
    for (std::size_t b = 0; b + 1 < c.bin_edges.size(); ++b)
      if (e.worst_ratio >= c.bin_edges[b] && e.worst_ratio < c.bin_edges[b + 1]) ++c.histogram[b];
  });
  const long per_mutant = std::min<long>(o.campaign_mutant_cases, static_cast<long>(cases.size()));
  for (const Mutant& m : mutants_for(base)) {
    if (progress) progress("campaign: mutant " + m.id);
    CampaignMutant cm;
    cm.id = m.id;
    std::vector<std::unique_ptr<MutantRig>> rigs;
    for (int t = 0; t < threads; ++t) rigs.push_back(std::make_unique<MutantRig>(m, backend_for(t)));
    ref::parallel_for(per_mutant, threads, [&](long i, long t) {
      PropertyContext ctx{rigs[static_cast<std::size_t>(t)]->backend, rigs[static_cast<std::size_t>(t)]->loop, o.model};
      const Evidence e = cases[i].property->check(cases[i].spec, ctx);
      const PrecisionSpec& precision = cases[i].spec.precision;
      const bool float32 = precision.compute == DType::f32 && precision.accumulate == DType::f32;
      std::lock_guard<std::mutex> guard(lock);
      ++cm.cases;
      cm.float32_cases += float32;
      if (e.holds) return;
      ++cm.detected;
      const bool marginal = e.worst_ratio < kSeparationGoal * c.worst_ratio;
      cm.marginal += marginal;
      const std::string description = cases[i].property->name + ": " + describe_scenario(cases[i].spec);
      if (e.worst_ratio < cm.smallest_detecting_ratio) {
        cm.smallest_detecting_ratio = e.worst_ratio;
        cm.smallest_case = description;
      }
      if (!float32) return;
      ++cm.float32_detected;
      cm.float32_marginal += marginal;
      if (e.worst_ratio < cm.float32_smallest_ratio) {
        cm.float32_smallest_ratio = e.worst_ratio;
        cm.float32_smallest_case = description;
      }
    });
    cm.separation = c.worst_ratio > 0.0 ? cm.smallest_detecting_ratio / c.worst_ratio : HUGE_VAL;
    cm.float32_separation = c.worst_ratio > 0.0 ? cm.float32_smallest_ratio / c.worst_ratio : HUGE_VAL;
    c.mutants.push_back(cm);
  }
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return c;
}

}  // namespace gradeq::selftest_internal
