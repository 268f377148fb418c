// worker.h — a list of jobs shared between this process and a forked
// worker process, so that RapidCheck (which keeps global state and so runs
// on one thread per process) can use a second core.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace gradeq {

// Runs job 0..count-1, each exactly once, in the order `order` lists them
// (empty: 0, 1, ...), and returns each one's result (one line of text) by
// index. With a worker, `first` runs here while the
// worker starts on the jobs; then both processes take the next job not yet
// started (a counter in shared memory), and the worker hands its results
// back through a file when the list is done. Without one, `first` and then
// every job run here. An exception from a job (here or in the worker) is
// rethrown here, with the worker stopped first; a worker that dies is an
// error (std::runtime_error) too.
std::vector<std::string> share_jobs(std::size_t count, const std::function<std::string(std::size_t)>& job,
                                    const std::function<void()>& first, bool with_worker,
                                    std::vector<std::size_t> order = {});

}  // namespace gradeq
