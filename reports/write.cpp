// write.cpp — putting the rendered reports on disk.
#include <fstream>
#include <stdexcept>

#include "harness/backends.h"
#include "reports/report.h"

namespace gradeq {

void require_writable_directory(const std::filesystem::path& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw EnvironmentError("cannot write into " + dir.string() + ": " + error.message());
  const std::filesystem::path probe = dir / ".gradeq-write-probe";
  {
    std::ofstream out(probe);
    out << "probe\n";
    if (!out) throw EnvironmentError("cannot write into " + dir.string());
  }
  std::filesystem::remove(probe, error);
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path);
  out << text;
  if (!out) throw EnvironmentError("cannot write " + path.string());
}

void write_reports(const std::filesystem::path& dir, const CheckReport& report) {
  std::filesystem::create_directories(dir);
  write_text(dir / "report.json", report_json(report).dump(2) + "\n");
  write_text(dir / "report.md", report_markdown(report));
  write_text(dir / "junit.xml", report_junit(report));
}

}  // namespace gradeq
