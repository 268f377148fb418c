// selftest.cpp — kill matrix, B16 threshold, calibration campaign.
#include "harness/cli/selftest.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "harness/tolerance.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/mutants/mutants.h"
#include "properties/generators.h"

namespace gradeq {
namespace {

std::vector<const Property*> backend_properties() {
  std::vector<const Property*> out;
  for (const Property& p : default_properties())
    if (p.exercises_backend) out.push_back(&p);
  return out;
}

long parameter_count(const ScenarioSpec& s) {
  long n = 0;
  for (const ref::ParameterInfo& p : ref::parameter_layout(s.model)) n += p.rows * p.cols;
  return n;
}

// The backend a mutant runs on: the one under test, wrapped if the bug
// lives in a kernel.
struct MutantRig {
  std::unique_ptr<Backend> wrapped;
  Backend* backend = nullptr;
  LoopFactory loop;

  MutantRig(const Mutant& m, Backend& base) {
    if (m.wrap_backend) wrapped = m.wrap_backend(base);
    backend = wrapped ? wrapped.get() : &base;
    loop = m.loop ? m.loop : correct_loop();
  }
};

std::uint64_t name_seed(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return mix_seed(seed, h);
}

// B16 on a family of scenarios: a float32 buffer declared, N micro-batches.
B16Threshold b16_threshold(DType compute, Backend& base, const ErrorModel& model) {
  B16Threshold t;
  t.compute = compute;
  const Mutant& b16 = *find_mutant("B16");
  MutantRig rig(b16, base);
  for (long n : {1L, 2L, 4L, 8L, 16L, 32L, 64L, 128L, 256L, 512L, 1024L}) {
    ScenarioSpec s;
    s.name = "B16 threshold";
    s.model.input_features = 16;
    s.model.layers = {{ref::LayerKind::linear, 32}, {ref::LayerKind::gelu, 0}, {ref::LayerKind::linear, 8}};
    s.split = {std::vector<long>(static_cast<std::size_t>(n), 2)};
    s.precision.compute = compute;
    s.seed = 5;
    const ScenarioResult r = check_scenario(s, *rig.backend, rig.loop, model);
    t.points.push_back({n, !r.passed(), std::max(r.accumulation.worst_ratio, r.kernel.worst_ratio)});
  }
  for (std::size_t i = t.points.size(); i-- > 0;) {
    if (!t.points[i].caught) break;
    t.first_caught = t.points[i].micro_batches;
  }
  return t;
}

// Runs `evaluate(case, thread)` for every case on `threads` threads.
template <class Evaluate>
void parallel_for(long count, int threads, Evaluate&& evaluate) {
  std::atomic<long> next{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < std::max(threads, 1); ++t)
    workers.emplace_back([&, t] {
      for (long i = next++; i < count; i = next++) evaluate(i, t);
    });
  for (auto& w : workers) w.join();
}

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
  for (int t = 0; t < o.threads; ++t) backends.push_back(std::make_unique<CpuBackend>());
  const bool host = base.name() == "cpu";
  auto backend_for = [&](int t) -> Backend& { return host ? *backends[static_cast<std::size_t>(t)] : base; };
  const int threads = host ? o.threads : 1;
  parallel_for(static_cast<long>(cases.size()), threads, [&](long i, int t) {
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
    parallel_for(per_mutant, threads, [&](long i, int t) {
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

}  // namespace

std::vector<std::string> SelfTestReport::survivors() const {
  std::vector<std::string> out;
  for (const MutantSummary& m : mutants)
    if (m.caught_by.empty()) out.push_back(m.id);
  return out;
}

bool Campaign::calibrated() const { return worst_ratio <= 1.0 / kFormulationFactor; }

bool SelfTestReport::passed() const {
  for (const PropertyRun& p : correct)
    if (!p.passed) return false;
  if (campaign && (campaign->false_alarms > 0 || !campaign->calibrated())) return false;
  return survivors().empty();
}

SelfTestReport run_selftest(const SelfTestOptions& o, Backend& backend, const ProgressSink& progress) {
  const auto start = std::chrono::steady_clock::now();
  SelfTestReport report;
  report.backend = backend.name();
  report.seed = o.seed;
  report.cases = o.cases;
  const std::vector<const Property*> properties = backend_properties();
  PropertyRunConfig config;
  config.cases = o.cases;
  for (const Property* p : properties) {
    if (progress) progress("selftest: correct code, " + p->name);
    PropertyContext ctx{&backend, correct_loop(), o.model};
    config.seed = name_seed(o.seed, p->name);
    report.correct.push_back(run_property(*p, ctx, config));
  }
  for (const Mutant& m : mutants_for(backend)) {
    MutantSummary summary{m.id, m.bug, m.source, {}};
    MutantRig rig(m, backend);
    for (const Property* p : properties) {
      if (progress) progress("selftest: mutant " + m.id + ", " + p->name);
      PropertyContext ctx{rig.backend, rig.loop, o.model};
      config.seed = name_seed(o.seed, m.id + "/" + p->name);
      KillCell cell{m.id, p->name, false, run_property(*p, ctx, config), 0, 0};
      cell.caught = !cell.run.passed && cell.run.counterexample_spec.has_value();
      if (cell.run.counterexample_spec) {
        cell.counterexample_samples = total_samples(cell.run.counterexample_spec->split);
        cell.counterexample_parameters = parameter_count(*cell.run.counterexample_spec);
      }
      if (cell.caught) summary.caught_by.push_back(p->name);
      report.cells.push_back(std::move(cell));
    }
    report.mutants.push_back(summary);
  }
  if (progress) progress("selftest: B16 threshold");
  for (DType compute : {DType::f32, DType::bf16}) report.b16.push_back(b16_threshold(compute, backend, o.model));
  if (o.campaign_cases > 0) report.campaign = run_campaign(o, backend, progress);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace gradeq
