// properties.cpp — property functions and the registry.
#include "properties/properties.h"

#include <cmath>
#include <sstream>

#include "properties/generators.h"

namespace gradeq {
namespace {

Evidence from_verdicts(const ScenarioResult& r, std::initializer_list<const Verdict*> verdicts) {
  Evidence e;
  for (const Verdict* v : verdicts) {
    e.worst_ratio = std::max(e.worst_ratio, v->worst_ratio);
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
  auto differ = [&](const std::string& what, const std::string& name, std::size_t i, double a, double b) {
    if (!e.holds) return;
    if (a == b) return;  // NaN != NaN: a NaN never passes
    std::ostringstream os;
    os.precision(17);
    os << what << " differ at " << name << "[" << i << "]: " << a << " vs " << b;
    e.holds = false;
    e.message = os.str();
  };
  for (std::size_t t = 0; t < runs.r_full.tensors.size(); ++t) {
    const ReferenceTensor& rf = runs.r_full.tensors[t];
    const ReferenceTensor& ra = runs.r_acc.tensors[t];
    const RunTensor& kf = runs.k_full.tensors[t];
    const RunTensor& ka = runs.k_acc.tensors[t];
    for (std::size_t i = 0; i < rf.value.size(); ++i) {
      if (rf.value[i] != 0.0 && rf.name.starts_with("grad/")) vacuous = false;
      // A case whose exact values leave float32 is not an exactness case:
      // the generator is wrong, and saying so beats a silent pass.
      if (e.holds && !float32_representable(rf.value[i])) {
        e.holds = false;
        e.message = "not an exact case: reference value of " + rf.name + " is not float32-representable";
      }
      differ("R_acc and R_full", rf.name, i, ra.value[i], rf.value[i]);
      differ("K_full and R_full", rf.name, i, kf.values[i], rf.value[i]);
      differ("K_acc and R_acc", rf.name, i, ka.values[i], ra.value[i]);
      differ("K_acc and K_full", rf.name, i, ka.values[i], kf.values[i]);
    }
  }
  if (vacuous) {
    e.discard = true;
    e.discard_reason = "vacuous";
  }
  return e;
}

const std::vector<Property>& default_properties() {
  static const std::vector<Property> properties = {
      {"ReferenceSelfConsistency",
       "float64 reference: accumulated equals full batch within float64 rounding (layers that treat samples "
       "independently)",
       independent_scenario(), reference_self_consistency},
      {"KernelCorrectness", "backend vs reference, full batch and accumulated, within the error-model bound",
       independent_scenario(), kernel_correctness},
      {"AccumulationEquivalence", "accumulated backend run vs full-batch reference, within the error-model bound",
       independent_scenario(), accumulation_equivalence},
      {"Exactness", "dyadic data, power-of-two splits: every run bitwise equal", exact_scenario(), exactness},
  };
  return properties;
}

const Property* find_property(const std::string& name) {
  for (const Property& p : default_properties())
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace gradeq
