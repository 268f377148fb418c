#!/usr/bin/env bash
# The GPU check: everything that needs an NVIDIA GPU, in one command, in
# about 8 minutes on one H200. Steps, each logged under gpu-check/:
#   build      scripts/setup.sh; the CUDA backend must be built
#   tests      every CUDA test (backend ops, attention's backward bitwise over 100
#              reruns, properties, default suite, B19):
#              on a GPU machine a skipped CUDA test is a failure
#   memcheck   compute-sanitizer memcheck (with leak check) on the CUDA op
#              tests and on a short gate run with --backend cuda
#   racecheck  compute-sanitizer racecheck (shared-memory hazards) on the
#              CUDA op tests
#   selftest   gradeq selftest --backend cuda: every mutant, B19 (the real
#              racy kernel) included, must be caught
#   report     gradeq report --backend cuda (the gate and its report)
#   scale      gradeq check --backend cuda --suite scale: GEMM tile and
#              reduction boundaries, the properties on large shapes
#   direct     the scale suite's convolutions and ConvEquivalence with
#              --backend cuda-direct (the split-K weight gradient)
#   plan       gradeq plan --backend cuda: the device's peaks fitted, the
#              planned split checked, its peak within 5 % of the prediction
#   bench      the CUDA benchmarks, as fractions of ceilings measured in
#              the same run
# Each step has its own time limit, and the whole run at most
# GPU_CHECK_BUDGET_S seconds (default 600); a step the budget does not reach
# counts as failed. Prints a summary. Exit: 0 every step passed, 1 a step
# failed, 3 no CUDA device or no nvcc (nothing was checked), 2 bad arguments.
# Usage: scripts/gpu-check.sh [--no-build]
#   --no-build  check the build already in build/ (configured with CUDA),
#               e.g. on a machine without the Debian packages or apt; one
#               built on another machine needs -DGRADEQ_ARCH=portable (the
#               scripts build native, for the machine they run on).
set -uo pipefail
cd "$(dirname "$0")/.."
build=1
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$arg' (usage: scripts/gpu-check.sh [--no-build])" >&2; exit 2 ;;
  esac
done
out=gpu-check
rm -rf "$out"
mkdir -p "$out"
started=$SECONDS
# A hard limit on the whole run (build included): a step gets at most what
# is left, and a step with nothing left is reported as not run, a failure.
budget=${GPU_CHECK_BUDGET_S:-600}

names=()
verdicts=()
failed=0
# step NAME TIMEOUT_S COMMAND...: runs it with its output in $out/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS rc=0 left=$((budget - (SECONDS - started)))
  names+=("$name")
  if [ "$left" -le 0 ]; then
    failed=1
    verdicts+=("FAIL (not run: the ${budget} s budget is spent)")
    echo "gpu-check: $name: not run, the ${budget} s budget is spent"
    return 1
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  echo "gpu-check: $name ..."
  # bash -c, so that the exported functions below can be steps too.
  timeout "$limit" bash -c '"$@"' _ "$@" >"$out/$name.log" 2>&1 || rc=$?
  local verdict="pass"
  if [ "$rc" -eq 124 ]; then
    verdict="FAIL (timed out after ${limit} s)"
  elif [ "$rc" -ne 0 ]; then
    verdict="FAIL (exit $rc)"
  fi
  [ "$verdict" = pass ] || failed=1
  verdicts+=("$verdict, $((SECONDS - t0)) s")
  echo "gpu-check: $name: $verdict ($((SECONDS - t0)) s, $out/$name.log)"
  return "$rc"
}

# A CUDA test that skips on a machine with a device hides a failure.
cuda_tests() {
  local log rc=0
  # Synchronous launches: a kernel fault is reported at its own launch.
  log=$(GRADEQ_CUDA_SYNC=1 ctest --test-dir build -R cuda --output-on-failure -j 8 2>&1) || rc=$?
  echo "$log"
  [ "$rc" -eq 0 ] || return 1
  if grep -q 'Skipped' <<<"$log" || ! grep -qE '[1-9][0-9]* tests passed|tests passed, 0 tests failed out of [1-9]' <<<"$log"; then
    echo "gpu-check: CUDA tests were skipped, or none ran, on a machine with a device"
    return 1
  fi
}

sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
sanitize() {  # TOOL COMMAND...
  local tool=$1
  shift
  local extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 1 "$@"
}
# The sanitizers run the CUDA op tests but the 100-run rerun of attention's
# backward (the tests step runs it): one run of the same kernels is checked;
# the direct-form convolutions (cuda_direct) too.
sanitized_ops='*cuda:*cuda_direct:-*Over100Runs*'
memcheck() {
  sanitize memcheck build/tests/test_backend_ops --gtest_filter="$sanitized_ops" &&
    sanitize memcheck build/gradeq check --backend cuda --cases 3
}

selftest() {
  build/gradeq selftest --backend cuda --out "$out/selftest" || return 1
  grep -qE '^  caught +B19 ' "$out/selftest.log" || { echo "gpu-check: B19 is not in the kill matrix"; return 1; }
}

export out sanitizer sanitized_ops
export -f cuda_tests sanitize memcheck selftest

if [ "$build" -eq 1 ]; then
  step build 420 scripts/setup.sh || { tail -40 "$out/build.log"; exit 1; }
fi
if [ ! -x build/gradeq_bench_cuda ]; then
  echo "gpu-check: the CUDA backend was not built (nvcc not found at configure time; see $out/build.log)"
  exit 3
fi
if ! build/gradeq list backends | grep -qE '^  cuda +available'; then
  echo "gpu-check: no CUDA device, nothing checked: $(build/gradeq list backends | sed -nE 's/^  cuda +unavailable +//p')"
  exit 3
fi
device=$(build/gradeq list backends | sed -nE 's/^  cuda +available +//p')

# Correctness first, then the sanitizers, then speed.
step tests 240 cuda_tests
step report 120 build/gradeq report --backend cuda --out "$out/report"
step selftest 240 selftest
step scale 150 build/gradeq check --backend cuda --suite scale --cases 10
step direct 90 build/gradeq check --backend cuda-direct --suite scale --cases 100 --property ConvEquivalence \
  $(grep -oE '^name = "conv[^"]*"' harness/core/scale_suite.toml | sed -E 's/name = "(.*)"/--scenario \1/')
step plan 60 build/gradeq plan --backend cuda --config examples/plan/model.toml --scenario mlp_layernorm_adamw \
  --budget 1MiB --effective-batch 256
step memcheck 240 memcheck
step racecheck 180 sanitize racecheck build/tests/test_backend_ops --gtest_filter="$sanitized_ops"
step bench 180 build/gradeq_bench_cuda --benchmark_min_time=0.2 --benchmark_out="$out/bench.json" \
  --benchmark_out_format=json

echo
echo "gpu-check summary — $device, $((SECONDS - started)) s"
for i in "${!names[@]}"; do printf '  %-10s %s\n' "${names[$i]}" "${verdicts[$i]}"; done
# A step that did not run has no log: its lines say "(no log)".
from_log() {  # PATTERN STEP
  [ -f "$out/$2.log" ] || { echo "(no log)"; return; }
  grep -hE "$1" "$out/$2.log" | tail -1
}
echo "  tests:     $(from_log 'tests passed|tests failed' tests)"
for f in memcheck racecheck; do
  if [ -f "$out/$f.log" ]; then
    echo "  $f: $(grep -h 'ERROR SUMMARY' "$out/$f.log" | sort | uniq -c | tr -s ' ' | paste -sd ';' -)"
  else
    echo "  $f: (no log)"
  fi
done
echo "  selftest:  $(from_log '^selftest:' selftest)"
echo "             $(from_log '^  caught +B19 ' selftest | grep . || echo 'B19 not caught')"
echo "  gate:      $(from_log '^result:' report)"
echo "  bench (fraction of ceiling):"
[ -f "$out/bench.log" ] && grep -E '^BM_' "$out/bench.log" | grep -v '^BM_Ceiling' | awk '{print "    " $1 "  " $NF}'
echo "  logs and reports: $out/"
exit "$failed"
