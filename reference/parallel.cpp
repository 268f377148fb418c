// parallel.cpp — the reference's thread limit.
#include "reference/parallel.h"

#include <algorithm>
#include <cstdlib>

namespace gradeq::ref {

long thread_limit() {
  static const long cores = std::max(1u, std::thread::hardware_concurrency());
  if (const char* v = std::getenv("GRADEQ_THREADS")) {
    const long n = std::strtol(v, nullptr, 10);
    if (n >= 1) return n;
  }
  return cores;
}

}  // namespace gradeq::ref
