#!/usr/bin/env bash
# The gradeq command line: exit codes (0 pass, 2 bad usage or input,
# 3 environment) and clear messages. Usage: cli_exit_codes.sh path/to/gradeq
set -u
gradeq="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

expect() {  # expect CODE PATTERN -- ARGS...
  local code="$1" pattern="$2"
  shift 3
  "$gradeq" "$@" >"$work/out" 2>"$work/err"
  local got=$?
  if [ "$got" != "$code" ]; then
    echo "FAIL: gradeq $* exited $got, expected $code"; cat "$work/out" "$work/err"; failures=$((failures + 1)); return
  fi
  if [ -n "$pattern" ] && ! grep -qiE "$pattern" "$work/out" "$work/err"; then
    echo "FAIL: gradeq $* did not print /$pattern/"; cat "$work/out" "$work/err"; failures=$((failures + 1)); return
  fi
  echo "ok: gradeq $* -> $got"
}

expect 2 "subcommand" -- 
expect 2 "unknown|extra|not expected" -- check --frobnicate
expect 2 "cases" -- check --cases 0
expect 2 "cases" -- check --cases -5
expect 2 "cases" -- check --cases many
expect 2 "backend" -- check --backend tpu
expect 2 "unknown scenario" -- check --scenario no_such_scenario
expect 2 "unknown property" -- check --property NoSuchProperty
expect 2 "exactly one --scenario" -- check --dump "$work/d"
expect 2 "out" -- report
expect 2 "error-model" -- check --error-model guess
expect 3 "cuda" -- check --backend cuda
expect 0 "mlp_mse_equal" -- list scenarios
expect 0 "cuda" -- list backends
expect 0 "" -- --help
expect 0 "PASS" -- check --scenario exact_dyadic
expect 0 "wrote" -- check --scenario mlp_mse_equal --dump "$work/dump"
[ -f "$work/dump/manifest.json" ] || { echo "FAIL: no manifest.json"; failures=$((failures + 1)); }
expect 0 "wrote" -- report --out "$work/report" --property Exactness --cases 5
for f in report.json report.md junit.xml; do
  [ -s "$work/report/$f" ] || { echo "FAIL: report did not write $f"; failures=$((failures + 1)); }
done
exit $((failures > 0))
