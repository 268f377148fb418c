#!/usr/bin/env bash
# Every verb of the command line on backends a program registered
# (tests/registered_backend.cpp): list, check with --config, --dump and
# --junit, report, plan, sweep, selftest; and a replayed failure that runs only
# the property it replays, reporting the others as not run.
# Usage: registered_backend_verbs.sh path/to/registered_backend
set -u
program="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() {  # run CODE LOG ARGS...: the program's exit code must be CODE
  local code="$1" log="$2"
  shift 2
  "$program" "$@" >"$log" 2>&1
  local got=$?
  if [ "$got" != "$code" ]; then fail "$* exited $got, expected $code"; tail -20 "$log"; else echo "ok: $* -> $got"; fi
}

cat >"$work/mine.toml" <<'TOML'
[[scenario]]
name = "mine"
input_features = 6
layers = ["linear:8", "relu", "linear:3"]
loss = "mse"
split = [[2, 2], [1, 3]]
learning_rate = 0.1
seed = 3
TOML

run 0 "$work/list" list backends
grep -q "^  forwarded " "$work/list" && grep -q "^  overwriting " "$work/list" || fail "list does not show the registered backends"

# --config and --junit: the correct backend passes, the buggy one fails, and
# the JUnit suite is named after the backend that ran.
run 0 "$work/c1" check --backend forwarded --config "$work/mine.toml" --junit "$work/ok.xml"
run 1 "$work/c2" check --backend overwriting --config "$work/mine.toml" --junit "$work/bad.xml"
grep -q 'testsuite name="gradeq.forwarded"' "$work/ok.xml" || fail "junit suite is not gradeq.forwarded"
grep -q 'testsuite name="gradeq.overwriting"' "$work/bad.xml" || fail "junit suite is not gradeq.overwriting"

# --dump: each backend's own tensors.
run 0 "$work/d1" check --backend forwarded --config "$work/mine.toml" --scenario mine --dump "$work/dump_ok"
run 1 "$work/d2" check --backend overwriting --config "$work/mine.toml" --scenario mine --dump "$work/dump_bad"
[ -f "$work/dump_ok/manifest.json" ] && [ -f "$work/dump_bad/manifest.json" ] || fail "--dump wrote no manifest"
grad=K_acc_w0_grad_layer0.weight.npy
[ -f "$work/dump_ok/$grad" ] || { fail "no $grad in the dump"; ls "$work/dump_ok"; }
[ -n "$grad" ] && cmp -s "$work/dump_ok/$grad" "$work/dump_bad/$grad" && fail "the two backends dumped the same $grad"

# report: report.json names the backend.
run 0 "$work/r" report --backend forwarded --config "$work/mine.toml" --out "$work/report"
grep -q '"backend": "forwarded"' "$work/report/report.json" || fail "report.json does not name the backend"

# plan: the registered backend's memory measured and the split checked; a
# budget of 1700 B holds about 4 samples (888 B + 176 B per sample on the
# host), so 12 take several micro-batches, and the buggy backend's split
# fails its check (exit 1).
run 0 "$work/p1" plan --backend forwarded --config "$work/mine.toml" --budget 1700 --margin 0 --effective-batch 12
run 1 "$work/p2" plan --backend overwriting --config "$work/mine.toml" --budget 1700 --margin 0 --effective-batch 12
grep -q "backend forwarded" "$work/p1" || fail "plan does not name the backend"

# sweep precision: a study on the backend (exit 0 for both); the buggy
# backend's errors differ from the correct one's.
run 0 "$work/s1" sweep precision --backend forwarded --seeds 1 --out "$work/sweep_ok"
run 0 "$work/s2" sweep precision --backend overwriting --seeds 1 --out "$work/sweep_bad"
grep -q "forwarded" "$work/sweep_ok/sweep_precision.md" || fail "the sweep does not name its backend"
sed 's/overwriting/forwarded/g' "$work/sweep_bad/sweep_precision.json" | cmp -s - "$work/sweep_ok/sweep_precision.json" &&
  fail "the sweep gave the same numbers on both backends"

# selftest: correct code passes on the registered backend; on the buggy one
# correct code fails, so the self-test does (at any number of cases: 5
# keeps the run short, which under the sanitizers is most of this test).
# Under the sanitizers (scripts/sanitize.sh sets GRADEQ_SANITIZED) the two
# self-tests took 18 of the sanitized run's 30 minutes: every mutant against
# every default scenario, about 55 s unsanitized. They run in full in the
# unsanitized test job; the mutants themselves run sanitized in test_mutants.
if [ -n "${GRADEQ_SANITIZED:-}" ]; then
  echo "skipped under the sanitizers: selftest on the registered backends (run unsanitized by scripts/test.sh)"
else
  run 0 "$work/t1" selftest --backend forwarded --cases 20
  run 1 "$work/t2" selftest --backend overwriting --cases 5
fi

# A replayed failure replays on the backend that failed and runs only the
# property it names; the other one asked for is reported as not run.
run 1 "$work/p" check --backend overwriting --property Exactness
# The failure labels both sides and names the element by (row, column).
grep -qE 'element \[[0-9]+, [0-9]+\]: K_(acc|full) \(kernel\) [-0-9.e]+, R_(acc|full) \(reference\)' "$work/p" ||
  { fail "the Exactness failure does not label kernel and reference, or has no (row, column)"; cat "$work/p"; }
replay=$(grep -m1 'replay: ' "$work/p" | sed 's/.*replay: //')
case "$replay" in
  RC_PARAMS=*"--backend overwriting --property Exactness"*) echo "ok: replay line: $replay" ;;
  *) fail "no replay line on the failing backend: '$replay'"; cat "$work/p" ;;
esac
params=$(printf '%s' "$replay" | sed -E 's/^RC_PARAMS="([^"]*)".*/\1/')
RC_PARAMS="$params" "$program" check --backend overwriting --property Exactness --property KernelCorrectness \
  --junit "$work/replay.xml" >"$work/replay" 2>&1
code=$?
[ "$code" = 1 ] || fail "the replay exited $code, expected 1 (the failure again)"
grep -qE '^  -  +property KernelCorrectness +not run' "$work/replay" || { fail "KernelCorrectness not reported as not run"; cat "$work/replay"; }
grep -qE '^  pass +property KernelCorrectness' "$work/replay" && fail "a property that did not run is reported as passed"
grep -q '1 not run' "$work/replay" || fail "the summary does not count what did not run"
RC_PARAMS="$params" "$program" check --backend overwriting --property KernelCorrectness >"$work/none" 2>&1
code=$?
[ "$code" = 2 ] || fail "a replay that selects none of its properties exited $code, expected 2"

# JUnit, structurally: every count in the suite matches its test cases.
for xml in "$work/ok.xml" "$work/bad.xml" "$work/replay.xml" "$work/report/junit.xml"; do
  python3 - "$xml" <<'PY' || fail "junit structure of $xml"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "testsuites", root.tag
suites = root.findall("testsuite")
assert len(suites) == 1, "one testsuite per backend"
for s in suites:
    cases = s.findall("testcase")
    count = lambda tag: sum(1 for c in cases if c.find(tag) is not None)
    got = {"tests": len(cases), "failures": count("failure"), "errors": count("error"), "skipped": count("skipped")}
    for key, n in got.items():
        assert int(s.get(key)) == n, f"{key}: attribute {s.get(key)}, test cases {n}"
        assert int(root.get(key)) == n, f"testsuites {key}: {root.get(key)} vs {n}"
    props = {p.get("name"): p.get("value") for p in s.find("properties")}
    assert props.get("seed") and props.get("backend") == s.get("name").split(".", 1)[1], props
    print(f"ok: {sys.argv[1]}: {got}")
PY
done
grep -q '<skipped' "$work/replay.xml" || fail "the not-run property is not <skipped> in junit"

echo "$failures failure(s)"
[ "$failures" = 0 ]
