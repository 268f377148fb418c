// memory_properties.cpp — the memory properties: what accumulation and
// activation checkpointing promise about a run's bytes on the backend
// (harness/core/memory/, docs/NUMERICS.md §13).
#include <cmath>
#include <cstring>
#include <sstream>

#include "harness/core/memory/loop_plan.h"
#include "properties/properties.h"

namespace gradeq {
namespace {

KernelRun run_loop(const ScenarioSpec& s, PropertyContext& ctx) {
  const Scenario scenario = materialize(s);
  return ctx.loop(*ctx.backend)->run(scenario, s.split);
}

// The same model and data kind with every window one of `micro_batches`
// micro-batches of `samples` samples.
ScenarioSpec with_split(const ScenarioSpec& s, long micro_batches, long samples) {
  ScenarioSpec out = s;
  out.split = equal_split(static_cast<long>(s.split.size()), micro_batches, samples);
  return out;
}

// Exact bytes, and readable ones where they differ: "123456 B (120.56 KiB)".
std::string bytes_text(double b) {
  const std::string exact = std::to_string(static_cast<long long>(b)) + " B";
  return std::abs(b) < 1024.0 ? exact : exact + " (" + format_bytes(b) + ")";
}

std::string percent(double fraction) {
  std::ostringstream os;
  os.precision(3);
  os << 100.0 * fraction << "%";
  return os.str();
}

void fail(Evidence& e, const std::string& message) {
  if (!e.holds) return;
  e.holds = false;
  e.message = message;
}

}  // namespace

Evidence peak_independent_of_n(const ScenarioSpec& s, PropertyContext& ctx) {
  const long b = s.split.front().front(), n = static_cast<long>(s.split.front().size());
  const double single = run_loop(with_split(s, 1, b), ctx).memory.peak;
  const double accumulated = run_loop(with_split(s, n, b), ctx).memory.peak;
  const double doubled = run_loop(with_split(s, 2 * n, b), ctx).memory.peak;
  // Between N and 2N micro-batches nothing may grow at all. Against one
  // micro-batch, a backend that caches workspace while it allocates
  // transient tensors inside an op can peak a few bytes higher once, on
  // the second micro-batch: that much is allowed (NUMERICS §13).
  Evidence e;
  e.worst_ratio = doubled > accumulated ? HUGE_VAL : std::max(0.0, accumulated - single) / (kMemoryTolerance * single);
  const auto peak = [&](long micro_batches, double bytes) {
    return std::to_string(micro_batches) + " micro-batch(es) of " + std::to_string(b) + " sample(s) peak at " +
           bytes_text(bytes);
  };
  if (doubled > accumulated)
    fail(e, "the peak grows with N: " + peak(2 * n, doubled) + ", " + peak(n, accumulated));
  else if (e.worst_ratio > 1.0)
    fail(e, "the peak grows with N: " + peak(n, accumulated) + ", " + peak(1, single) + " (more than " +
                std::to_string(static_cast<int>(100 * kMemoryTolerance)) + "% above)");
  return e;
}

Evidence activations_linear_in_batch(const ScenarioSpec& s, PropertyContext& ctx) {
  const long b = s.split.front().front(), n = static_cast<long>(s.split.front().size());
  // Three micro-batch sizes, the first and last with N micro-batches, the
  // middle with one: a line through them only if N does not matter.
  const std::vector<std::pair<long, long>> points = {{b, n}, {2 * b, 1}, {3 * b, n}};
  std::vector<std::pair<long, double>> measured;
  for (const auto& [samples, micro_batches] : points)
    measured.emplace_back(samples, run_loop(with_split(s, micro_batches, samples), ctx).memory[MemoryCategory::activations]);
  const MemoryFit fit = fit_memory(measured);
  const double predicted = activation_bytes_per_sample(s);
  const double slope_error = std::abs(fit.per_sample - predicted) / predicted;
  Evidence e;
  e.worst_ratio = std::max(fit.worst_residual, slope_error) / kMemoryTolerance;
  std::ostringstream where;
  for (std::size_t i = 0; i < points.size(); ++i)
    where << (i ? ", " : "") << points[i].second << " x " << points[i].first << " samples: "
          << bytes_text(measured[i].second);
  if (fit.worst_residual > kMemoryTolerance)
    fail(e, "activation bytes are not linear in the micro-batch size (" + where.str() + "; a point is " +
                percent(fit.worst_residual) + " off the line)");
  else if (slope_error > kMemoryTolerance)
    fail(e, "activation bytes grow by " + bytes_text(fit.per_sample) + " per sample, predicted " +
                bytes_text(predicted) + " (" + where.str() + ")");
  return e;
}

Evidence checkpointing_equivalence(const ScenarioSpec& s, PropertyContext& ctx) {
  ScenarioSpec plain = s, checkpointed = s;
  plain.checkpoint_every = 0;
  checkpointed.checkpoint_every = s.checkpoint_every > 0 ? s.checkpoint_every : 1;
  struct DeterministicMode {  // on for the runs, restored after
    Backend& b;
    bool was = b.deterministic();
    explicit DeterministicMode(Backend& backend) : b(backend) { b.set_deterministic(true); }
    ~DeterministicMode() { b.set_deterministic(was); }
  } mode(*ctx.backend);
  const KernelRun a = run_loop(plain, ctx), c = run_loop(checkpointed, ctx);
  Evidence e;
  for (std::size_t w = 0; e.holds && w < a.windows.size(); ++w)
    for (const RunTensor& ta : a.windows[w].tensors) {
      const RunTensor& tc = find_tensor(c.windows[w], ta.name);
      for (std::size_t i = 0; e.holds && i < ta.values.size(); ++i)
        if (std::memcmp(&ta.values[i], &tc.values[i], sizeof(double)) != 0) {
          std::ostringstream os;
          os.precision(9);
          const long cols = std::max(ta.cols, 1L), at = static_cast<long>(i);
          os << "window " << w << ": " << ta.name << " element [" << at / cols << ", " << at % cols
             << "] differs with checkpointing every " << checkpointed.checkpoint_every << " layer(s): plain "
             << ta.values[i] << ", checkpointed " << tc.values[i] << " (deterministic mode: bit for bit)";
          fail(e, os.str());
          e.worst_ratio = HUGE_VAL;
        }
    }
  if (!e.holds) return e;
  const long b = *std::max_element(s.split.front().begin(), s.split.front().end());
  const double predicted_drop = loop_memory(plain, b)[MemoryCategory::activations] -
                                loop_memory(checkpointed, b)[MemoryCategory::activations];
  const double measured_drop = a.memory[MemoryCategory::activations] - c.memory[MemoryCategory::activations];
  const double plain_bytes = a.memory[MemoryCategory::activations];
  e.worst_ratio = std::abs(measured_drop - predicted_drop) / (kMemoryTolerance * plain_bytes);
  if (e.worst_ratio > 1.0)
    fail(e, "checkpointing every " + std::to_string(checkpointed.checkpoint_every) + " layer(s) drops activation " +
                "bytes by " + bytes_text(measured_drop) + ", predicted " + bytes_text(predicted_drop) + " (plain run: " +
                bytes_text(plain_bytes) + ")");
  return e;
}

}  // namespace gradeq
