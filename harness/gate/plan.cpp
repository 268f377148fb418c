// plan.cpp — measure, fit, choose the split, check it.
#include "harness/gate/plan.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "harness/core/training_loop.h"

namespace gradeq {

double MemoryPlan::relative_error() const {
  return measured_peak() > 0.0 ? std::abs(measured_peak() - predicted_peak) / measured_peak() : HUGE_VAL;
}

bool MemoryPlan::passed() const { return check.passed() && relative_error() <= kMemoryTolerance; }

MemoryPlan make_plan(const ScenarioSpec& spec, const PlanOptions& o, Backend& backend, const ProgressSink& progress) {
  if (o.effective_batch < 1)
    throw std::invalid_argument("--effective-batch: an effective batch of " + std::to_string(o.effective_batch) +
                                " samples has nothing to split; give at least 1");
  if (!(o.margin >= 0.0 && o.margin < 1.0))
    throw std::invalid_argument("--margin: the fraction of the budget kept free must be in [0, 1), got " +
                                std::to_string(o.margin));
  if (!(o.budget_bytes > 0.0) || !std::isfinite(o.budget_bytes))
    throw std::invalid_argument("--budget: must be a positive size");
  MemoryPlan plan;
  plan.usable_bytes = o.budget_bytes * (1.0 - o.margin);

  // 1. Three one-micro-batch runs: b0, 2 b0, 4 b0.
  const long b0 = smallest_micro_batch(spec);
  const std::vector<long> sizes = {b0, 2 * b0, 4 * b0};
  for (long n : sizes) {
    if (progress) progress("plan: measuring the peak of one micro-batch of " + std::to_string(n) + " sample(s)");
    plan.measured.emplace_back(n, measure_peak(spec, n, backend, correct_loop()));
  }
  plan.fit = fit_memory(plan.measured);
  if (plan.fit.worst_residual > kMemoryTolerance || plan.fit.per_sample <= 0.0)
    throw PlanFailure("the peaks of " + std::to_string(b0) + ", " + std::to_string(2 * b0) + " and " +
                             std::to_string(4 * b0) + " samples are not fixed + linear per sample (a point is " +
                             std::to_string(static_cast<int>(std::ceil(100.0 * plan.fit.worst_residual))) + "% off the line): no plan can be "
                             "extrapolated from them");

  // 2. The largest micro-batch that fits, and N.
  const double fits = std::floor((plan.usable_bytes - plan.fit.fixed) / plan.fit.per_sample);
  if (fits < static_cast<double>(b0))
    throw std::invalid_argument(
        "--budget " + format_bytes(o.budget_bytes) + " (" + format_bytes(plan.usable_bytes) + " after the " +
        std::to_string(static_cast<int>(std::lround(100.0 * o.margin))) + "% margin) does not hold the fixed part, " +
        format_bytes(plan.fit.fixed) + ", plus one micro-batch of " + std::to_string(b0) + " sample(s) at " +
        format_bytes(plan.fit.per_sample) + " per sample: at least " + format_bytes(plan.fit.at(b0) / (1.0 - o.margin)) +
        " is needed");
  plan.micro_batch = std::min(o.effective_batch, static_cast<long>(fits));
  plan.micro_batches = (o.effective_batch + plan.micro_batch - 1) / plan.micro_batch;
  plan.last_micro_batch = o.effective_batch - (plan.micro_batches - 1) * plan.micro_batch;
  if (plan.last_micro_batch < b0) {
    // BatchNorm cannot take a last micro-batch this small: move samples
    // into it from the others (their size then differs by one at most).
    plan.micro_batches = std::max(1L, o.effective_batch / b0);
    plan.micro_batch = (o.effective_batch + plan.micro_batches - 1) / plan.micro_batches;
    plan.last_micro_batch = o.effective_batch - (plan.micro_batches - 1) * plan.micro_batch;
  }
  std::vector<long> window(static_cast<std::size_t>(plan.micro_batches), plan.micro_batch);
  window.back() = plan.last_micro_batch;
  plan.spec = spec;
  plan.spec.split.assign(spec.split.size(), window);
  plan.predicted_peak = plan.fit.at(static_cast<double>(plan.micro_batch));
  plan.predicted_full_batch = plan.fit.at(static_cast<double>(o.effective_batch));
  plan.categories = loop_memory(plan.spec, plan.micro_batch);
  plan.categories[MemoryCategory::scratch] = std::max(0.0, plan.predicted_peak - plan.categories.total());
  plan.categories.peak = plan.categories.total();

  if (o.ranks > 1) {
    RankBytes r;
    r.ranks = o.ranks;
    r.micro_batch = plan.micro_batch;
    r.micro_batches = (o.effective_batch + o.ranks * plan.micro_batch - 1) / (o.ranks * plan.micro_batch);
    r.replicated = plan.predicted_peak;
    const MemoryUsage& c = plan.categories;
    const double w = static_cast<double>(o.ranks);
    double params = 0.0;
    for (const ref::ParameterInfo& p : ref::parameter_layout(spec.model)) params += static_cast<double>(p.rows * p.cols);
    // The optimizer state shrinks to 1/W; the reduce-scatter target (the
    // buffer's dtype) and the float32 master shard are added.
    r.sharded = r.replicated - c[MemoryCategory::optimizer_state] * (1.0 - 1.0 / w) +
                params * static_cast<double>(dtype_bytes(spec.precision.accumulate) + dtype_bytes(DType::f32)) / w;
    plan.per_rank = r;
  }

  // 3. The planned split through the equivalence checks, its peak measured.
  if (progress)
    progress("plan: checking " + std::to_string(plan.micro_batches) + " micro-batches of " +
             std::to_string(plan.micro_batch) + " against the full batch of " + std::to_string(o.effective_batch));
  plan.check = check_scenario(plan.spec, backend, correct_loop(), o.model);
  predict_memory(plan.check.memory, plan.spec, backend, correct_loop());
  return plan;
}

}  // namespace gradeq
