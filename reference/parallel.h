// parallel.h — how many threads the reference may use, and running
// independent pieces of work at once (a loop's items, or two pieces). Each piece computes alone and in the
// same way whatever the thread count, so results are bitwise independent of
// it (GRADEQ_THREADS=1 runs everything on the calling thread).
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

#include "reference/bounded.h"

namespace gradeq::ref {

// GRADEQ_THREADS, when set to a positive number; else every core.
long thread_limit();

// Runs task(i, thread) for every i in [0, count) on at most `threads`
// threads, the calling one (thread 0) among them; each thread takes the
// next index when it is free, so which thread computes an item must not
// change its result. New threads start under the caller's rounding model
// and finite-store setting. When a task throws, the threads take no more
// items, and the exception is rethrown here (the lowest thread's).
template <class F>
void parallel_for(long count, long threads, F&& task) {
  threads = std::max(1L, std::min(threads, count));
  if (threads == 1) {
    for (long i = 0; i < count; ++i) task(i, 0L);
    return;
  }
  const RoundingModel model = rounding_model();
  const bool finite = stores_known_finite();
  std::atomic<long> next{0};
  std::vector<std::exception_ptr> failed(static_cast<std::size_t>(threads));
  const auto work = [&](long t) {
    try {
      for (long i = next++; i < count; i = next++) task(i, t);
    } catch (...) {
      failed[static_cast<std::size_t>(t)] = std::current_exception();
      next = count;
    }
  };
  std::vector<std::thread> workers;
  for (long t = 1; t < threads; ++t)
    workers.emplace_back([&, t] {
      const ScopedRoundingModel scope(model);
      const ScopedFiniteStores stores(finite);
      work(t);
    });
  work(0);
  for (std::thread& w : workers) w.join();
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
}

// Runs `first` and `second` at once (one after the other when
// thread_limit() is 1), and waits for both.
template <class F, class G>
void concurrently(F&& first, G&& second) {
  parallel_for(2, thread_limit(), [&](long i, long) {
    if (i == 0) {
      first();
    } else {
      second();
    }
  });
}

}  // namespace gradeq::ref
