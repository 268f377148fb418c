// progress.h — where long runs report that they are alive: a sink that
// takes one line at a time ("[3/10] scenario token_ce_padded_uneven"). The
// command line decides how lines are shown (rewritten in place on a
// terminal, rate-limited in a log); an empty sink shows nothing.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gradeq {

using ProgressSink = std::function<void(const std::string&)>;

// The parts of one job that run at once (the full-batch and the accumulated
// reference runs), each with its latest status, shown together on one line
// at every update: "reference: full batch window 1/2; accumulated window
// 1/2, micro-batch 7/16". The parts keep the order they are declared in,
// whichever thread reports first; a part shows once it has a status.
// Updates may come from several threads.
class ProgressBoard {
 public:
  ProgressBoard(ProgressSink sink, std::string heading, const std::vector<std::string>& parts)
      : sink_(std::move(sink)), heading_(std::move(heading)) {
    for (const std::string& p : parts) parts_.emplace_back(p, "");
  }

  // `part` must be one of the declared parts.
  void set(const std::string& part, const std::string& status) {
    if (!sink_) return;
    const std::lock_guard<std::mutex> lock(mutex_);
    std::size_t i = 0;
    while (i < parts_.size() && parts_[i].first != part) ++i;
    if (i == parts_.size()) throw std::logic_error("ProgressBoard: undeclared part '" + part + "'");
    parts_[i].second = status;
    std::string line = heading_;
    bool first = true;
    for (const auto& [name, latest] : parts_) {
      if (latest.empty()) continue;
      line += first ? ": " : "; ";
      line += name + " " + latest;
      first = false;
    }
    sink_(line);
  }

 private:
  ProgressSink sink_;
  std::string heading_;
  std::mutex mutex_;
  std::vector<std::pair<std::string, std::string>> parts_;
};

}  // namespace gradeq
