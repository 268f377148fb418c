// plots.h — the report's figures, drawn by gnuplot as SVG files. Each
// figure is a gnuplot script with its data inline, built from report.json
// (and selftest.json where given): the writers compute nothing a reader
// could not recompute from those files.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gradeq {

// Studies run apart from the report and shown in it: a self-test
// (selftest.json from `gradeq selftest --out`), the normalizer training
// sweep (sweep_norms.json from `gradeq sweep norms --windows K --out`) and
// another run's report.json to set beside this one's (--beside).
struct Attached {
  const nlohmann::json* selftest = nullptr;
  const nlohmann::json* training = nullptr;
  const nlohmann::json* beside = nullptr;
};

struct Figure {
  std::string id;       // file stem: plots/<id>.svg, plots/<id>.gp
  std::string section;  // "scenario:<name>", "norm_sweep", "precision_sweep", "selftest", "norm_training"
  std::string title, caption;
  std::string script;   // gnuplot commands after the terminal and output are set
  bool tall = false;    // 560 pixels high instead of 420 (long tick labels)
};

// The figures of a report: per scenario the worst err/bound of each tensor
// next to its error and bound; the norm sweep's divergence and running-
// statistics drift by micro-batch size; the precision sweep's error and
// bound by N; with a self-test, its kill matrix and the campaign's
// histogram with each mutant's smallest detecting ratio; with the training
// sweep, its distance, held-out, training-loss and drift figures.
std::vector<Figure> report_figures(const nlohmann::json& report, const Attached& attached = {});

struct DrawnFigures {
  std::vector<Figure> figures;
  std::vector<std::string> svg;  // per figure: the SVG text, empty where it was not drawn
  std::string problem;           // why figures are missing (gnuplot absent or failing), empty when none
};

// Writes each figure's script into dir and runs gnuplot on it. gnuplot is
// looked up on PATH (GRADEQ_GNUPLOT names another program).
DrawnFigures draw_figures(const std::vector<Figure>& figures, const std::filesystem::path& dir);

}  // namespace gradeq
