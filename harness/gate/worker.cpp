// worker.cpp — jobs shared with a forked worker process.
#include "harness/gate/worker.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <new>
#include <stdexcept>

namespace gradeq {
namespace {

// The next job not yet started, in memory both processes see.
class SharedCounter {
 public:
  SharedCounter() {
    void* p = mmap(nullptr, sizeof(std::atomic<long>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("share_jobs: cannot map shared memory");
    counter_ = new (p) std::atomic<long>(0);
  }
  ~SharedCounter() { munmap(counter_, sizeof(std::atomic<long>)); }
  SharedCounter(const SharedCounter&) = delete;
  SharedCounter& operator=(const SharedCounter&) = delete;
  long take() { return counter_->fetch_add(1); }

 private:
  std::atomic<long>* counter_ = nullptr;
};

// The worker process: stopped and reaped if this process leaves early.
class Worker {
 public:
  explicit Worker(pid_t pid) : pid_(pid) {}
  ~Worker() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // Waits for it; throws unless it exited with status 0.
  void finish() {
    int status = 0;
    const pid_t pid = pid_;
    pid_ = -1;
    if (waitpid(pid, &status, 0) != pid) throw std::runtime_error("share_jobs: lost the worker process");
    if (WIFSIGNALED(status))
      throw std::runtime_error("the worker process died of signal " + std::to_string(WTERMSIG(status)));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw std::runtime_error("the worker process failed (exit " + std::to_string(WEXITSTATUS(status)) + ")");
  }

 private:
  pid_t pid_;
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Lines "index<TAB>result" or "error<TAB>message".
void write_line(std::FILE* f, const std::string& key, const std::string& text) {
  std::fprintf(f, "%s\t%s\n", key.c_str(), text.c_str());
}

}  // namespace

std::vector<std::string> share_jobs(std::size_t count, const std::function<std::string(std::size_t)>& job,
                                    const std::function<void()>& first, bool with_worker, std::vector<std::size_t> order) {
  if (order.empty())
    for (std::size_t i = 0; i < count; ++i) order.push_back(i);
  std::vector<bool> listed(count, false);
  for (std::size_t i : order) {
    if (i >= count || listed[i]) throw std::invalid_argument("share_jobs: the order must list every job once");
    listed[i] = true;
  }
  if (order.size() != count) throw std::invalid_argument("share_jobs: the order must list every job once");
  std::vector<std::string> results(count);
  if (!with_worker || count < 2) {
    if (first) first();
    for (std::size_t i : order) results[i] = job(i);
    return results;
  }
  SharedCounter next;
  const std::unique_ptr<std::FILE, FileCloser> file(std::tmpfile());
  if (!file) throw std::runtime_error("share_jobs: cannot create a temporary file");
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("share_jobs: fork failed");
  if (pid == 0) {
    int status = 0;
    try {
      for (long n = next.take(); n < static_cast<long>(count); n = next.take()) {
        const std::size_t i = order[static_cast<std::size_t>(n)];
        write_line(file.get(), std::to_string(i), job(i));
      }
    } catch (const std::exception& e) {
      write_line(file.get(), "error", e.what());
      status = 1;
    } catch (...) {
      write_line(file.get(), "error", "an exception that is not a std::exception");
      status = 1;
    }
    std::fflush(nullptr);
    _exit(status);  // no destructors or exit handlers of the parent's objects
  }
  Worker worker(pid);
  std::vector<bool> here(count, false);
  if (first) first();
  for (long n = next.take(); n < static_cast<long>(count); n = next.take()) {
    const std::size_t i = order[static_cast<std::size_t>(n)];
    results[i] = job(i);
    here[i] = true;
  }
  std::string error;
  try {
    worker.finish();
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::rewind(file.get());
  std::string line;
  for (int c = std::fgetc(file.get()); c != EOF; c = std::fgetc(file.get())) {
    if (c != '\n') {
      line += static_cast<char>(c);
      continue;
    }
    const std::size_t tab = line.find('\t');
    const std::string key = line.substr(0, tab), text = tab == std::string::npos ? "" : line.substr(tab + 1);
    if (key == "error") {
      error = "the worker process: " + text;
    } else {
      const std::size_t i = std::stoul(key);
      if (i >= count || here[i]) throw std::runtime_error("share_jobs: the worker returned job " + key + " twice");
      results[i] = text;
      here[i] = true;
    }
    line.clear();
  }
  if (!error.empty()) throw std::runtime_error(error);
  for (std::size_t i = 0; i < count; ++i)
    if (!here[i]) throw std::runtime_error("share_jobs: job " + std::to_string(i) + " was not run");
  return results;
}

}  // namespace gradeq
