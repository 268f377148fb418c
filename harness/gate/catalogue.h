// catalogue.h — what `gradeq list` shows, as plain data: the embedded
// scenarios, the properties, the mutants and the backends. The gate
// assembles it; reports/ formats it (catalogue_listing).
#pragma once

#include <string>
#include <vector>

#include "harness/core/backends.h"

namespace gradeq {

struct ListedScenario {
  std::string name, model, split;  // the model and the split described in a line
};

struct ListedProperty {
  std::string name, description;
};

struct ListedMutant {
  std::string id, bug, source;
  std::string mode;  // a data-parallel mutant's shard mode (replicated, sharded); empty for the others
};

struct Catalogue {
  std::vector<ListedScenario> scenarios;                // the default suite
  std::vector<ListedScenario> data_parallel_scenarios;  // --suite data_parallel: each split one rank's
  std::vector<ListedProperty> properties;
  std::vector<ListedMutant> mutants;                // single-process, B19 in its host form
  std::vector<ListedMutant> data_parallel_mutants;  // `selftest --suite data_parallel`
  std::vector<BackendInfo> backends;                // built in, then registered
};

Catalogue make_catalogue();

}  // namespace gradeq
