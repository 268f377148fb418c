// progress_line.cpp — the progress line on stderr.
#include "harness/cli/progress_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>

namespace gradeq {
namespace {

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

}  // namespace

ProgressSink make_progress() {
  if (stderr_is_terminal())
    return [](const std::string& line) {
      // Rewritten in place, so cut to the terminal's width: a line that
      // wraps leaves its first rows behind at every rewrite.
      winsize size{};
      const std::size_t width = ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 1 ? size.ws_col - 1 : 0;
      std::cerr << "\r\033[K" << (width && line.size() > width ? line.substr(0, width) : line) << std::flush;
    };
  auto last = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  return [last](const std::string& line) {
    const auto now = std::chrono::steady_clock::now();
    if (now - *last < std::chrono::seconds(30)) return;
    *last = now;
    std::cerr << line << std::endl;
  };
}

void end_progress() {
  if (stderr_is_terminal()) std::cerr << "\r\033[K" << std::flush;
}

}  // namespace gradeq
