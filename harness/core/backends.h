// backends.h — backends by name, for the CLI, the tests and a user's own
// program. Built in: the host backend cpu and its forms cpu-direct and
// cpu-adversarial, and cuda and cuda-direct where built; a program adds its
// own with register_backend() before it hands over to the command line
// (gradeq/gradeq.h), and every verb then accepts the name. Asking for a
// backend this build or this machine cannot provide raises
// EnvironmentError, which the CLI maps to exit code 3.
#pragma once

#include <functional>
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

// Makes a fresh backend; called once per command (and once per worker
// where a command runs several).
using BackendFactory = std::function<std::unique_ptr<Backend>()>;

// Adds a backend under `name` (letters, digits, '-', '_', '.'; not one in
// use, built in or registered). `description` is what `gradeq list
// backends` shows. Throws std::invalid_argument otherwise.
void register_backend(const std::string& name, const std::string& description, BackendFactory factory);

// Built-in backends first, then registered ones in registration order.
std::vector<BackendInfo> list_backends();
std::vector<std::string> backend_names();
// std::invalid_argument for an unknown name (the message lists the known
// ones), EnvironmentError for one that cannot run here.
std::unique_ptr<Backend> make_backend(const std::string& name);
// One of the built-in host backends (cpu and its forms): host memory only,
// one instance per thread where a command runs several.
bool is_host_backend(const std::string& name);

}  // namespace gradeq
