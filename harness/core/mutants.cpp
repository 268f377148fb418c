// mutants.cpp — the loop and kernel mutants merged into one catalogue.
#include "harness/core/mutants.h"

#include <algorithm>
#include <string>

#include "harness/core/loop_mutants.h"

namespace gradeq {
namespace {

long catalogue_number(const std::string& id) { return std::stol(id.substr(1)); }

Mutant from(const BackendMutant& m) { return {m, m.wrap, nullptr}; }

}  // namespace

const std::vector<Mutant>& mutants() {
  static const std::vector<Mutant> all = [] {
    std::vector<Mutant> out;
    for (const LoopMutant& m : loop_mutants()) out.push_back({m, nullptr, m.loop});
    for (const BackendMutant& m : single_process_backend_mutants()) out.push_back(from(m));
    std::stable_sort(out.begin(), out.end(), [](const Mutant& a, const Mutant& b) {
      return catalogue_number(a.id) < catalogue_number(b.id);
    });
    return out;
  }();
  return all;
}

std::vector<Mutant> mutants_for(const Backend& backend) {
  std::vector<Mutant> out = mutants();
  out.push_back(from(race_mutant_for(backend)));
  return out;
}

const Mutant* find_mutant(const std::string& id) {
  for (const Mutant& m : mutants())
    if (m.id == id) return &m;
  return nullptr;
}

MutantRig::MutantRig(const Mutant& m, Backend& base) {
  if (m.wrap_backend) wrapped = m.wrap_backend(base);
  backend = wrapped ? wrapped.get() : &base;
  loop = m.loop ? m.loop : correct_loop();
}

}  // namespace gradeq
