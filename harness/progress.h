// progress.h — where long runs report that they are alive: a sink that
// takes one line at a time ("[3/10] scenario token_ce_padded_uneven"). The
// command line decides how lines are shown (rewritten in place on a
// terminal, rate-limited in a log); an empty sink shows nothing.
#pragma once

#include <functional>
#include <string>

namespace gradeq {

using ProgressSink = std::function<void(const std::string&)>;

}  // namespace gradeq
