// properties.h — the properties gradeq checks, as plain functions over a
// ScenarioSpec returning Evidence, plus the registry that pairs each with
// its generator. `gradeq check`, the gtest wrappers and the self-test all
// run these same functions; none of them knows which backend or loop it is
// given, so a mutant is checked exactly like correct code.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "harness/core/equivalence.h"
#include "kernels/backend.h"

namespace gradeq {

struct PropertyContext {
  Backend* backend = nullptr;
  LoopFactory loop = correct_loop();
  ErrorModel model;
};

struct Evidence {
  bool holds = true;
  // The case cannot decide the property, whatever the backend does: every
  // reference gradient is zero (vacuous), or the error model gives no finite
  // bound (ill-conditioned). Such cases are discarded and counted.
  bool discard = false;
  std::string discard_reason;
  std::string message;       // why it does not hold
  double worst_ratio = 0.0;  // largest error / bound among the checks
};

using PropertyCheck = std::function<Evidence(const ScenarioSpec&, PropertyContext&)>;

struct Property {
  std::string name;  // CamelCase; also the gtest name "Properties/<name>"
  std::string description;
  rc::Gen<ScenarioSpec> generator;
  PropertyCheck check;
  // False for properties of the float64 reference alone: they never run
  // the backend, so they cannot catch (or be fooled by) a kernel bug.
  bool exercises_backend = true;
  // Seconds per 100 cases on the host backend, measured (`gradeq check`
  // prints them): for scheduling only, the gate starts the costliest first
  // so that two processes finish together.
  double cost = 0.5;
};

// R_acc vs R_full within the float64 error bound.
Evidence reference_self_consistency(const ScenarioSpec& s, PropertyContext& ctx);
// K_full vs R_full and K_acc vs R_acc within the kernel bound.
Evidence kernel_correctness(const ScenarioSpec& s, PropertyContext& ctx);
// K_acc vs R_full within the accumulation bound.
Evidence accumulation_equivalence(const ScenarioSpec& s, PropertyContext& ctx);
// The backend's deterministic mode: the accumulated run, repeated from the
// same initial state, gives bitwise identical values in every window.
Evidence determinism(const ScenarioSpec& s, PropertyContext& ctx);
// Dyadic data, exact arithmetic: K_acc, K_full, R_acc, R_full bitwise equal.
Evidence exactness(const ScenarioSpec& s, PropertyContext& ctx);
// BatchNorm: R_acc departs from R_full beyond float64 rounding whenever a
// window has more than one micro-batch, and matches it when none has.
Evidence batchnorm_divergence(const ScenarioSpec& s, PropertyContext& ctx);
// K_full vs R_full, K_acc vs R_acc and K_acc vs R_full, every window:
// optimizer trajectories, mixed precision, long accumulations.
Evidence trajectory_equivalence(const ScenarioSpec& s, PropertyContext& ctx);
// The equal-split shortcut 1 / (N n_b) equals the global normalization iff
// every micro-batch of a window has the same item count.
Evidence equal_split_shortcut(const ScenarioSpec& s, PropertyContext& ctx);
// Exact BatchNorm under accumulation (window statistics and coupling, a
// reference mode): R_acc matches R_full within float64 rounding.
Evidence exact_batchnorm_equivalence(const ScenarioSpec& s, PropertyContext& ctx);

// Memory (properties/memory_properties.cpp). The peak of 2N micro-batches
// of b samples is no more than that of N, and that of N no more than one
// micro-batch's (up to kMemoryTolerance).
Evidence peak_independent_of_n(const ScenarioSpec& s, PropertyContext& ctx);
// Activation bytes at b (N micro-batches), 2b (one) and 3b (N) lie on a
// line whose slope is the predicted bytes per sample.
Evidence activations_linear_in_batch(const ScenarioSpec& s, PropertyContext& ctx);
// Activation checkpointing, deterministic mode: every recorded tensor
// (gradients, weights, optimizer state, running statistics) bitwise equal
// to the plain run's, and the activation bytes drop by the predicted amount.
Evidence checkpointing_equivalence(const ScenarioSpec& s, PropertyContext& ctx);

const std::vector<Property>& default_properties();
const Property* find_property(const std::string& name);

}  // namespace gradeq
