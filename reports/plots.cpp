// plots.cpp — gnuplot scripts for the report's figures, and drawing them.
#include "reports/plots.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>

extern char** environ;

namespace gradeq {
namespace {

// A report number: JSON numbers, or "inf" / "-inf" / "nan" (json_number.h).
double number(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "inf") return HUGE_VAL;
    if (s == "-inf") return -HUGE_VAL;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// A value on a logarithmic axis: gnuplot skips NaN (zero and non-finite
// values have no place there; the tables say what they were).
std::string log_value(double v) { return std::isfinite(v) && v > 0.0 ? fmt::format("{:.6e}", v) : "NaN"; }

// Text inside a gnuplot double-quoted string.
std::string quoted(std::string s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// File-name stem from a scenario name.
std::string stem(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ? c : '_';
  return out;
}

constexpr const char* kBoundLine = "set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 1.5 lc rgb \"#c62828\"\n";

// Per tensor (the name without the "full: "/"acc: " of kernel checks), the
// worst err/bound of kernel correctness and of accumulation equivalence over
// windows, and the error and bound at the element where accumulation (or,
// where it is an expected divergence, the kernel) used most of its bound.
struct TensorPoint {
  double kernel = 0.0, accumulation = std::numeric_limits<double>::quiet_NaN();
  double ratio_at = -1.0, error = 0.0, bound = 0.0;
};

Figure scenario_figure(const nlohmann::json& s) {
  std::vector<std::string> order;
  std::map<std::string, TensorPoint> points;
  for (const nlohmann::json& v : s.at("verdicts")) {
    const std::string verdict = v.at("verdict").get<std::string>();
    if (verdict == "math equivalence" || v.at("status").get<std::string>() == "expected divergence") continue;
    const bool kernel = verdict == "kernel correctness";
    for (const nlohmann::json& t : v.at("tensors")) {
      std::string name = t.at("tensor").get<std::string>();
      if (kernel && name.find(": ") != std::string::npos) name = name.substr(name.find(": ") + 2);
      if (!points.count(name)) order.push_back(name);
      TensorPoint& p = points[name];
      double ratio = number(t.at("worst_ratio"));
      if (t.at("non_finite_actual").get<long>() > 0) ratio = HUGE_VAL;
      if (kernel) {
        p.kernel = std::max(p.kernel, ratio);
      } else {
        p.accumulation = std::isnan(p.accumulation) ? ratio : std::max(p.accumulation, ratio);
      }
      // The accumulation verdict's element wins over the kernel's.
      const double rank = (kernel ? 0.0 : 1e300) + (std::isfinite(ratio) ? ratio : 1e299);
      if (rank > p.ratio_at) {
        p.ratio_at = rank;
        p.error = number(t.at("worst_error"));
        p.bound = number(t.at("worst_bound"));
      }
    }
  }
  // Non-finite ratios (a NaN or Inf in the kernel's values) are drawn at the
  // top, 10x above the largest finite one.
  double top = 1.0;
  for (const auto& [name, p] : points)
    for (double r : {p.kernel, p.accumulation})
      if (std::isfinite(r)) top = std::max(top, r);
  auto shown = [&](double r) { return std::isinf(r) ? log_value(10.0 * top) : log_value(r); };
  std::ostringstream data;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const TensorPoint& p = points[order[i]];
    data << i << " " << quoted(order[i]) << " " << shown(p.kernel) << " " << shown(p.accumulation) << " "
         << log_value(std::abs(p.error)) << " " << log_value(p.bound) << "\n";
  }
  const std::string name = s.at("name").get<std::string>();
  Figure f;
  f.id = "scenario_" + stem(name);
  f.tall = true;
  f.section = "scenario:" + name;
  f.title = name + ": worst error/bound per tensor";
  f.caption = "Left: each tensor's worst error/bound over windows, kernel correctness (K vs R from the kernel's "
              "state) and accumulation equivalence (K_acc vs R_full); the dashed line is the bound. Non-finite "
              "values are drawn at the top. Right: the error and the bound at that element.";
  std::ostringstream g;
  bool any_error = false;  // a positive ratio somewhere: else there is nothing a log axis can show
  for (const auto& [n, p] : points)
    any_error = any_error || p.kernel > 0.0 || p.accumulation > 0.0;
  if (!any_error) {
    f.caption = "Every compared tensor is bit for bit equal to its reference (error 0).";
    g << "set label 1 \"every error is exactly 0: the runs agree bit for bit\" at graph 0.5, 0.5 center\n"
         "set xrange [0:1]\nset yrange [0:1]\nunset xtics\nunset ytics\nplot 2 notitle\n";
    f.script = g.str();
    return f;
  }
  g << "$d << EOD\n" << data.str() << "EOD\n";
  g << "set multiplot layout 1,2 title " << quoted(f.title) << " noenhanced\nunset title\n"
       "set logscale y\nset format y \"10^{%L}\"\nset grid ytics lc rgb \"#dddddd\"\n"
       "set xtics rotate by -60 font \",7\" nomirror noenhanced\nset key top left font \",9\"\n"
       "set xrange [-0.5:"
    << (order.empty() ? 0.5 : static_cast<double>(order.size()) - 0.5) << "]\n"
    << "set ylabel \"worst error / bound\"\n"
    << kBoundLine
    << "plot $d using 1:3:xtic(2) with points pt 7 ps 0.8 lc rgb \"#1565c0\" title \"kernel\", "
       "'' using 1:4 with points pt 5 ps 0.7 lc rgb \"#ef6c00\" title \"accumulation\"\n"
       "unset arrow\nset ylabel \"|error|, bound at the worst element\"\n"
       "plot $d using 1:5:xtic(2) with points pt 7 ps 0.8 lc rgb \"#6a1b9a\" title \"|error|\", "
       "'' using 1:6 with points pt 6 ps 0.8 lc rgb \"#2e7d32\" title \"bound\"\n"
       "unset multiplot\n";
  f.script = g.str();
  return f;
}

// The accumulated run's peak by category as a fraction of the full batch's
// peak, per scenario with measured memory; the predicted peak on top.
std::optional<Figure> memory_figure(const nlohmann::json& report) {
  static const char* const kCategories[] = {"parameters", "gradients", "optimizer_state", "activations", "scratch"};
  std::ostringstream data;
  long n = 0;
  for (const nlohmann::json& s : report.at("scenarios")) {
    if (!s.contains("memory")) continue;
    const nlohmann::json& m = s.at("memory");
    const double full = m.at("full_batch").at("peak").get<double>();
    if (!(full > 0.0)) continue;
    data << n++ << " " << quoted(s.at("name").get<std::string>());
    for (const char* c : kCategories) data << " " << fmt::format("{:.6e}", m.at("accumulated").at(c).get<double>() / full);
    data << " "
         << (m.contains("prediction") ? fmt::format("{:.6e}", m.at("prediction").at("accumulated").get<double>() / full)
                                      : std::string("NaN"))
         << "\n";
  }
  if (n == 0) return std::nullopt;
  Figure f;
  f.id = "memory";
  f.section = "memory";
  f.tall = true;
  f.title = "Peak memory of N micro-batches, as a fraction of the full batch's";
  f.caption = "Each scenario's accumulated run at its peak, by category, divided by the peak of the same window as "
              "one batch (1 = no saving); the diamond is the peak predicted from one-micro-batch runs.";
  std::ostringstream g;
  g << "$d << EOD\n" << data.str() << "EOD\n"
    << "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.85 border -1\n"
       "set boxwidth 0.7\nset yrange [0:1.05]\nset ylabel \"fraction of the full-batch peak\"\n"
       "set grid ytics lc rgb \"#dddddd\"\nset key outside right top font \",9\"\n"
       "set xtics rotate by -60 font \",7\" nomirror noenhanced\n"
       "plot $d using 3:xtic(2) title \"parameters\" lc rgb \"#1565c0\", '' using 4 title \"gradients\" lc rgb "
       "\"#ef6c00\", '' using 5 title \"optimizer state\" lc rgb \"#6a1b9a\", '' using 6 title \"activations\" lc rgb "
       "\"#2e7d32\", '' using 7 title \"scratch\" lc rgb \"#9e9e9e\", '' using 1:8 with points pt 13 ps 1.2 lc rgb "
       "\"#c62828\" title \"predicted peak\"\n";
  f.script = g.str();
  return f;
}

std::vector<Figure> norm_figures(const nlohmann::json& sweep) {
  std::vector<std::string> norms;
  std::map<std::string, std::vector<const nlohmann::json*>> rows;
  for (const nlohmann::json& r : sweep.at("rows")) {
    const std::string n = r.at("norm").get<std::string>();
    if (!rows.count(n)) norms.push_back(n);
    rows[n].push_back(&r);
  }
  std::ostringstream blocks, divergence, drift;
  int drift_series = 0;
  for (std::size_t i = 0; i < norms.size(); ++i) {
    blocks << "$n" << i << " << EOD\n";
    for (const nlohmann::json* r : rows[norms[i]]) {
      const nlohmann::json* running = r->contains("running_statistics_divergence")
                                          ? &r->at("running_statistics_divergence")
                                          : nullptr;
      blocks << r->at("micro_batch").get<long>() << " " << log_value(number(r->at("gradient_divergence").at("mean")))
             << " " << (running ? log_value(number(running->at("mean"))) : "NaN") << "\n";
    }
    blocks << "EOD\n";
    divergence << (i ? ", " : "plot ") << "$n" << i << " using 1:2 with linespoints lw 2 pt " << 5 + i
               << " title " << quoted(norms[i]);
    const bool has_running = rows[norms[i]].front()->contains("running_statistics_divergence");
    if (has_running)
      drift << (drift_series++ ? ", " : "plot ") << "$n" << i << " using 1:3 with linespoints lw 2 pt " << 5 + i
            << " title " << quoted(norms[i]);
  }
  const std::string axes =
      "set logscale xy\nset format y \"10^{%L}\"\nset grid lc rgb \"#dddddd\"\nset xlabel \"samples per micro-batch\"\n"
      "set key outside right font \",9\"\n";
  Figure d;
  d.id = "norm_divergence";
  d.section = "norm_sweep";
  d.title = "Normalizer divergence against micro-batch size";
  d.caption = "Mean over seeds of ||G_acc - G_full|| / ||G_full|| for the window's gradient, " +
              sweep.at("model").get<std::string>() + ". BatchNorm's statistics per micro-batch diverge; "
              "LayerNorm, GroupNorm and RMSNorm stay at float64 rounding; exact-window BatchNorm matches.";
  d.script = blocks.str() + axes + "set ylabel \"gradient divergence\"\n" + divergence.str() + "\n";
  std::vector<Figure> out = {d};
  if (drift_series > 0) {
    Figure r;
    r.id = "norm_running_statistics";
    r.section = "norm_sweep";
    r.title = "BatchNorm running statistics: drift against micro-batch size";
    r.caption = "Mean over seeds of ||S_acc - S_full|| / ||S_full - S_0|| for the running mean and variance.";
    r.script = blocks.str() + axes + "set ylabel \"running-statistics drift\"\n" + drift.str() + "\n";
    out.push_back(r);
  }
  return out;
}

Figure precision_figure(const nlohmann::json& sweep) {
  std::vector<std::string> names;
  std::map<std::string, std::vector<const nlohmann::json*>> rows;
  for (const nlohmann::json& r : sweep.at("rows")) {
    std::string n = r.at("accumulate").get<std::string>() + (r.at("compensated").get<bool>() ? " + Kahan" : "");
    if (!rows.count(n)) names.push_back(n);
    rows[n].push_back(&r);
  }
  static const char* colours[] = {"#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a", "#c62828", "#00838f", "#5d4037"};
  std::ostringstream blocks, plot;
  for (std::size_t i = 0; i < names.size(); ++i) {
    blocks << "$p" << i << " << EOD\n";
    for (const nlohmann::json* r : rows[names[i]])
      blocks << r->at("micro_batches").get<long>() << " " << log_value(number(r->at("error").at("mean"))) << " "
             << log_value(number(r->at("bound").at("mean"))) << "\n";
    blocks << "EOD\n";
    const char* c = colours[i % 7];
    plot << (i ? ", " : "plot ") << "$p" << i << " using 1:2 with linespoints lw 2 pt 7 lc rgb \"" << c
         << "\" title " << quoted(names[i]) << ", $p" << i << " using 1:3 with lines dt 2 lw 1.5 lc rgb \"" << c
         << "\" title " << quoted(names[i] + " bound");
  }
  Figure f;
  f.id = "precision_sweep";
  f.section = "precision_sweep";
  f.title = "Accumulated gradient error against N, per buffer";
  f.caption = "Mean over seeds of ||K_acc - R_full|| / ||R_full|| (solid) and of the error model's bound (dashed), "
              "by the number of micro-batches N, " + sweep.at("model").get<std::string>() + ".";
  f.script = blocks.str() +
             "set logscale xy\nset format y \"10^{%L}\"\nset grid lc rgb \"#dddddd\"\nset xlabel \"micro-batches N\"\n"
             "set ylabel \"relative error\"\nset key outside right font \",9\"\n" + plot.str() + "\n";
  return f;
}

std::vector<Figure> selftest_figures(const nlohmann::json& st) {
  std::vector<Figure> out;
  std::vector<std::string> mutants, properties;
  std::map<std::pair<std::string, std::string>, bool> caught;
  for (const nlohmann::json& c : st.at("kill_matrix")) {
    const std::string m = c.at("mutant").get<std::string>(), p = c.at("property").get<std::string>();
    if (std::find(mutants.begin(), mutants.end(), m) == mutants.end()) mutants.push_back(m);
    if (std::find(properties.begin(), properties.end(), p) == properties.end()) properties.push_back(p);
    caught[{m, p}] = c.at("caught").get<bool>();
  }
  if (!mutants.empty()) {
    std::ostringstream g;
    g << "$k << EOD\n";
    for (std::size_t mi = 0; mi < mutants.size(); ++mi)
      for (std::size_t pi = 0; pi < properties.size(); ++pi) {
        const auto it = caught.find({mutants[mi], properties[pi]});
        g << pi << " " << mi << " " << (it == caught.end() ? "NaN" : it->second ? "1" : "0") << "\n";
      }
    g << "EOD\nset xtics rotate by -45 font \",8\" noenhanced (";
    for (std::size_t pi = 0; pi < properties.size(); ++pi) g << (pi ? ", " : "") << quoted(properties[pi]) << " " << pi;
    // Each mutant by its id and the start of its bug's title.
    std::map<std::string, std::string> bugs;
    if (st.contains("mutants"))
      for (const nlohmann::json& m : st.at("mutants")) bugs[m.at("id").get<std::string>()] = m.at("bug").get<std::string>();
    auto label = [&](const std::string& id) {
      std::string bug = bugs.count(id) ? bugs[id] : "";
      if (bug.size() > 44) {
        std::size_t cut = 43;  // at a character's first byte (UTF-8)
        while (cut > 0 && (static_cast<unsigned char>(bug[cut]) & 0xC0) == 0x80) --cut;
        bug = bug.substr(0, cut) + "…";
      }
      return bug.empty() ? id : id + "  " + bug;
    };
    g << ")\nset ytics font \",8\" noenhanced (";
    for (std::size_t mi = 0; mi < mutants.size(); ++mi)
      g << (mi ? ", " : "") << quoted(label(mutants[mi])) << " " << mi;
    g << ")\nset xrange [-0.5:" << properties.size() - 0.5 << "]\nset yrange [" << mutants.size() - 0.5
      << ":-0.5]\nset cbrange [0:1]\nunset colorbox\nset palette defined (0 \"#eceff1\", 1 \"#2e7d32\")\n"
         "plot $k using 1:2:3 with image pixels notitle\n";
    Figure f;
    f.id = "selftest_kill_matrix";
    f.tall = true;
    f.section = "selftest";
    f.title = "Kill matrix: which property catches which mutant";
    f.caption = "Green: the property failed on the mutant (caught, with a shrunk counterexample); grey: it passed.";
    f.script = g.str();
    out.push_back(f);
  }
  if (st.contains("campaign")) {
    const nlohmann::json& c = st.at("campaign");
    const nlohmann::json& edges = c.at("histogram_edges");
    const nlohmann::json& counts = c.at("histogram");
    std::ostringstream g;
    g << "$h << EOD\n";
    for (std::size_t i = 0; i < counts.size() && i + 1 < edges.size(); ++i) {
      // The first bin, [0, e1), holds the exact cases: drawn from e1 / 10.
      const double hi = number(edges[i + 1]), lo = i == 0 && number(edges[0]) == 0.0 ? hi / 10.0 : number(edges[i]);
      if (lo > 0.0 && std::isfinite(hi)) g << lo << " " << hi << " " << counts[i].get<long>() << "\n";
    }
    g << "EOD\n$m << EOD\n";
    for (const nlohmann::json& m : c.at("mutants")) {
      const double r = number(m.at("smallest_detecting_ratio"));
      if (std::isfinite(r) && r > 0.0) g << r << " " << quoted(m.at("id").get<std::string>()) << "\n";
    }
    g << "EOD\nset logscale x\nset format x \"10^{%L}\"\nset grid lc rgb \"#dddddd\"\n"
         "set xlabel \"error / bound\"\nset ylabel \"correct cases\"\nset style fill solid 0.6 border -1\n"
         "set key top left font \",9\"\nset yrange [0:*]\nset offsets 0, 0, graph 0.25, 0\n"
      << "set arrow from first " << number(c.at("worst_ratio"))
      << ", graph 0 to first " << number(c.at("worst_ratio")) << ", graph 1 nohead lw 2 lc rgb \"#1565c0\"\n"
      << "set arrow from first 1, graph 0 to first 1, graph 1 nohead dt 2 lw 1.5 lc rgb \"#c62828\"\n"
         "plot $h using (sqrt($1*$2)):($3/2):1:2:(0):3 with boxxyerror fs solid 0.6 lc rgb \"#90a4ae\" title \"correct code\", "
         "$m using 1:(0) with points pt 9 ps 1.2 lc rgb \"#c62828\" title \"mutant: smallest detecting ratio\", "
         "$m using 1:(0):2 with labels rotate by 90 left offset 0,1 font \",7\" noenhanced notitle\n";
    Figure f;
    f.id = "selftest_campaign";
    f.section = "selftest";
    f.title = "Calibration campaign: correct code against the mutants";
    f.caption = "Histogram of correct code's error/bound (the first bar: below 1e-6, exact cases included; blue line: "
                "the worst), the bound (dashed), and each mutant's smallest detecting error/bound (triangles): the "
                "gap is the separation.";
    f.script = g.str();
    out.push_back(f);
  }
  return out;
}

std::string gnuplot_program() {
  const char* p = std::getenv("GRADEQ_GNUPLOT");
  return p && *p ? p : "gnuplot";
}

// Runs gnuplot on the script; stderr into log. Empty on success, else why not.
std::string run_gnuplot(const std::filesystem::path& script, const std::filesystem::path& log) {
  const std::string program = gnuplot_program();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::string script_path = script.string();
  std::vector<char*> argv = {const_cast<char*>(program.c_str()), script_path.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return program + " not found: the plots need gnuplot (Debian: apt-get install gnuplot-nox)";
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return "lost the " + program + " process";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    return program + " not found: the plots need gnuplot (Debian: apt-get install gnuplot-nox)";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream in(log);
    std::string first;
    std::getline(in, first);
    return program + " failed on " + script.filename().string() + " (see " + log.string() + "): " + first;
  }
  return "";
}

// The training sweep (sweep_norms.json of `gradeq sweep norms --windows K`):
// per normalizer and micro-batch size, against the window.
std::vector<Figure> training_figures(const nlohmann::json& t) {
  static const char* colours[] = {"#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a", "#c62828", "#00838f", "#5d4037"};
  const std::string about = t.at("model").get<std::string>() + "; " + t.at("task").get<std::string>() + ".";
  std::vector<std::string> norms;
  for (const nlohmann::json& n : t.at("one_batch")) norms.push_back(n.at("norm").get<std::string>());
  const auto norm_index = [&](const std::string& n) {
    return static_cast<std::size_t>(std::find(norms.begin(), norms.end(), n) - norms.begin());
  };
  std::vector<long> sizes;
  for (const nlohmann::json& c : t.at("curves")) {
    const long b = c.at("micro_batch").get<long>();
    if (std::find(sizes.begin(), sizes.end(), b) == sizes.end()) sizes.push_back(b);
  }
  const auto size_index = [&](long b) {
    return static_cast<std::size_t>(std::find(sizes.begin(), sizes.end(), b) - sizes.begin());
  };
  const auto label = [](const nlohmann::json& c) {
    return fmt::format("{} b={} (N={})", c.at("norm").get<std::string>(), c.at("micro_batch").get<long>(),
                       c.at("micro_batches").get<long>());
  };
  const std::string by_window = "set grid lc rgb \"#dddddd\"\nset xlabel \"window (optimizer step)\"\nset key outside right font \",9\"\n";
  // 1. Distance between the trajectories, every curve: colour by micro-batch
  //    size, dash by normalizer.
  std::ostringstream blocks, dist, drift, loss;
  std::size_t i = 0, drifts = 0;
  for (const nlohmann::json& c : t.at("curves")) {
    blocks << "$c" << i << " << EOD\n";
    const nlohmann::json& d = c.at("distance");
    for (std::size_t w = 0; w < d.size(); ++w) {
      blocks << w + 1 << " " << log_value(number(d[w])) << " "
             << (c.contains("running_drift") ? log_value(number(c.at("running_drift")[w])) : "NaN") << " "
             << number(c.at("accumulated")[w].at("held_out_loss")) << "\n";
    }
    blocks << "EOD\n";
    const std::string style = fmt::format("lw 2 dt {} lc rgb \"{}\"", 1 + norm_index(c.at("norm").get<std::string>()),
                                          colours[size_index(c.at("micro_batch").get<long>()) % 7]);
    dist << (i ? ", " : "plot ") << "$c" << i << " using 1:2 with lines " << style << " title " << quoted(label(c));
    if (c.contains("running_drift"))
      drift << (drifts++ ? ", " : "plot ") << "$c" << i << " using 1:3 with lines " << style << " title " << quoted(label(c));
    if (c.at("expected_divergence").get<bool>())
      loss << ", $c" << i << " using 1:4 with lines " << style << " title " << quoted(label(c));
    ++i;
  }
  std::vector<Figure> out;
  Figure d;
  d.id = "norm_training_distance";
  d.section = "norm_training";
  d.title = "Accumulated against one batch over training: parameter distance";
  d.caption = "||theta_acc - theta_full|| / ||theta_full - theta_0|| after each window. Colour: micro-batch size; "
              "dash: normalizer. Only BatchNorm's trajectories part; the others stay at float64 rounding (and within "
              "their bounds: see the table). " + about;
  d.script = blocks.str() + by_window + "set logscale y\nset format y \"10^{%L}\"\nset ylabel \"parameter distance\"\n" +
             dist.str() + "\n";
  d.tall = true;
  out.push_back(d);
  // 2. Held-out accuracy after the last window against the micro-batch
  //    size, accumulated and one batch, per normalizer (Wu & He's figure).
  std::ostringstream acc_blocks, acc_plot;
  for (std::size_t n = 0; n < norms.size(); ++n) {
    const double full = number(t.at("one_batch")[n].at("points").back().at("held_out_accuracy"));
    acc_blocks << "$a" << n << " << EOD\n";
    for (const nlohmann::json& c : t.at("curves"))
      if (c.at("norm").get<std::string>() == norms[n])
        acc_blocks << c.at("micro_batch").get<long>() << " " << 100.0 * number(c.at("accumulated").back().at("held_out_accuracy"))
                   << " " << 100.0 * full << "\n";
    acc_blocks << "EOD\n";
    const char* colour = colours[n % 7];
    acc_plot << (n ? ", " : "plot ") << "$a" << n << " using 1:2 with linespoints lw 2 pt 7 lc rgb \"" << colour
             << "\" title " << quoted(norms[n] + ", accumulated") << ", $a" << n
             << " using 1:3 with lines dt 2 lw 1.5 lc rgb \"" << colour << "\" title " << quoted(norms[n] + ", one batch");
  }
  Figure a;
  a.id = "norm_training_accuracy";
  a.section = "norm_training";
  a.title = "Held-out accuracy after training, against micro-batch size";
  a.caption = "Evaluation mode (BatchNorm with its running statistics) after the last window. Solid: accumulated over "
              "N micro-batches of b; dashed: the same steps as one batch. " + about;
  a.script = acc_blocks.str() + "set logscale x 2\nset grid lc rgb \"#dddddd\"\nset xlabel \"samples per micro-batch\"\n"
             "set ylabel \"held-out accuracy (%)\"\nset key outside right font \",9\"\n" + acc_plot.str() + "\n";
  out.push_back(a);
  // 3. BatchNorm's held-out loss over training, accumulated and one batch.
  std::ostringstream full_blocks, full_plot;
  for (std::size_t n = 0; n < norms.size(); ++n) {
    bool diverges = false;
    for (const nlohmann::json& c : t.at("curves"))
      diverges = diverges || (c.at("norm").get<std::string>() == norms[n] && c.at("expected_divergence").get<bool>());
    if (!diverges) continue;
    full_blocks << "$f" << n << " << EOD\n";
    const nlohmann::json& p = t.at("one_batch")[n].at("points");
    for (std::size_t w = 0; w < p.size(); ++w)
      full_blocks << w + 1 << " " << number(p[w].at("held_out_loss")) << "\n";
    full_blocks << "EOD\n";
    full_plot << (full_plot.tellp() > 0 ? ", " : "plot ") << "$f" << n << " using 1:2 with lines lw 3 lc rgb \"black\" title "
              << quoted(norms[n] + " one batch");
  }
  if (full_plot.tellp() > 0) {
    Figure l;
    l.id = "norm_training_loss";
    l.section = "norm_training";
    l.title = "BatchNorm: held-out loss over training";
    l.caption = "Mean cross-entropy on the held-out set in evaluation mode after each window: one batch (black) and "
                "accumulated at each micro-batch size. " + about;
    l.script = blocks.str() + full_blocks.str() + by_window + "set ylabel \"held-out loss\"\n" + full_plot.str() + loss.str() + "\n";
    out.push_back(l);
  }
  // 4. BatchNorm's running statistics.
  if (drifts > 0) {
    Figure r;
    r.id = "norm_training_running";
    r.section = "norm_training";
    r.title = "BatchNorm running statistics over training: drift";
    r.caption = "||S_acc - S_full|| / ||S_full - S_0|| after each window, S the running means and variances. " + about;
    r.script = blocks.str() + by_window + "set logscale y\nset format y \"10^{%L}\"\nset ylabel \"running-statistics drift\"\n" +
               drift.str() + "\n";
    out.push_back(r);
  }
  return out;
}

}  // namespace

std::vector<Figure> report_figures(const nlohmann::json& report, const Attached& attached) {
  std::vector<Figure> out;
  for (const nlohmann::json& s : report.at("scenarios")) out.push_back(scenario_figure(s));
  if (std::optional<Figure> memory = memory_figure(report)) out.push_back(std::move(*memory));
  if (report.contains("norm_sweep"))
    for (Figure& f : norm_figures(report.at("norm_sweep"))) out.push_back(std::move(f));
  if (report.contains("precision_sweep")) out.push_back(precision_figure(report.at("precision_sweep")));
  if (attached.selftest)
    for (Figure& f : selftest_figures(*attached.selftest)) out.push_back(std::move(f));
  if (attached.training)
    for (Figure& f : training_figures(*attached.training)) out.push_back(std::move(f));
  return out;
}

DrawnFigures draw_figures(const std::vector<Figure>& figures, const std::filesystem::path& dir) {
  DrawnFigures out;
  out.figures = figures;
  out.svg.resize(figures.size());
  std::filesystem::create_directories(dir);
  for (std::size_t i = 0; i < figures.size(); ++i) {
    const Figure& f = figures[i];
    const std::filesystem::path svg = std::filesystem::absolute(dir / (f.id + ".svg"));
    const std::filesystem::path script = dir / (f.id + ".gp");
    std::filesystem::remove(svg);
    {
      std::ofstream gp(script);
      gp << "# " << f.title << "\n"
         << "set terminal svg size 900," << (f.tall ? 560 : 420)
         << " dynamic enhanced font \"sans,11\" background rgb \"white\"\n"
         << "set output " << quoted(svg.string()) << "\n"
         << "set title " << quoted(f.title) << " noenhanced\n"
         << f.script;
    }
    const std::string problem = run_gnuplot(script, dir / (f.id + ".log"));
    if (!problem.empty()) {
      out.problem = problem;
      if (problem.find("not found") != std::string::npos) break;  // no figure can be drawn
      continue;
    }
    std::ifstream in(svg);
    std::ostringstream text;
    text << in.rdbuf();
    out.svg[i] = text.str();
    std::filesystem::remove(dir / (f.id + ".log"));
  }
  return out;
}

}  // namespace gradeq
