// parallel.h — how many threads the reference may use, and running two
// independent pieces of work at once. Each piece computes alone and in the
// same way whatever the thread count, so results are bitwise independent of
// it (GRADEQ_THREADS=1 runs everything on the calling thread).
#pragma once

#include <exception>
#include <thread>
#include <utility>

#include "reference/bounded.h"

namespace gradeq::ref {

// GRADEQ_THREADS, when set to a positive number; else every core.
long thread_limit();

// Runs `first` on a new thread and `second` on this one, then waits for
// both; sequentially when thread_limit() is 1. The new thread starts under
// the caller's rounding model and finite-store setting. An exception from
// either is rethrown here (the first's when both throw).
template <class F, class G>
void concurrently(F&& first, G&& second) {
  if (thread_limit() <= 1) {
    first();
    second();
    return;
  }
  const RoundingModel model = rounding_model();
  const bool finite = stores_known_finite();
  std::exception_ptr failed;
  std::thread worker([&] {
    try {
      const ScopedRoundingModel scope(model);
      const ScopedFiniteStores stores(finite);
      first();
    } catch (...) {
      failed = std::current_exception();
    }
  });
  std::exception_ptr failed_here;
  try {
    second();
  } catch (...) {
    failed_here = std::current_exception();
  }
  worker.join();
  if (failed) std::rethrow_exception(failed);
  if (failed_here) std::rethrow_exception(failed_here);
}

}  // namespace gradeq::ref
