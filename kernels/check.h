// check.h — argument checks for kernels, reporting file and line. A failed
// check is a programming error in the caller (wrong shapes, wrong lists) or
// a device call that failed, raised as gradeq::BackendError so the harness
// can report it, not crash. Must not depend on anything outside kernels/.
#pragma once

#include <stdexcept>
#include <string>

#include "kernels/backend.h"

namespace gradeq {

class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void backend_failure(const char* file, int line, const std::string& message) {
  throw BackendError(std::string(file) + ":" + std::to_string(line) + ": " + message);
}

}  // namespace gradeq

#define GRADEQ_REQUIRE(cond, message)                                    \
  do {                                                                   \
    if (!(cond)) ::gradeq::backend_failure(__FILE__, __LINE__, (message)); \
  } while (0)

namespace gradeq {

// t must be [rows, cols]; `what` names the argument in the message.
inline void require_shape(const Tensor& t, long rows, long cols, const char* what) {
  GRADEQ_REQUIRE(t.rows == rows && t.cols == cols,
                 std::string(what) + ": expected [" + std::to_string(rows) + ", " + std::to_string(cols) +
                     "], got [" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "]");
}

}  // namespace gradeq
