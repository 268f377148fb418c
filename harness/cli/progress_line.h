// progress_line.h — a command's progress on stderr while it runs: one line
// rewritten in place on a terminal; in a log, the latest line at most every
// 30 seconds.
#pragma once

#include "harness/core/progress.h"

namespace gradeq {

ProgressSink make_progress();
// Clears the line on a terminal (before the summary is printed).
void end_progress();

}  // namespace gradeq
