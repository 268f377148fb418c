// properties.cpp — property functions and the registry.
#include "properties/properties.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "properties/generators.h"

namespace gradeq {
namespace {

Evidence from_verdicts(const ScenarioResult& r, std::initializer_list<const Verdict*> verdicts) {
  Evidence e;
  for (const Verdict* v : verdicts) {
    // An expected divergence's ratio measures the divergence, not an error.
    if (v->status != Status::expected_divergence) e.worst_ratio = std::max(e.worst_ratio, v->worst_ratio);
    // A sample fed twice or never is no rounding error: a detection by what
    // the run did is as certain as a bitwise one, whatever its tensors show.
    if (!v->problems.empty()) e.worst_ratio = HUGE_VAL;
    if (v->status == Status::fail && e.holds) {
      e.holds = false;
      e.message = verdict_name(v->kind) + ": " + v->note;
    }
    if (v->status == Status::inconclusive && !e.discard) {
      e.discard = true;
      e.discard_reason = "ill-conditioned";
    }
  }
  if (r.vacuous) {
    e.discard = true;
    e.discard_reason = "vacuous";
  }
  return e;
}

ScenarioResult run(const ScenarioSpec& s, PropertyContext& ctx) {
  return check_scenario(s, *ctx.backend, ctx.loop, ctx.model);
}

bool float32_representable(double v) { return static_cast<double>(static_cast<float>(v)) == v; }

}  // namespace

Evidence reference_self_consistency(const ScenarioSpec& s, PropertyContext& ctx) {
  const ScenarioResult r = run(s, ctx);
  return from_verdicts(r, {&r.math});
}

Evidence kernel_correctness(const ScenarioSpec& s, PropertyContext& ctx) {
  const ScenarioResult r = run(s, ctx);
  return from_verdicts(r, {&r.kernel});
}

Evidence accumulation_equivalence(const ScenarioSpec& s, PropertyContext& ctx) {
  const ScenarioResult r = run(s, ctx);
  return from_verdicts(r, {&r.accumulation});
}

Evidence exactness(const ScenarioSpec& s, PropertyContext& ctx) {
  const Scenario scenario = materialize(s);
  const Runs runs = execute(scenario, *ctx.backend, ctx.loop, ctx.model);
  Evidence e;
  bool vacuous = true;
  // "window 0: grad/layer0.weight element [2, 3]: K_acc 0.25, R_acc 0.125 (exact cases agree bit for bit)"
  auto differ = [&](std::size_t w, const ReferenceTensor& t, std::size_t i, const char* a_name, double a,
                    const char* b_name, double b) {
    if (!e.holds) return;
    if (a == b) return;  // NaN != NaN: a NaN never passes
    std::ostringstream os;
    os.precision(17);
    const long cols = std::max(t.cols, 1L), at = static_cast<long>(i);
    os << "window " << w << ": " << t.name << " element [" << at / cols << ", " << at % cols << "]: " << a_name << " "
       << a << ", " << b_name << " " << b << " (an exact case agrees bit for bit)";
    e.holds = false;
    e.message = os.str();
    e.worst_ratio = HUGE_VAL;  // any difference exceeds a bound of 0
  };
  for (std::size_t w = 0; w < runs.r_full.windows.size(); ++w)
  for (const ReferenceTensor& rf : runs.r_full.windows[w].tensors) {
    const ReferenceTensor& ra = find_tensor(runs.r_acc.windows[w], rf.name);
    const RunTensor* kf_found = find_optional(runs.k_full.windows[w], rf.name);
    const RunTensor* ka_found = find_optional(runs.k_acc.windows[w], rf.name);
    if (!kf_found || !ka_found) {  // a kernel run skipped the step: an exact case never overflows
      if (e.holds) {
        e.holds = false;
        e.message = "window " + std::to_string(w) + ": " + rf.name + " missing: the " +
                    (kf_found ? "accumulated" : "full-batch") + " kernel run skipped the step";
        e.worst_ratio = HUGE_VAL;
      }
      continue;
    }
    const RunTensor &kf = *kf_found, &ka = *ka_found;
    for (std::size_t i = 0; i < rf.value.size(); ++i) {
      if (rf.value[i] != 0.0 && is_gradient(rf.kind)) vacuous = false;
      // A case whose exact values leave float32 is not an exactness case:
      // the generator is wrong, and saying so beats a silent pass.
      if (e.holds && !float32_representable(rf.value[i])) {
        e.holds = false;
        e.message = "not an exact case: reference value of " + rf.name + " is not float32-representable";
      }
      differ(w, rf, i, "R_acc", ra.value[i], "R_full", rf.value[i]);
      differ(w, rf, i, "K_full (kernel)", kf.values[i], "R_full (reference)", rf.value[i]);
      differ(w, rf, i, "K_acc (kernel)", ka.values[i], "R_acc (reference)", ra.value[i]);
      differ(w, rf, i, "K_acc", ka.values[i], "K_full", kf.values[i]);
    }
  }
  if (vacuous) {
    e.discard = true;
    e.discard_reason = "vacuous";
  }
  return e;
}

Evidence determinism(const ScenarioSpec& s, PropertyContext& ctx) {
  const Scenario scenario = materialize(s);
  struct DeterministicMode {  // on for the two runs, restored after
    Backend& b;
    bool was = b.deterministic();
    explicit DeterministicMode(Backend& backend) : b(backend) { b.set_deterministic(true); }
    ~DeterministicMode() { b.set_deterministic(was); }
  } mode(*ctx.backend);
  const KernelRun first = ctx.loop(*ctx.backend)->run(scenario, s.split);
  const KernelRun second = ctx.loop(*ctx.backend)->run(scenario, s.split);
  Evidence e;
  auto fail = [&](const std::string& message) {
    if (!e.holds) return;
    e.holds = false;
    e.message = message;
    e.worst_ratio = HUGE_VAL;  // any difference exceeds a bound of 0
  };
  if (first.windows.size() != second.windows.size()) fail("the runs have different numbers of windows");
  for (std::size_t w = 0; e.holds && w < first.windows.size(); ++w) {
    const KernelWindow &a = first.windows[w], &b = second.windows[w];
    const std::string where = "window " + std::to_string(w) + ": ";
    if (a.skipped != b.skipped) fail(where + "one run skipped the step, the other did not");
    // The loss may be infinite in a window that overflowed; it must still repeat bit for bit.
    if (std::memcmp(&a.loss, &b.loss, sizeof(double)) != 0) fail(where + "the losses differ");
    if (a.tensors.size() != b.tensors.size()) fail(where + "the runs recorded different tensors");
    for (const RunTensor& ta : a.tensors) {
      const RunTensor* found = find_optional(b, ta.name);
      if (!found) {
        fail(where + "the runs recorded different tensors");
        break;
      }
      const RunTensor& tb = *found;
      for (std::size_t i = 0; e.holds && i < ta.values.size(); ++i) {
        const bool same_bits = std::memcmp(&ta.values[i], &tb.values[i], sizeof(double)) == 0;
        if (!same_bits) {
          std::ostringstream os;
          os.precision(9);
          const long cols = std::max(ta.cols, 1L), at = static_cast<long>(i);
          os << where << ta.name << " element [" << at / cols << ", " << at % cols << "] differs run to run: first run "
             << ta.values[i] << ", second run " << tb.values[i];
          fail(os.str());
        } else if (!std::isfinite(ta.values[i]) && !e.discard && !(a.skipped && recorded_by_step(ta.kind))) {
          // Repeated bit for bit, but an overflow (static float16 loss
          // scaling) leaves nothing to compare: the case cannot decide. A
          // window the dynamic loss scaler skipped overflowed by design; its
          // gradient repeats bit for bit and the rest of the state is finite.
          e.discard = true;
          e.discard_reason = "ill-conditioned";
        }
      }
    }
  }
  return e;
}

Evidence trajectory_equivalence(const ScenarioSpec& s, PropertyContext& ctx) {
  const ScenarioResult r = run(s, ctx);
  return from_verdicts(r, {&r.kernel, &r.accumulation});
}

// R_acc against R_full, whole trajectories, with the float64 bound; the
// worst ratio and ill-conditioned discards go into `e`.
std::vector<TensorCheck> compare_reference_runs(const ScenarioSpec& s, PropertyContext& ctx, Evidence& e) {
  const Scenario scenario = materialize(s);
  const ReferenceRun r_full = run_reference(scenario, full_batch_split(s.split), ctx.model);
  const ReferenceRun r_acc = run_reference(scenario, s.split, ctx.model);
  std::vector<TensorCheck> checks;
  for (std::size_t w = 0; w < r_full.windows.size(); ++w)
    for (const ReferenceTensor& f : r_full.windows[w].tensors) {
      const ReferenceTensor& a = find_tensor(r_acc.windows[w], f.name);
      std::vector<double> bound(f.value.size());
      for (std::size_t i = 0; i < bound.size(); ++i) bound[i] = math_bound(a.reference_bound[i], f.reference_bound[i]);
      checks.push_back(compare_tensor(f.name, f.rows, f.cols, DType::f32, f.value, a.value, bound));
      checks.back().window = static_cast<long>(w);
      e.worst_ratio = std::max(e.worst_ratio, checks.back().worst_ratio);
      if (checks.back().unbounded > 0) {
        e.discard = true;
        e.discard_reason = "ill-conditioned";
      }
    }
  return checks;
}

// Whether R_acc departs from R_full beyond the float64 bound.
bool reference_diverges(const ScenarioSpec& s, PropertyContext& ctx, Evidence& e) {
  compare_reference_runs(s, ctx, e);
  return e.worst_ratio > 1.0;
}

Evidence equal_split_shortcut(const ScenarioSpec& s, PropertyContext& ctx) {
  const Scenario scenario = materialize(s);
  bool equal_counts = true;
  for (std::size_t w = 0; w < s.split.size(); ++w) {
    long first = 0, items = -1;
    for (long n : s.split[w]) {
      const long here = scenario.windows[w].slice(first, n).items(s.model.loss);
      first += n;
      if (items >= 0 && here != items) equal_counts = false;
      items = here;
    }
  }
  Evidence e;
  const bool diverged = reference_diverges(s, ctx, e);
  const double ratio = e.worst_ratio;
  if (!equal_counts) e.worst_ratio = 0.0;  // the ratio measures the divergence, not an error
  if (equal_counts && diverged) {
    e.holds = false;
    e.message = "equal item counts, yet the shortcut departs from global normalization: error/bound " +
                std::to_string(ratio);
  } else if (!equal_counts && !diverged && !e.discard) {
    e.holds = false;
    e.message = "unequal item counts, yet the shortcut matched global normalization within float64 rounding "
                "(error/bound " + std::to_string(ratio) + ")";
  }
  return e;
}

Evidence batchnorm_divergence(const ScenarioSpec& s, PropertyContext& ctx) {
  Evidence e;
  const bool diverged = reference_diverges(s, ctx, e);
  const double ratio = e.worst_ratio;
  // Only equivalent cases have an error/bound of correct code to report;
  // for divergent ones the ratio measures the divergence.
  if (!expects_equivalence(s)) e.worst_ratio = 0.0;
  if (expects_equivalence(s) && diverged) {
    e.holds = false;
    e.message = "batchnorm with one micro-batch per window departs from the full batch: error/bound " +
                std::to_string(ratio);
  } else if (!expects_equivalence(s) && !diverged && !e.discard) {
    e.holds = false;
    e.message = "batchnorm with micro-batches smaller than the window matched the full batch within float64 "
                "rounding (error/bound " + std::to_string(ratio) + "): the divergence went undetected";
  }
  return e;
}

Evidence exact_batchnorm_equivalence(const ScenarioSpec& s, PropertyContext& ctx) {
  ScenarioSpec exact = s;
  exact.procedure.batch_norm = ref::BatchNormMode::exact_window;
  Evidence e;
  for (const TensorCheck& c : compare_reference_runs(exact, ctx, e))
    if (c.unbounded == 0 && !c.passed() && e.holds) {
      e.holds = false;
      e.message = "exact batchnorm: " + c.name + ": " + c.failure_reason();
    }
  return e;
}

const std::vector<Property>& default_properties() {
  static const std::vector<Property> properties = {
      {"ReferenceSelfConsistency",
       "float64 reference: accumulated equals full batch within float64 rounding (layers that treat samples "
       "independently)",
       independent_scenario(), reference_self_consistency, false, 0.4},
      {"KernelCorrectness", "backend vs reference, full batch and accumulated, within the error-model bound",
       independent_scenario(), kernel_correctness, true, 0.45},
      {"AccumulationEquivalence", "accumulated backend run vs full-batch reference, within the error-model bound",
       independent_scenario(), accumulation_equivalence, true, 0.35},
      {"Determinism", "deterministic mode: the accumulated run repeated from the same state is bitwise identical",
       determinism_scenario(), determinism, true, 0.01},
      {"Exactness", "dyadic data, power-of-two splits: every run bitwise equal", exact_scenario(), exactness, true, 0.1},
      {"BatchNormKernelCorrectness", "batchnorm models: backend vs its own (accumulated) reference, running "
       "statistics included", batchnorm_scenario(), kernel_correctness, true, 0.75},
      {"BatchNormDivergence", "batchnorm: R_acc departs from R_full beyond float64 rounding iff a window has "
       "several micro-batches", batchnorm_scenario(), batchnorm_divergence, false, 0.35},
      {"ExactBatchNormEquivalence", "exact batchnorm under accumulation (window statistics): R_acc equals R_full "
       "within float64 rounding", batchnorm_scenario(), exact_batchnorm_equivalence, false, 0.9},
      {"OptimizerTrajectoryEquivalence", "SGD/momentum/Nesterov/Adam/AdamW, binding clip, warmup-cosine, several "
       "windows: weights and optimizer state equivalent every window", optimizer_scenario(), trajectory_equivalence, true, 0.55},
      {"MixedPrecisionEquivalence", "bfloat16/float16 compute, float32/bfloat16/float16 buffers, Kahan, float16 "
       "loss scaling with overflow skips: within the bound", mixed_precision_scenario(), trajectory_equivalence, true, 0.45},
      {"NormalizedMixedPrecision", "every normalizer under bfloat16/float16/float32 compute, pre- and post-norm, both "
       "losses: kernel and (except BatchNorm) accumulation within the bound, decidable", normalized_scenario(),
       trajectory_equivalence, true, 0.8},
      {"LanguageModelEquivalence", "causal language models (embeddings, tied head, chunked head, shifted labels, padding) in "
       "float32, bfloat16 and float16 compute: kernel and accumulation within the bound", language_model_scenario(),
       trajectory_equivalence, true, 1.0},
      {"AttentionEquivalence", "a language model's causal or bidirectional multi-head attention block over padded "
       "sequences in float32, bfloat16 and float16 compute: kernel and accumulation within the bound",
       attention_scenario(), trajectory_equivalence, true, 1.0},
      {"ConvEquivalence", "images through 2-D convolutions (kernel 1-3, stride, padding, dilation, groups, odd sizes), "
       "max and average pools, up-sampling, in float32 and bfloat16 compute: kernel and accumulation within the bound",
       conv_scenario(), trajectory_equivalence, true, 0.5},
      {"LongAccumulation", "64 to 300 micro-batches into a float32 buffer: within the bound",
       long_accumulation_scenario(), trajectory_equivalence, true, 1.7},
      {"EqualSplitShortcut", "1/(N n_b) normalization equals the window's global count iff item counts are equal",
       equal_split_shortcut_scenario(), equal_split_shortcut, false, 0.25},
      {"PeakIndependentOfN", "memory: N micro-batches of b samples peak no higher than one micro-batch of b",
       memory_scenario(), peak_independent_of_n, true, 0.1},
      {"ActivationsLinearInBatch", "memory: activation bytes are linear in the micro-batch size, at the predicted "
       "bytes per sample, whatever N", memory_scenario(), activations_linear_in_batch, true, 0.1},
      {"CheckpointingEquivalence", "activation checkpointing: bitwise the plain run's gradients, weights and running "
       "statistics (deterministic mode), activation bytes down as predicted", memory_scenario(),
       checkpointing_equivalence, true, 0.1},
  };
  return properties;
}

const Property* find_property(const std::string& name) {
  for (const Property& p : default_properties())
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace gradeq
