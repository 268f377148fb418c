// main.cpp — the stock `gradeq` executable: the command line with the
// built-in backends (a user's program registers its own, gradeq/gradeq.h).
#include "harness/cli/cli.h"

int main(int argc, char** argv) { return gradeq::run_cli(argc, argv); }
