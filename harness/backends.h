// backends.h — backends by name, for the CLI and the tests. Asking for a
// backend this build or this machine cannot provide raises
// EnvironmentError, which the CLI maps to exit code 3.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace gradeq {

class EnvironmentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct BackendInfo {
  std::string name;
  bool available = false;
  std::string detail;  // device name, or why it is unavailable
};

std::vector<BackendInfo> list_backends();
std::unique_ptr<Backend> make_backend(const std::string& name);

}  // namespace gradeq
