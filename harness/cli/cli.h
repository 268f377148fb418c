// cli.h — the `gradeq` command line as a function: check, report, sweep,
// selftest and list, with every backend of harness/core/backends.h (built in,
// and any a program registered before the call). Returns the exit code:
// 0 pass, 1 verification failure, 2 bad usage or input, 3 environment.
#pragma once

namespace gradeq {

int run_cli(int argc, char** argv);

}  // namespace gradeq
