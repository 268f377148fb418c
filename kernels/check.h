// check.h — argument checks for kernels, reporting file and line. A failed
// check is a programming error in the caller (wrong shapes, wrong lists),
// raised as gradeq::KernelError so the harness can report it, not crash.
#pragma once

#include <stdexcept>
#include <string>

namespace gradeq {

class KernelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void kernel_failure(const char* file, int line, const std::string& message) {
  throw KernelError(std::string(file) + ":" + std::to_string(line) + ": " + message);
}

}  // namespace gradeq

#define GRADEQ_REQUIRE(cond, message)                                   \
  do {                                                                  \
    if (!(cond)) ::gradeq::kernel_failure(__FILE__, __LINE__, (message)); \
  } while (0)
