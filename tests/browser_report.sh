#!/usr/bin/env bash
# report.html in headless Chromium: a passing report (with a self-test's
# figures) and a failing one (a registered backend with dw = instead of
# dw +=). Each page must load without a console message, show its verdict at
# the top (the failing one its failures before anything else), and hold a
# drawn SVG in every figure. Screenshots are kept in ARTIFACTS.
# Usage: browser_report.sh path/to/gradeq path/to/registered_backend ARTIFACTS
# Exit 77 (skipped, with the reason) without Chromium or gnuplot.
set -u
gradeq="$1"
registered="$2"
artifacts="$3"
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then echo "SKIP: no chromium (Debian: apt-get install chromium)"; exit 77; fi
if ! command -v gnuplot >/dev/null; then echo "SKIP: no gnuplot (Debian: apt-get install gnuplot-nox)"; exit 77; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A small self-test with a campaign, shown in the passing report.
"$gradeq" selftest --cases 20 --campaign 300 --campaign-mutant-cases 40 --out "$work/st" >"$work/st.log" 2>&1 ||
  { fail "selftest exited $?"; tail -20 "$work/st.log"; }
# A short normalizer training sweep, shown in it too.
"$gradeq" sweep norms --windows 3 --out "$work/nt" >"$work/nt.log" 2>&1 || { fail "sweep norms --windows 3 exited $?"; tail -20 "$work/nt.log"; }
"$gradeq" report --out "$work/pass" --cases 5 --selftest "$work/st/selftest.json" \
  --norm-training "$work/nt/sweep_norms.json" >"$work/pass.log" 2>&1
code=$?
[ "$code" = 0 ] || { fail "report on correct code exited $code"; tail -20 "$work/pass.log"; }
"$registered" report --backend overwriting --out "$work/fail" --cases 5 >"$work/fail.log" 2>&1
code=$?
[ "$code" = 1 ] || { fail "report on the overwriting backend exited $code, expected 1"; tail -20 "$work/fail.log"; }

check_page() {  # check_page NAME VERDICT
  local name="$1" verdict="$2" page="$work/$1/report.html"
  [ -s "$page" ] || { fail "$name: no report.html"; return; }
  # Chromium logs every console message of the page as CONSOLE(...) on stderr.
  "$chromium" --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 --dump-dom "file://$page" \
    >"$work/$name.dom" 2>"$work/$name.console"
  if grep -E "CONSOLE|Uncaught" "$work/$name.console"; then fail "$name: console messages (above)"; fi
  "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1800 \
    --screenshot="$artifacts/report_$name.png" "file://$page" >/dev/null 2>&1 ||
    fail "$name: no screenshot"
  [ -s "$artifacts/report_$name.png" ] || fail "$name: empty screenshot"
  python3 - "$work/$name.dom" "$verdict" "$name" <<'PY' || failures=$((failures + 1))
import sys
from html.parser import HTMLParser

dom, verdict, name = sys.argv[1], sys.argv[2], sys.argv[3]

class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.figures = []        # per figure: [id, svg elements drawn]
        self.in_figure = 0
        self.in_svg = 0
        self.order = []          # section ids in document order
        self.verdict = None
        self.capture = False
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure" and "plot" in a.get("class", ""):
            self.figures.append([a.get("data-figure"), 0])
            self.in_figure = 1
        elif tag == "svg" and self.in_figure:
            self.in_svg += 1
        elif self.in_svg and tag in ("path", "polyline", "polygon", "rect", "circle", "line", "use", "image"):
            self.figures[-1][1] += 1
        if a.get("id"):
            self.order.append(a["id"])
        if a.get("id") == "verdict":
            self.capture = True
    def handle_endtag(self, tag):
        if tag == "svg" and self.in_svg:
            self.in_svg -= 1
        if tag == "figure":
            self.in_figure = 0
    def handle_data(self, data):
        if self.capture:
            self.verdict = data.strip()
            self.capture = False

p = Page()
p.feed(open(dom, encoding="utf-8").read())
problems = []
if p.verdict != verdict:
    problems.append(f"verdict at the top is {p.verdict!r}, expected {verdict!r}")
if not p.figures:
    problems.append("no figures")
for fid, drawn in p.figures:
    if drawn < 3:
        problems.append(f"figure {fid} has no drawn SVG ({drawn} elements)")
first = [i for i in p.order if i in ("verdict", "failures", "scenarios")]
if verdict == "FAIL" and first[:3] != ["verdict", "failures", "scenarios"]:
    problems.append(f"the failures are not at the top: {first}")
if verdict == "PASS" and "failures" in p.order:
    problems.append("a passing report lists failures")
ids = {f for f, _ in p.figures}
for needed in ("norm_divergence", "norm_running_statistics", "precision_sweep"):
    if needed not in ids:
        problems.append(f"figure {needed} missing")
if name == "pass":
    for needed in ("selftest_kill_matrix", "selftest_campaign", "norm_training_distance", "norm_training_accuracy",
                   "norm_training_loss", "norm_training_running"):
        if needed not in ids:
            problems.append(f"figure {needed} missing")
for pr in problems:
    print(f"FAIL: {name}: {pr}")
print(f"ok: {name}: verdict {p.verdict}, {len(p.figures)} figures drawn" if not problems else "")
sys.exit(1 if problems else 0)
PY
  local bytes
  bytes=$(stat -c %s "$page")
  echo "$name: report.html $bytes bytes, report.md $(wc -l <"$work/$name/report.md") lines"
}
check_page pass PASS
check_page fail FAIL
# The figures are also files a viewer opens on their own: well-formed SVG.
for svg in "$work"/pass/plots/*.svg "$work"/fail/plots/*.svg; do
  python3 -c 'import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); sys.exit(0 if r.tag.endswith("svg") else 1)' \
    "$svg" 2>"$work/svg.err" || { fail "$svg is not well-formed SVG: $(head -1 "$work/svg.err")"; }
done
# A default report stays small. It grows with the suite by design, one table
# row, one details block and one figure per scenario, so the budget is per
# item: no figure over 150 kB (the largest, lm_small's 62 tensors, is 108 kB;
# a figure that draws every element instead of every tensor is megabytes),
# report.md at most 45 lines besides two per scenario and one per property
# (39 with 30 scenarios, 19 properties, the self-test's section and the
# training sweep's four figure links), and report.html at most 300 kB
# besides 110 kB per scenario (issue 40's 30 scenarios: 3.06 MB, of which
# 2.09 MB of SVG and 0.95 MB of per-scenario tables; 96 kB a scenario once
# the shared figures and text are taken out).
for svg in "$work"/pass/plots/*.svg; do
  [ "$(stat -c %s "$svg")" -le 150000 ] || fail "$svg is larger than 150 kB"
done
read -r scenarios properties < <(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(len(r["scenarios"]), len(r["properties"]))' "$work/pass/report.json")
lines=$(wc -l <"$work/pass/report.md")
bytes=$(stat -c %s "$work/pass/report.html")
echo "budget: $scenarios scenarios, $properties properties: report.md $lines lines (limit $((45 + 2 * scenarios + properties))), report.html $bytes bytes (limit $((300000 + 110000 * scenarios)))"
[ "$lines" -le $((45 + 2 * scenarios + properties)) ] || fail "report.md has more than 45 lines besides its scenarios and properties"
[ "$bytes" -le $((300000 + 110000 * scenarios)) ] || fail "report.html is larger than 300 kB + 110 kB per scenario"
cp "$work/pass/report.html" "$artifacts/report_pass.html" 2>/dev/null
cp "$work/fail/report.html" "$artifacts/report_fail.html" 2>/dev/null
[ "$failures" = 0 ] && echo "browser report: all checks passed" || echo "browser report: $failures failure(s)"
[ "$failures" = 0 ]
