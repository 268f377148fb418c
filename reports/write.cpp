// write.cpp — putting the rendered reports on disk.
#include <fstream>
#include <stdexcept>

#include "harness/core/backends.h"
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

void require_writable_file(const std::string& file, const std::string& option) {
  if (std::filesystem::is_directory(file))
    throw std::invalid_argument(option + " " + file + " is a directory; it names the file to write");
  // The directory it is written into ("." for a bare name).
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  require_writable_directory(parent.empty() ? std::filesystem::path(".") : parent);
}

// Written under a temporary name and renamed when complete: an interrupted
// run never leaves a file that looks finished.
void write_text(const std::filesystem::path& path, const std::string& text) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  if (std::filesystem::is_directory(path)) throw EnvironmentError("cannot write " + path.string() + ": it is a directory");
  std::filesystem::path partial = path;
  partial += ".partial";
  {
    std::ofstream out(partial);
    out << text;
    if (!out) throw EnvironmentError("cannot write " + path.string());
  }
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  if (error) throw EnvironmentError("cannot write " + path.string() + ": " + error.message());
}

void remove_stale(const std::filesystem::path& dir, std::initializer_list<const char*> files) {
  std::error_code error;
  for (const char* f : files) {
    std::filesystem::remove(dir / f, error);
    if (error) throw EnvironmentError("cannot remove the earlier " + (dir / f).string() + ": " + error.message());
  }
}

std::string write_reports(const std::filesystem::path& dir, const CheckReport& report, const nlohmann::json* drift,
                          bool fail_on_drift, bool plots, const Attached& attached) {
  std::filesystem::create_directories(dir);
  nlohmann::json json = report_json(report);
  if (drift) json["drift"] = *drift;
  if (attached.beside) json["beside"] = compare_beside(json, *attached.beside);
  const std::string appended = (drift ? drift_markdown(*drift) : std::string()) +
                               (attached.beside ? beside_markdown(json.at("beside")) : std::string());
  write_text(dir / "report.json", json.dump(2) + "\n");
  write_text(dir / "junit.xml", report_junit(report, drift, fail_on_drift));
  if (!plots) {
    write_text(dir / "report.md", report_markdown(report) + appended);
    return "";
  }
  const DrawnFigures drawn = draw_figures(report_figures(json, attached), dir / "plots");
  write_text(dir / "report.md", report_markdown(report, &drawn.figures) + appended);
  write_text(dir / "report.html", report_html(json, drawn, drift, attached));
  return drawn.problem;
}

}  // namespace gradeq
