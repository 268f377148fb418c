// process.cpp — the process's setup (allocator tuning, the restart onto huge
// pages, the signal handlers) and its communicator.
#include "harness/cli/process.h"

#include <signal.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>

#include "harness/core/backends.h"
#if GRADEQ_HAVE_MPI
#include "kernels/mpi/mpi_communicator.h"
#endif

namespace gradeq {
namespace {

// Ctrl-C and SIGTERM stop the run at once, with 128 + the signal: reports
// are written whole at the end under temporary names (write_text), and the
// earlier run's are removed before the run, so nothing that looks complete
// is left behind.
extern "C" void stop_on_signal(int signal) {
  static const char message[] = "\ngradeq: interrupted; no report was written\n";
  [[maybe_unused]] const auto written = ::write(STDERR_FILENO, message, sizeof message - 1);
  ::_exit(128 + signal);
}

void stop_on_signals() {
  struct sigaction action {};
  action.sa_handler = stop_on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

// Freed memory stays in the process. The reference allocates and frees many
// large temporaries (a matrix of bounded values per layer and micro-batch;
// at real widths parameter-sized ones of hundreds of MB), and each block
// given back to the kernel has its pages faulted in again by the next one.
// Each setting closes one way back: no block is mmap'd (an mmap'd block is
// unmapped when freed, and M_MMAP_THRESHOLD cannot be raised above 32 MiB),
// one arena serves every thread (another thread's arena maps any block
// above 64 MiB whatever M_MMAP_MAX says), and the heap's top is kept.
// docs/PERFORMANCE.md §2 has the measurements.
void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  mallopt(M_TOP_PAD, 1 << 28);
#endif
}

// Whether argv is this process's own command line (/proc/self/cmdline):
// only then may the program restart itself with it.
bool is_own_command_line(int argc, char** argv) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  if (!in) return false;
  const std::string cmdline{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::string expected;
  for (int i = 0; i < argc; ++i) {
    expected += argv[i];
    expected += '\0';
  }
  return cmdline == expected;
}

// The heap on transparent huge pages. At real widths the reference's
// parameter-sized temporaries grow the heap by gigabytes, and faulting that
// in 4-KiB pages is slow (on a VM each fault costs microseconds). glibc
// places its heap on huge pages only when its tunable glibc.malloc.hugetlb
// is set, and reads tunables only when a program starts; so the program
// restarts itself once, with the tunable added to GLIBC_TUNABLES, when it
// was started with its own command line and the tunable is not already
// there (a user's setting, even =0, is kept). Where the kernel offers no
// huge pages the setting changes nothing. docs/PERFORMANCE.md §2 has the
// measurements.
void restart_with_huge_pages(int argc, char** argv) {
#if defined(__GLIBC__) && defined(__linux__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::string_view(tunables).find("glibc.malloc.hugetlb") != std::string_view::npos) return;
  if (argc < 1 || !is_own_command_line(argc, argv)) return;
  const std::string value =
      tunables && *tunables ? std::string(tunables) + ":glibc.malloc.hugetlb=1" : "glibc.malloc.hugetlb=1";
  if (setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  std::cout.flush();
  std::cerr.flush();
  // The binary by its path, so that the process keeps its name.
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  execv(!error && std::filesystem::exists(self) ? self.c_str() : "/proc/self/exe", argv);
  // The restart failed: go on as started (the tunable stays in the
  // environment, where it only reaches children).
#else
  (void)argc;
  (void)argv;
#endif
}

}  // namespace

void set_up_process(int argc, char** argv) {
  restart_with_huge_pages(argc, argv);
  keep_freed_memory();
  stop_on_signals();
}

std::unique_ptr<Communicator> make_communicator(double timeout) {
#if GRADEQ_HAVE_MPI
  if (MpiCommunicator::launched_by_mpirun()) return std::make_unique<MpiCommunicator>(timeout);
#else
  const char* ranks = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (ranks && std::atoi(ranks) > 1)
    throw EnvironmentError(std::string("this gradeq was built without MPI (install libopenmpi-dev and rebuild), so it "
                                       "cannot run as one of ") + ranks + " ranks");
#endif
  (void)timeout;
  return std::make_unique<LocalCommunicator>();
}

}  // namespace gradeq
