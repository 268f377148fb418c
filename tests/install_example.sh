#!/usr/bin/env bash
# The installed package, used as a user would: install gradeq into a fresh
# prefix, copy examples/own_backend out of the source tree, build it with
# find_package(gradeq) (and once with pkg-config), and require that the
# buggy variant fails the gate (exit 1) and the correct one passes (exit 0).
# Usage: install_example.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
source=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

echo "== install into $work/prefix"
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" || { cat "$work/install.log"; fail "install"; }
for f in include/gradeq/gradeq.h include/gradeq/testing.h lib/cmake/gradeq/gradeqConfig.cmake \
         lib/cmake/gradeq/gradeqConfigVersion.cmake lib/pkgconfig/gradeq.pc bin/gradeq; do
  [ -e "$work/prefix/$f" ] || fail "the install has no $f"
done

echo "== the example, outside the source tree"
cp -r "$source/examples/own_backend" "$work/example"
if grep -rn -- "$source" "$work/example"; then fail "the example names the gradeq source tree"; fi
cmake -S "$work/example" -B "$work/example/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$work/configure.log" || { cat "$work/configure.log"; fail "configure"; }
cmake --build "$work/example/build" -j 2 >"$work/build.log" 2>&1 || { tail -50 "$work/build.log"; fail "build"; }
# Nothing of the source tree reaches the example's build: headers, libraries
# and the package come from the prefix.
if grep -l -- "$source" "$work/example/build/compile_commands.json" "$work/example/build/CMakeCache.txt"; then
  fail "the example's build refers to the gradeq source tree"
fi

echo "== the buggy variant fails the gate"
set +e
"$work/example/build/own_gate_buggy" check --backend own >"$work/buggy.log" 2>&1
code=$?
set -e
tail -3 "$work/buggy.log"
[ "$code" = 1 ] || { cat "$work/buggy.log"; fail "own_gate_buggy exited $code, expected 1"; }
grep -q "grad/layer" "$work/buggy.log" || fail "the failure does not name the gradient that is wrong"

echo "== the correct variant passes it, with the CI templates' command"
set +e
(cd "$work/example" && build/own_gate report --backend own --out report) >"$work/correct.log" 2>&1
code=$?
set -e
tail -2 "$work/correct.log"
[ "$code" = 0 ] || { cat "$work/correct.log"; fail "own_gate exited $code, expected 0"; }
for f in report.json report.md junit.xml; do
  [ -s "$work/example/report/$f" ] || fail "the gate wrote no report/$f"
done
grep -q 'testsuite name="gradeq.own"' "$work/example/report/junit.xml" || fail "junit.xml is not the own backend's"

echo "== the CI templates run that command and keep report/"
py=/usr/bin/python3; [ -x "$py" ] || py=python3
"$py" - "$work/example/ci" <<'PY' || fail "the CI templates"
import sys, yaml
ci = sys.argv[1]
github = yaml.safe_load(open(ci + "/github-actions.yml"))
steps = github["jobs"]["gate"]["steps"]
assert any('$GATE report --backend "$BACKEND" --out report' in s.get("run", "") for s in steps), steps
assert any(s.get("with", {}).get("path") == "report/" for s in steps), "github: report/ is not kept"
gitlab = yaml.safe_load(open(ci + "/gitlab-ci.yml"))
job = gitlab["gradeq-gate"]
assert '$GATE report --backend "$BACKEND" --out report' in job["script"], job["script"]
assert job["artifacts"]["paths"] == ["report/"] and job["artifacts"]["reports"]["junit"] == "report/junit.xml"
for variables in (github["env"], gitlab["variables"]):
    assert variables["GATE"] == "build/own_gate" and variables["BACKEND"] == "own", variables
print("ok: CI templates")
PY

echo "== the GoogleTest helper lists one test per scenario and property"
"$work/example/build/own_tests" --gtest_list_tests >"$work/list.log"
# (the default suite's: the data_parallel suite listed after it runs under mpirun)
scenarios=$("$build/gradeq" list scenarios | sed '/^data_parallel suite/,$d' | grep -c '^  ')
properties=$("$build/gradeq" list properties | grep -c '^  ')
listed=$(grep -c '^  ' "$work/list.log")
[ "$listed" = $((scenarios + properties)) ] || { cat "$work/list.log"; fail "own_tests lists $listed tests, expected $scenarios + $properties"; }
"$work/example/build/own_tests" --gtest_filter='Own/Property.Exactness:Own/Scenario.*relu*' >"$work/gtest.log" 2>&1 ||
  { cat "$work/gtest.log"; fail "own_tests failed on the correct backend"; }
grep -q "PASSED" "$work/gtest.log" || fail "own_tests ran nothing"

echo "== pkg-config"
flags=$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs gradeq) || fail "pkg-config gradeq"
# shellcheck disable=SC2086
g++ -O1 -o "$work/own_gate_pc" "$work/example/own_gate.cpp" "$work/example/own_backend.cpp" $flags ||
  fail "the example does not build with pkg-config's flags"
"$work/own_gate_pc" list backends | grep -q "^  own " || fail "the pkg-config build does not know the own backend"
echo "install example: ok"
