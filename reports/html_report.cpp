// html_report.cpp — report.html: one self-contained page (no script, no
// fetch; the figures are inline SVG) with the verdict at the top, a table
// of scenarios and properties coloured by status, failures in full, details
// folded per scenario, and the figures.
#include <cmath>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "reports/report.h"

namespace gradeq {
namespace {

std::string escaped(const std::string& s) { return markup_escaped(s); }

std::string ratio_text(const nlohmann::json& j) {
  if (j.is_number()) {
    const double v = j.get<double>();
    return v == 0.0 ? "0" : fmt::format("{:.2e}", v);
  }
  return j.is_string() ? j.get<std::string>() : "–";
}

// A status as a CSS class: pass, fail, inconclusive, divergence, notrun.
std::string status_class(const std::string& status) {
  if (status == "pass") return "pass";
  if (status == "FAIL" || status == "fail") return "fail";
  if (status == "expected divergence") return "divergence";
  if (status == "inconclusive") return "inconclusive";
  return "notrun";
}

// gnuplot's SVG, inline: without its XML prologue, and with its element
// ids made unique on the page.
std::string inline_svg(const std::string& svg, const std::string& id) {
  const std::size_t start = svg.find("<svg");
  if (start == std::string::npos) return "";
  std::string out;
  const std::string body = svg.substr(start);
  for (std::size_t i = 0; i < body.size(); ++i) {
    for (const char* key : {"id=\"", "href=\"#", "url(#"}) {
      const std::string k = key;
      if (body.compare(i, k.size(), k) == 0) {
        out += k + id + "-";
        i += k.size();
        break;
      }
    }
    out += body[i];
  }
  return out;
}

void figure_html(std::ostringstream& h, const Figure& f, const std::string& svg) {
  h << "<figure class=\"plot\" data-figure=\"" << escaped(f.id) << "\">\n";
  if (svg.empty()) {
    h << "<p class=\"missing\">figure not drawn: " << escaped(f.title) << "</p>\n";
  } else {
    h << inline_svg(svg, f.id) << "\n";
  }
  h << "<figcaption>" << escaped(f.caption) << " <a href=\"plots/" << escaped(f.id) << ".svg\">SVG</a></figcaption>\n"
    << "</figure>\n";
}

void figures_of(std::ostringstream& h, const DrawnFigures& drawn, const std::string& section) {
  for (std::size_t i = 0; i < drawn.figures.size(); ++i)
    if (drawn.figures[i].section == section) figure_html(h, drawn.figures[i], drawn.svg[i]);
}

constexpr const char* kStyle = R"(
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px; color: #212121; }
h1 { margin-bottom: 0.2em; }
.verdict { font-size: 1.6em; font-weight: bold; padding: 0.4em 0.8em; border-radius: 6px; display: inline-block; }
.verdict.pass { background: #e8f5e9; color: #1b5e20; } .verdict.fail { background: #ffebee; color: #b71c1c; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #cfd8dc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.pass { background: #e8f5e9; } td.fail { background: #ffcdd2; font-weight: bold; }
td.inconclusive { background: #fff3e0; } td.divergence { background: #e3f2fd; } td.notrun { background: #eceff1; }
.failures { border-left: 6px solid #c62828; background: #fff5f5; padding: 0.5em 1em; }
.failures pre, .drift pre { white-space: pre-wrap; font-size: 0.85em; }
details { margin: 0.5em 0; border: 1px solid #e0e0e0; border-radius: 4px; padding: 0.3em 0.8em; }
summary { cursor: pointer; font-weight: 600; }
figure.plot { margin: 1em 0; } figure.plot svg { max-width: 100%; height: auto; }
figcaption { font-size: 0.85em; color: #555; } .missing { color: #b71c1c; } code { word-break: break-all; }
)";

}  // namespace

std::string report_html(const nlohmann::json& report, const DrawnFigures& drawn, const nlohmann::json* drift,
                        const Attached& attached) {
  const nlohmann::json* selftest = attached.selftest;
  const bool passed = report.at("passed").get<bool>();
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>gradeq report: "
    << (passed ? "PASS" : "FAIL") << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n";
  h << "<h1>gradeq report</h1>\n<p><span id=\"verdict\" class=\"verdict " << (passed ? "pass\">PASS" : "fail\">FAIL")
    << "</span></p>\n";
  h << "<p>" << escaped(fmt::format("backend {}, seed {}, {} cases per property, {} shapes, {} error model, {:.1f} s; "
                                    "gradeq {}, {}",
                                    report.at("backend").get<std::string>(), report.at("seed").dump(),
                                    report.at("cases_per_property").dump(), report.at("size").get<std::string>(),
                                    report.at("error_model").get<std::string>(), report.at("seconds").get<double>(),
                                    report.at("version").get<std::string>(), report.at("started_at").get<std::string>()))
    << "</p>\n";
  if (!drawn.problem.empty())
    h << "<p class=\"missing\">Some figures were not drawn: " << escaped(drawn.problem) << "</p>\n";

  // Failures in full, at the top.
  std::ostringstream failures;
  for (const nlohmann::json& s : report.at("scenarios"))
    if (!s.at("passed").get<bool>()) {
      failures << "<li><b>scenario " << escaped(s.at("name").get<std::string>()) << "</b>: "
               << escaped(s.at("failure").get<std::string>());
      // Every failing verdict: what the run did wrong and what its tensors say.
      std::ostringstream said;
      for (const nlohmann::json& v : s.at("verdicts"))
        for (const char* key : {"problems", "diagnosis"})
          for (const nlohmann::json& line : v.at(key))
            said << "<li>" << escaped(v.at("verdict").get<std::string>()) << ": " << escaped(line.get<std::string>())
                 << "</li>";
      if (!said.str().empty()) failures << "<ul>" << said.str() << "</ul>";
      failures << "</li>\n";
    }
  for (const nlohmann::json& p : report.at("properties"))
    if (p.at("ran").get<bool>() && !p.at("passed").get<bool>()) {
      failures << "<li><b>property " << escaped(p.at("name").get<std::string>()) << "</b>: "
               << escaped(p.at("message").get<std::string>());
      if (!p.at("counterexample").get<std::string>().empty())
        failures << "<pre>" << escaped(p.at("counterexample").get<std::string>()) << "</pre>";
      if (!p.at("replay").get<std::string>().empty())
        failures << "replay: <code>" << escaped(p.at("replay").get<std::string>()) << "</code>";
      failures << "</li>\n";
    }
  if (!failures.str().empty())
    h << "<section id=\"failures\" class=\"failures\"><h2>Failures</h2>\n<ul>\n" << failures.str() << "</ul></section>\n";

  // The table of checks.
  h << "<h2>Scenarios</h2>\n<table id=\"scenarios\">\n<tr><th>scenario</th><th>math equivalence</th><th>kernel "
       "correctness</th><th>accumulation equivalence</th><th>time</th></tr>\n";
  for (const nlohmann::json& s : report.at("scenarios")) {
    h << "<tr><td><a href=\"#scenario-" << escaped(s.at("name").get<std::string>()) << "\">"
      << escaped(s.at("name").get<std::string>()) << "</a></td>";
    for (const nlohmann::json& v : s.at("verdicts")) {
      const std::string status = v.at("status").get<std::string>();
      h << "<td class=\"" << status_class(status) << "\">" << escaped(status) << " (" << ratio_text(v.at("worst_ratio"))
        << ")</td>";
    }
    h << "<td>" << fmt::format("{:.2f} s", s.at("seconds").get<double>()) << "</td></tr>\n";
  }
  h << "</table>\n";
  const std::vector<std::vector<std::string>> memory = memory_table(report.at("scenarios"));
  if (memory.size() > 1) {
    h << "<h2>Memory</h2>\n<p>The accumulated run's bytes at its peak by category, and the peaks predicted from "
         "one-micro-batch runs (fixed + per-sample bytes).</p>\n<table id=\"memory\">\n";
    for (std::size_t i = 0; i < memory.size(); ++i) {
      h << "<tr>";
      for (const std::string& cell : memory[i])
        h << (i == 0 ? "<th>" : i > 0 && &cell == &memory[i].back() ? "<td class=\"" + status_class(cell) + "\">" : "<td>")
          << escaped(cell) << (i == 0 ? "</th>" : "</td>");
      h << "</tr>\n";
    }
    h << "</table>\n";
    figures_of(h, drawn, "memory");
  }
  h << "<h2>Properties</h2>\n<table id=\"properties\">\n<tr><th>property</th><th>status</th><th>cases</th>"
       "<th>worst err/bound</th><th>discarded</th><th>time</th></tr>\n";
  for (const nlohmann::json& p : report.at("properties")) {
    const bool ran = p.at("ran").get<bool>();
    const std::string status = !ran ? "not run" : p.at("passed").get<bool>() ? "pass" : "FAIL";
    h << "<tr><td>" << escaped(p.at("name").get<std::string>()) << "</td><td class=\"" << status_class(status)
      << "\">" << status << "</td><td>" << p.at("cases").dump() << "</td><td>" << ratio_text(p.at("worst_ratio"))
      << "</td><td>" << p.at("discarded_vacuous").dump() << " vacuous + " << p.at("discarded_ill_conditioned").dump()
      << " ill-conditioned</td><td>" << fmt::format("{:.2f} s", p.at("seconds").get<double>()) << "</td></tr>\n";
  }
  h << "</table>\n";

  if (drift) {
    h << "<section class=\"drift\" id=\"drift\"><h2>Drift against the baseline</h2>\n<pre>"
      << escaped(drift_markdown(*drift)) << "</pre></section>\n";
  }

  if (report.contains("beside")) {
    const nlohmann::json& b = report.at("beside");
    h << "<section id=\"beside\"><h2>Beside backend " << escaped(b.value("other_backend", "")) << "</h2>\n<p>"
      << escaped(beside_caption(b)) << "</p>\n<table id=\"beside-tensors\">\n";
    const std::vector<std::vector<std::string>> table = beside_table(b);
    for (std::size_t i = 0; i < table.size(); ++i) {
      h << "<tr>";
      for (const std::string& cell : table[i]) h << (i == 0 ? "<th>" : "<td>") << escaped(cell) << (i == 0 ? "</th>" : "</td>");
      h << "</tr>\n";
    }
    h << "</table></section>\n";
  }

  // Per scenario, folded: its model, verdicts per tensor, and its figure.
  h << "<h2>Scenario details</h2>\n";
  for (const nlohmann::json& s : report.at("scenarios")) {
    const std::string name = s.at("name").get<std::string>();
    const bool ok = s.at("passed").get<bool>();
    h << "<details id=\"scenario-" << escaped(name) << "\"" << (ok ? "" : " open") << "><summary>" << escaped(name)
      << " — " << (ok ? "pass" : "FAIL") << "</summary>\n<p>model <code>" << escaped(s.at("model").get<std::string>())
      << "</code>, split <code>" << escaped(s.at("split_text").get<std::string>()) << "</code></p>\n";
    figures_of(h, drawn, "scenario:" + name);
    h << "<table>\n<tr><th>verdict</th><th>window</th><th>tensor</th><th>max |error|</th><th>worst err/bound</th>"
         "<th>status</th></tr>\n";
    for (const nlohmann::json& v : s.at("verdicts"))
      for (const nlohmann::json& t : v.at("tensors")) {
        const std::string failure = t.at("failure").get<std::string>();
        const std::string status = v.at("status").get<std::string>() == "expected divergence"
                                       ? "expected divergence"
                                       : (t.at("passed").get<bool>() ? "pass" : "FAIL");
        h << "<tr><td>" << escaped(v.at("verdict").get<std::string>()) << "</td><td>" << t.at("window").dump()
          << "</td><td>" << escaped(t.at("tensor").get<std::string>()) << "</td><td>" << ratio_text(t.at("max_abs"))
          << "</td><td>" << ratio_text(t.at("worst_ratio")) << "</td><td class=\"" << status_class(status) << "\">"
          << escaped(failure.empty() ? status : failure) << "</td></tr>\n";
      }
    h << "</table>\n</details>\n";
  }
  if (report.contains("norm_sweep")) {
    h << "<h2>Normalizers: BatchNorm against LayerNorm, GroupNorm and RMSNorm</h2>\n";
    figures_of(h, drawn, "norm_sweep");
  }
  if (report.contains("precision_sweep")) {
    h << "<h2>Accumulation precision</h2>\n";
    figures_of(h, drawn, "precision_sweep");
  }
  if (const nlohmann::json* t = attached.training) {
    h << "<h2>Normalizers over a training run</h2>\n<p id=\"norm-training\">"
      << (t->at("passed").get<bool>() ? "Every normalizer that treats samples independently stayed within its bounds' reach"
                                      : "FAILED: a normalizer that treats samples independently left its bounds' reach")
      << escaped(fmt::format(" over {} windows ({}; {:.0f} s).", t->at("windows").get<long>(),
                             t->at("task").get<std::string>(), t->at("seconds").get<double>()))
      << "</p>\n";
    figures_of(h, drawn, "norm_training");
  }
  if (selftest) {
    h << "<h2>Self-test</h2>\n<p>" << (selftest->at("passed").get<bool>() ? "passed" : "FAILED")
      << ": every mutant must be caught by a property, correct code must pass.</p>\n";
    figures_of(h, drawn, "selftest");
    if (selftest->contains("campaign")) {
      const nlohmann::json& c = selftest->at("campaign");
      h << "<table id=\"campaign\">\n<tr><th>mutant</th><th>detected</th><th>smallest detecting err/bound</th>"
           "<th>separation</th></tr>\n";
      for (const nlohmann::json& m : c.at("mutants"))
        h << "<tr><td>" << escaped(m.at("id").get<std::string>()) << "</td><td>" << m.at("detected").dump() << " of "
          << m.at("cases").dump() << "</td><td>" << ratio_text(m.at("smallest_detecting_ratio")) << "</td><td>"
          << ratio_text(m.at("separation")) << "</td></tr>\n";
      h << "</table>\n<p>Correct code: " << c.at("cases").dump() << " cases, " << c.at("false_alarms").dump()
        << " false alarms, worst err/bound " << ratio_text(c.at("worst_ratio")) << ".</p>\n";
    }
  }
  h << "<p><a href=\"report.json\">report.json</a> · <a href=\"report.md\">report.md</a> · "
       "<a href=\"junit.xml\">junit.xml</a></p>\n</body>\n</html>\n";
  return h.str();
}

}  // namespace gradeq
