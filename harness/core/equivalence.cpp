// equivalence.cpp — executing the four runs and judging the three verdicts.
#include "harness/core/equivalence.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "harness/core/diagnosis.h"
#include "reference/parallel.h"

namespace gradeq {
namespace {

// Gradients live in the accumulation buffer; weights, BatchNorm running
// statistics and optimizer state are float32.
DType dtype_of(RecordKind kind, const PrecisionSpec& p) { return is_gradient(kind) ? p.accumulate : DType::f32; }

// "3, 7 and 9" (at most `most` of them, then "and 4 more").
std::string listed(const std::vector<std::string>& items, std::size_t most = 8) {
  std::string out;
  const std::size_t shown = std::min(items.size(), most);
  for (std::size_t i = 0; i < shown; ++i)
    out += (i == 0 ? "" : i + 1 == shown && items.size() <= most ? " and " : ", ") + items[i];
  if (items.size() > most) out += " and " + std::to_string(items.size() - most) + " more";
  return out;
}

// A problem in what the run did fails the verdict whatever its tensors
// show (even where divergence is expected); then a failure on bounded
// elements decides it; elements the error model cannot bound only make it
// inconclusive when nothing else failed.
void conclude(Verdict& v, bool divergence_expected) {
  v.status = Status::pass;
  if (!v.problems.empty()) {
    v.status = Status::fail;
    v.note = v.problems.front();
  }
  std::string unbounded_note;
  for (const TensorCheck& c : v.checks) {
    v.worst_ratio = std::max(v.worst_ratio, c.non_finite_actual ? HUGE_VAL : c.worst_ratio);
    const bool failed = c.non_finite_actual > 0 || c.worst_ratio > 1.0;
    if (failed && v.status == Status::pass) {
      v.status = divergence_expected ? Status::expected_divergence : Status::fail;
      v.note = c.name + ": " + c.failure_reason();
    }
    if (c.unbounded > 0 && unbounded_note.empty()) unbounded_note = c.name + ": " + c.failure_reason();
  }
  if (v.status == Status::pass && !unbounded_note.empty()) {
    v.status = Status::inconclusive;
    v.note = unbounded_note;
  }
}

// "worst: grad/layer0.weight, window 1, 3.2x its bound" — the check that
// used most of its bound (a non-finite value counts as the most).
std::string worst_tensor_line(const Verdict& v) {
  const TensorCheck* worst = nullptr;
  const auto ratio = [](const TensorCheck& c) { return c.non_finite_actual > 0 ? HUGE_VAL : c.worst_ratio; };
  for (const TensorCheck& c : v.checks)
    if (!worst || ratio(c) > ratio(*worst)) worst = &c;
  if (!worst) return "no tensor compared";
  std::ostringstream os;
  os.precision(3);
  os << "worst: " << worst->name << ", window " << worst->window << ", ";
  if (worst->non_finite_actual > 0) {
    os << worst->non_finite_actual << " non-finite value(s)";
  } else if (worst->worst_bound == 0.0) {
    os << "must be exactly " << worst->worst_expected << ", is " << worst->worst_actual;
  } else {
    os << worst->worst_ratio << "x its bound";
  }
  return os.str();
}

}  // namespace

std::string verdict_name(VerdictKind k) {
  switch (k) {
    case VerdictKind::math_equivalence: return "math equivalence";
    case VerdictKind::kernel_correctness: return "kernel correctness";
    case VerdictKind::accumulation_equivalence: return "accumulation equivalence";
  }
  return "?";
}

std::string status_name(Status s) {
  switch (s) {
    case Status::pass: return "pass";
    case Status::fail: return "FAIL";
    case Status::expected_divergence: return "expected divergence";
    case Status::inconclusive: return "inconclusive";
  }
  return "?";
}

bool ScenarioResult::passed() const {
  for (const Verdict* v : {&math, &kernel, &accumulation})
    if (v->status == Status::fail || v->status == Status::inconclusive) return false;
  return !vacuous && memory.holds();
}

bool ScenarioResult::inconclusive() const {
  for (const Verdict* v : {&math, &kernel, &accumulation})
    if (v->status == Status::inconclusive) return true;
  return false;
}

std::vector<std::string> ScenarioResult::failures() const {
  std::vector<std::string> out;
  for (const Verdict* v : {&math, &kernel, &accumulation}) {
    if (v->status != Status::fail && v->status != Status::inconclusive) continue;
    out.push_back(verdict_name(v->kind) + (v->status == Status::inconclusive ? " inconclusive: " : ": ") + v->note);
    for (std::size_t i = 1; i < v->problems.size(); ++i) out.push_back("  " + v->problems[i]);
    for (const std::string& d : v->diagnosis) out.push_back("  " + d);
    if (v->status == Status::fail && v->problems.empty()) out.push_back("  " + worst_tensor_line(*v));
  }
  if (vacuous) out.push_back(vacuity_failure());
  if (!memory.holds()) out.push_back(memory_failure());
  return out;
}

std::string ScenarioResult::vacuity_failure() const { return "vacuous: every reference gradient is zero"; }

std::string ScenarioResult::memory_failure() const {
  return "memory: peak " + format_bytes(memory.accumulated.peak) + " accumulated (predicted " +
         format_bytes(memory.predicted_accumulated()) + "), " + format_bytes(memory.full_batch.peak) +
         " full batch (predicted " + format_bytes(memory.predicted_full_batch()) + "): off by more than " +
         std::to_string(static_cast<int>(100 * kMemoryTolerance)) + "%";
}

std::string ScenarioResult::first_failure() const {
  for (const Verdict* v : {&math, &kernel, &accumulation})
    if (v->status == Status::fail) return verdict_name(v->kind) + ": " + v->note;
  for (const Verdict* v : {&math, &kernel, &accumulation})
    if (v->status == Status::inconclusive) return verdict_name(v->kind) + " inconclusive: " + v->note;
  if (vacuous) return vacuity_failure();
  if (!memory.holds()) return memory_failure();
  return "";
}

std::vector<double> kernel_bounds(const ReferenceTensor& e) {
  std::vector<double> bound(e.value.size());
  for (std::size_t i = 0; i < bound.size(); ++i) bound[i] = kernel_bound(e.kernel_bound[i], e.reference_bound[i]);
  return bound;
}

std::vector<double> accumulation_bounds(const ReferenceTensor& acc, const ReferenceTensor& full) {
  std::vector<double> bound(full.value.size());
  for (std::size_t i = 0; i < bound.size(); ++i)
    bound[i] = accumulation_bound(acc.kernel_bound[i], acc.reference_bound[i], full.reference_bound[i]);
  return bound;
}

std::vector<std::string> procedure_problems(const Split& split, const KernelRun& run) {
  std::vector<std::string> problems;
  for (std::size_t w = 0; w < split.size() && w < run.windows.size(); ++w) {
    const KernelWindow& k = run.windows[w];
    const long samples = std::accumulate(split[w].begin(), split[w].end(), 0L);
    std::vector<std::vector<std::size_t>> fed_by(static_cast<std::size_t>(samples));  // micro-batches per sample
    std::vector<std::string> foreign, issues;
    std::vector<long> sizes;
    for (std::size_t b = 0; b < k.fed.size(); ++b) {
      sizes.push_back(static_cast<long>(k.fed[b].size()));
      long outside = 0;
      for (long i : k.fed[b]) {
        if (i < 0 || i >= samples) {
          ++outside;
        } else {
          fed_by[static_cast<std::size_t>(i)].push_back(b);
        }
      }
      if (outside > 0)
        foreign.push_back(std::to_string(outside) + " in micro-batch " + std::to_string(b));
    }
    std::vector<std::string> never, repeated;
    for (long i = 0; i < samples; ++i) {
      const std::vector<std::size_t>& by = fed_by[static_cast<std::size_t>(i)];
      if (by.empty()) never.push_back(std::to_string(i));
      if (by.size() > 1) {
        std::vector<std::string> where;
        for (std::size_t b : by) where.push_back(std::to_string(b));
        repeated.push_back(std::to_string(i) + " (micro-batches " + listed(where) + ")");
      }
    }
    if (k.fed.empty()) {
      issues.push_back("none of its " + std::to_string(samples) + " samples was fed (the window was dropped?)");
    } else {
      if (!repeated.empty()) issues.push_back("sample" + std::string(repeated.size() > 1 ? "s " : " ") + listed(repeated) +
                                              " fed more than once");
      if (!never.empty()) issues.push_back("sample" + std::string(never.size() > 1 ? "s " : " ") + listed(never) +
                                           " never fed");
      if (!foreign.empty()) issues.push_back("samples that are not the window's fed: " + listed(foreign));
      if (sizes != split[w])
        issues.push_back("fed in micro-batches of " + describe_split({sizes}) + " samples, where the declared split is " +
                         describe_split({split[w]}));
    }
    for (const std::string& p : k.missing_gradients)
      issues.push_back(p + " is trained but had no gradient after the window (a layer the loss does not reach?)");
    std::string line;
    for (const std::string& i : issues) line += (line.empty() ? "" : "; ") + i;
    if (!line.empty()) problems.push_back("window " + std::to_string(w) + ": " + line);
  }
  return problems;
}

bool expects_equivalence(const ScenarioSpec& spec) {
  if (!ref::has_batch_norm(spec.model) || spec.procedure.batch_norm == ref::BatchNormMode::exact_window) return true;
  // Per-micro-batch BatchNorm equals the full batch only when each window is one micro-batch.
  for (const auto& window : spec.split)
    if (window.size() > 1) return false;
  return true;
}

// Two reference runs at once, or one after the other where memory asks for
// it (ScenarioSpec::reference_runs_in_turn): each run is computed alone,
// so the results are the same.
template <class F, class G>
void run_both(const Scenario& scenario, F&& first, G&& second) {
  if (scenario.spec.reference_runs_in_turn) {
    first();
    second();
  } else {
    ref::concurrently(first, second);
  }
}

void add_reference_runs(const Scenario& scenario, Runs& runs, const ErrorModel& model, const ProgressSink& progress) {
  const Split& split = scenario.spec.split;
  const Split full = full_batch_split(split);
  const auto status = [](ProgressBoard& board, const char* part) -> ProgressSink {
    return [&board, part](const std::string& s) { board.set(part, s); };
  };
  // The full-batch runs on one thread, the accumulated ones on the other
  // (or in turn).
  {
    ProgressBoard board(progress, "reference", {"full batch", "accumulated"});
    const ProgressSink full_status = status(board, "full batch"), acc_status = status(board, "accumulated");
    run_both(
        scenario, [&] { runs.r_full = run_reference(scenario, full, model, full_status); },
        [&] { runs.r_acc = run_reference(scenario, split, model, acc_status); });
  }
  // Window by window again, each from the state a kernel run reached (a
  // first window the runs above computed alike is reused).
  ProgressBoard board(progress, "reference from kernel states", {"full batch", "accumulated"});
  const ProgressSink full_status = status(board, "full batch"), acc_status = status(board, "accumulated");
  run_both(
      scenario,
      [&] {
        if (!runs.k_full.windows.empty())
          runs.r_full_at_k_full =
              run_reference_from(scenario, full, runs.k_full, model, false, &runs.r_full, full_status);
        runs.r_full_at_k_acc =
            run_reference_from(scenario, full, runs.k_acc, model, /*impose_skips=*/true, &runs.r_full, full_status);
      },
      [&] {
        runs.r_acc_at_k_acc = run_reference_from(scenario, split, runs.k_acc, model, false, &runs.r_acc, acc_status);
      });
}

Runs execute(const Scenario& scenario, Backend& backend, const LoopFactory& loop, const ErrorModel& model,
             const ProgressSink& progress) {
  if (scenario.spec.procedure.batch_norm == ref::BatchNormMode::exact_window)
    throw std::invalid_argument("scenario " + scenario.spec.name +
                                ": exact-window batchnorm is a reference-only mode (see `gradeq sweep norms`)");
  Runs runs;
  if (progress) progress("kernel: full batch");
  runs.k_full = loop(backend)->run(scenario, full_batch_split(scenario.spec.split));
  if (progress) progress("kernel: accumulated");
  runs.k_acc = loop(backend)->run(scenario, scenario.spec.split);
  add_reference_runs(scenario, runs, model, progress);
  return runs;
}

namespace {

// The kernel window's tensor for a reference entry; nullptr where it has
// none for a reason a check reports on its own: the run skipped the step
// (state/skipped differs from the reference's), or the parameter had no
// gradient (procedure_problems).
const RunTensor* kernel_tensor(const KernelWindow& k, const ReferenceTensor& e) {
  if (const RunTensor* t = find_optional(k, e.name)) return t;
  if (k.skipped && recorded_by_step(e.kind)) return nullptr;
  if (is_gradient(e.kind))
    for (const std::string& p : k.missing_gradients)
      if (e.name.ends_with("/" + p)) return nullptr;
  throw std::logic_error("kernel run has no tensor " + e.name);
}

}  // namespace

ScenarioResult judge(const Scenario& scenario, const Runs& runs) {
  const ScenarioSpec& spec = scenario.spec;
  const bool equivalent = expects_equivalence(spec);
  ScenarioResult result;
  result.spec = spec;
  result.schema = scenario.schema;
  result.math.kind = VerdictKind::math_equivalence;
  result.kernel.kind = VerdictKind::kernel_correctness;
  result.accumulation.kind = VerdictKind::accumulation_equivalence;
  bool any_nonzero_gradient = false;
  auto add = [](Verdict& v, std::size_t w, const std::string& label, const ReferenceTensor& shape, DType d,
                const std::vector<double>& expected, const std::vector<double>& actual,
                const std::vector<double>& bound) {
    TensorCheck c = compare_tensor(label, shape.rows, shape.cols, d, expected, actual, bound);
    c.kind = shape.kind;
    c.window = static_cast<long>(w);
    v.checks.push_back(std::move(c));
  };
  for (std::size_t w = 0; w < runs.r_full.windows.size(); ++w) {
    // Math equivalence: whole trajectories. A tensor missing from one run
    // (a skipped window has no gradient) shows in state/skipped instead.
    for (const ReferenceTensor& full : runs.r_full.windows[w].tensors) {
      for (std::size_t i = 0; i < full.value.size(); ++i)
        if (is_gradient(full.kind) && full.value[i] != 0.0) any_nonzero_gradient = true;
      const ReferenceTensor* acc = find_optional(runs.r_acc.windows[w], full.name);
      if (!acc) continue;
      std::vector<double> bound(full.value.size());
      for (std::size_t i = 0; i < bound.size(); ++i) bound[i] = math_bound(acc->reference_bound[i], full.reference_bound[i]);
      add(result.math, w, full.name, full, DType::f32, full.value, acc->value, bound);
    }
    // Kernel correctness: each kernel run against the reference from its own state.
    for (const auto& [label, expected_run, kernel_run] :
         {std::tuple{"full: ", &runs.r_full_at_k_full, &runs.k_full}, std::tuple{"acc: ", &runs.r_acc_at_k_acc, &runs.k_acc}}) {
      if (kernel_run->windows.empty()) continue;  // an external run without its full-batch counterpart
      for (const ReferenceTensor& e : expected_run->windows[w].tensors)
        if (const RunTensor* k = kernel_tensor(kernel_run->windows[w], e))
          add(result.kernel, w, label + e.name, e, dtype_of(e.kind, spec.precision), e.value, k->values,
              kernel_bounds(e));
    }
    // Accumulation equivalence: K_acc against R_full from K_acc's state.
    for (const ReferenceTensor& full : runs.r_full_at_k_acc.windows[w].tensors) {
      const ReferenceTensor* acc = find_optional(runs.r_acc_at_k_acc.windows[w], full.name);
      if (!acc) continue;
      if (const RunTensor* k = kernel_tensor(runs.k_acc.windows[w], full))
        add(result.accumulation, w, full.name, full, dtype_of(full.kind, spec.precision), full.value, k->values,
            accumulation_bounds(*acc, full));
    }
  }
  // What the runs under test fed and recorded: K_acc's under the
  // accumulation verdict, K_full's under kernel correctness.
  // K_acc's under kernel correctness too, which judges it against R_acc.
  result.accumulation.problems = procedure_problems(spec.split, runs.k_acc);
  for (const std::string& p : result.accumulation.problems) result.kernel.problems.push_back("accumulated run, " + p);
  if (!runs.k_full.windows.empty()) {
    for (std::string& p : procedure_problems(full_batch_split(spec.split), runs.k_full))
      result.kernel.problems.push_back("full-batch run, " + p);
  }
  std::vector<std::string> without_gradient;
  for (const KernelRun* run : {&runs.k_acc, &runs.k_full})
    for (const KernelWindow& w : run->windows)
      without_gradient.insert(without_gradient.end(), w.missing_gradients.begin(), w.missing_gradients.end());
  conclude(result.math, !equivalent);
  conclude(result.kernel, false);
  conclude(result.accumulation, !equivalent);
  for (auto [v, run, reference] : {std::tuple{&result.math, "R_acc", "R_full"}, std::tuple{&result.kernel, "K", "R"},
                                   std::tuple{&result.accumulation, "K_acc", "R_full"}})
    if (v->status == Status::fail) v->diagnosis = diagnose(v->checks, run, reference, without_gradient);
  result.vacuous = !any_nonzero_gradient;
  ScenarioMemory& memory = result.memory;
  memory.accumulated = runs.k_acc.memory;
  memory.full_batch = runs.k_full.memory;
  for (const std::vector<long>& window : spec.split) {
    memory.micro_batch = std::max(memory.micro_batch, *std::max_element(window.begin(), window.end()));
    memory.window = std::max(memory.window, std::accumulate(window.begin(), window.end(), 0L));
  }
  memory.loop = loop_memory(spec, memory.micro_batch);
  return result;
}

void explain_failure(const Scenario& scenario, const Runs& runs, const ErrorModel& model, ScenarioResult& result) {
  Verdict& v = result.accumulation;
  const ScenarioSpec& spec = scenario.spec;
  if (v.status != Status::fail || !v.problems.empty()) return;
  if (spec.procedure.normalization != ref::Normalization::global_count) return;
  bool uneven = false;
  for (std::size_t w = 0; w < spec.split.size(); ++w) {
    long first = 0;
    std::vector<long> items;
    for (long n : spec.split[w]) {
      items.push_back(scenario.windows[w].slice(first, n).items(spec.model.loss));
      first += n;
    }
    uneven = uneven || std::adjacent_find(items.begin(), items.end(), std::not_equal_to<>()) != items.end();
  }
  if (!uneven) return;
  Scenario mean_of_means = scenario;
  mean_of_means.spec.procedure.normalization = ref::Normalization::equal_split;
  const ReferenceRun r = run_reference_from(mean_of_means, spec.split, runs.k_acc, model, false, nullptr);
  bool matches = true, compared = false;
  for (std::size_t w = 0; w < r.windows.size() && matches; ++w)
    for (const ReferenceTensor& e : r.windows[w].tensors) {
      if (e.kind != RecordKind::gradient) continue;
      const RunTensor* k = find_optional(runs.k_acc.windows[w], e.name);
      if (!k) continue;
      compared = true;
      matches = matches && compare_tensor(e.name, e.rows, e.cols, spec.precision.accumulate, e.value, k->values,
                                          kernel_bounds(e))
                               .passed();
    }
  if (matches && compared)
    v.diagnosis.insert(v.diagnosis.begin(),
                       "K_acc's gradient is the mean of per-micro-batch means, within its bounds in every window: each "
                       "micro-batch normalised by its own item count, then by 1/N (docs/BUGS.md B1); normalise each "
                       "micro-batch's summed loss by the window's item count (num_items_in_batch)");
}

ScenarioResult check_scenario(const ScenarioSpec& spec, Backend& backend, const LoopFactory& loop,
                              const ErrorModel& model, const ProgressSink& progress, bool explain) {
  const auto start = std::chrono::steady_clock::now();
  const Scenario scenario = materialize(spec);
  const Runs runs = execute(scenario, backend, loop, model, progress);
  ScenarioResult result = judge(scenario, runs);
  if (explain) explain_failure(scenario, runs, model, result);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace gradeq
