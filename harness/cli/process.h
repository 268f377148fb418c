// process.h — the process that runs the command line: set up before any
// argument is read (the allocator keeps freed memory, the heap sits on huge
// pages, for which the program restarts itself once, and Ctrl-C or SIGTERM
// ends the run at once), and its communicator among mpirun's ranks.
#pragma once

#include <memory>

#include "kernels/communicator.h"

namespace gradeq {

// run_cli calls it first, with its own arguments. May restart the program
// with the same arguments (execv), and then does not return.
void set_up_process(int argc, char** argv);

// The communicator of this process: MPI where mpirun started it (and gradeq
// was built with MPI), otherwise one local rank. EnvironmentError where
// mpirun started several ranks of a gradeq built without MPI. `timeout`:
// the seconds a collective may wait for the other ranks.
std::unique_ptr<Communicator> make_communicator(double timeout);

}  // namespace gradeq
