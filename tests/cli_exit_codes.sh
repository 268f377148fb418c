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
expect 2 "size" -- check --size huge
expect 2 "size" -- selftest --size medium
expect 2 "suite" -- check --suite huge
expect 2 "excludes|suite" -- check --suite scale --config "$0"
expect 2 "requires --campaign" -- selftest --campaign-mutant-cases 5
expect 2 "requires --campaign" -- selftest --threads 2
expect 2 "not a directory" -- verify "$work/no_such_directory"
mkdir -p "$work/empty"
expect 2 "manifest.json: missing" -- verify "$work/empty"
expect 2 "dir is required|required" -- verify
# Drift against a baseline: refused before the run when it cannot be
# compared; flagged, and a failure only with --fail-on-drift.
expect 2 "requires --baseline" -- check --fail-on-drift
echo '{}' >"$work/not_a_report.json"
expect 2 "not a gradeq report" -- check --baseline "$work/not_a_report.json" --scenario exact_dyadic
expect 0 "PASS" -- report --scenario mlp_mse_equal --property Exactness --out "$work/base"
expect 2 "the baseline ran other scenarios" -- check --scenario exact_dyadic --baseline "$work/base/report.json"
expect 0 "0 of [0-9]+ checks flagged" -- check --scenario mlp_mse_equal --property Exactness --baseline "$work/base/report.json" --fail-on-drift
sed -E 's/("worst_ratio": )0\.1([0-9])/\10.0\2/' "$work/base/report.json" >"$work/tight.json"
expect 1 "grown .*fails the run|fails the run" -- check --scenario mlp_mse_equal --property Exactness --baseline "$work/tight.json" --fail-on-drift
expect 0 "checks flagged" -- check --scenario mlp_mse_equal --property Exactness --baseline "$work/tight.json"
expect 2 "campaign" -- selftest --campaign 0
# The self-test on a user's own scenarios: what they catch, each mutant's
# detecting err/bound; the generated cases' options do not apply.
expect 0 "these scenarios catch [0-9]+ of [0-9]+ mutants" -- selftest --config "$(dirname "$0")/../examples/plan/model.toml" \
  --out "$work/stc"
grep -q "## Detection" "$work/stc/selftest.md" || { echo "FAIL: no detection table in selftest.md"; failures=$((failures + 1)); }
expect 2 "does not apply to selftest --config" -- selftest --config "$(dirname "$0")/../examples/plan/model.toml" --cases 5
expect 2 "does not apply to selftest --config" -- selftest --config "$(dirname "$0")/../examples/plan/model.toml" --suite scale
# Beside another run's report: refused when it cannot be shown or read; a
# section of the report otherwise.
expect 2 "give --report DIR" -- check --scenario mlp_mse_equal --beside "$work/base/report.json"
expect 2 "beside: not a gradeq report" -- check --scenario mlp_mse_equal --report "$work/bes" --beside "$work/not_a_report.json"
expect 0 "PASS" -- check --backend cpu-adversarial --scenario mlp_mse_equal --property Exactness --report "$work/bes" \
  --beside "$work/base/report.json"
grep -q "## Beside backend cpu" "$work/bes/report.md" || { echo "FAIL: no beside section in report.md"; failures=$((failures + 1)); }
grep -q 'id="beside-tensors"' "$work/bes/report.html" || { echo "FAIL: no beside table in report.html"; failures=$((failures + 1)); }
# Without a device (or without a CUDA build) cuda is an environment error
# with the reason; with one, the same gate runs on it.
if "$gradeq" list backends | grep -qE '^  cuda +available'; then
  expect 0 "PASS" -- check --backend cuda --scenario exact_dyadic
else
  expect 3 "cuda backend unavailable: (no CUDA device|gradeq was built without CUDA)" -- check --backend cuda
  expect 3 "cuda-direct backend unavailable: (no CUDA device|gradeq was built without CUDA)" -- check --backend cuda-direct
fi
# A global pool's bias gradient sums thousands of equal terms: correct code
# passes on both host forms (a false alarm at 1.39x before the sum's own
# roundings were grouped by value: docs/NUMERICS.md §3).
for backend in cpu cpu-direct; do
  expect 0 "PASS" -- check --backend "$backend" --config "$(dirname "$0")/data/equal_terms_false_alarm.toml" \
    --property KernelCorrectness --cases 1
done
# An output that cannot be written is the environment's (exit 3), said
# before any work; an option that does not apply is a usage error.
expect 3 "cannot write into /dev/null/report" -- report --out /dev/null/report --scenario exact_dyadic
expect 3 "cannot write into /dev/null" -- check --scenario exact_dyadic --junit /dev/null/junit.xml
expect 3 "cannot write into /dev/null/sweep" -- sweep norms --seeds 1 --out /dev/null/sweep
expect 2 "backend applies to .sweep precision" -- sweep norms --backend cpu
# Every 64-bit seed is a seed.
expect 0 "PASS" -- check --seed 0 --scenario exact_dyadic
expect 0 "PASS" -- check --seed 18446744073709551615 --scenario exact_dyadic
expect 2 "seed must be an integer from 0 to 18446744073709551615" -- check --seed 18446744073709551616 --scenario exact_dyadic
expect 2 "seed must be" -- check --seed -1 --scenario exact_dyadic
expect 2 "seed must be" -- selftest --seed 1x
expect 0 "mlp_mse_equal" -- list scenarios
expect 0 "cuda" -- list backends
expect 0 "B19" -- list mutants
expect 0 "" -- --help
expect 0 "PASS" -- check --scenario exact_dyadic
expect 0 "wrote" -- check --scenario mlp_mse_equal --dump "$work/dump"
[ -f "$work/dump/manifest.json" ] || { echo "FAIL: no manifest.json"; failures=$((failures + 1)); }
expect 0 "wrote" -- report --out "$work/report" --property Exactness --cases 5
for f in report.json report.md report.html junit.xml plots/norm_divergence.svg plots/precision_sweep.svg; do
  [ -s "$work/report/$f" ] || { echo "FAIL: report did not write $f"; failures=$((failures + 1)); }
done
expect 0 "Gradient divergence" -- sweep norms --seeds 2 --out "$work/sweep"
[ -s "$work/sweep/sweep_norms.json" ] || { echo "FAIL: sweep did not write sweep_norms.json"; failures=$((failures + 1)); }
expect 2 "norms" -- sweep colours
expect 2 "seeds" -- sweep norms --seeds 0
expect 2 "windows applies to .sweep norms" -- sweep precision --windows 2
expect 2 "seeds applies to the one-window study" -- sweep norms --windows 2 --seeds 3
expect 2 "windows" -- sweep norms --windows 0
expect 2 "not a training sweep" -- report --norm-training "$work/sweep/sweep_norms.json" --out "$work/r_nt"
expect 0 "float32 \+ Kahan" -- sweep precision --seeds 1
grep -q "plots/norm_divergence.svg" "$work/report/report.md" || { echo "FAIL: report.md does not link the normalizer study"; failures=$((failures + 1)); }
# Without gnuplot the report is still written, and says why its figures are missing.
GRADEQ_GNUPLOT=/nonexistent/gnuplot "$gradeq" report --out "$work/noplots" --property Exactness --cases 2 >"$work/noplots.log" 2>&1 ||
  { echo "FAIL: report without gnuplot exited $?"; failures=$((failures + 1)); }
grep -q "figures missing from the report: /nonexistent/gnuplot not found" "$work/noplots.log" ||
  { echo "FAIL: no warning without gnuplot"; cat "$work/noplots.log"; failures=$((failures + 1)); }
grep -q "Some figures were not drawn" "$work/noplots/report.html" ||
  { echo "FAIL: report.html does not say its figures are missing"; failures=$((failures + 1)); }
# User scenarios from TOML: a good file passes, bad ones say what is wrong.
cat >"$work/good.toml" <<'TOML'
[[scenario]]
name = "user_mlp"
input_features = 6
layers = ["linear:8", "gelu", "layernorm", "linear:3"]
loss = "cross_entropy"
positions = 4
data = "padded_sequences"
split = [[3, 1, 4], [2, 2]]
TOML
cat >>"$work/good.toml" <<'TOML'

[[scenario]]
name = "user_lm_adamw"
input_features = 8
positions = 5
layers = ["rmsnorm", "linear:16", "gelu", "linear:9"]
loss = "cross_entropy"
data = "padded_sequences"
split = [[2, 2, 2, 2], [2, 2, 2, 2]]
optimizer = "adamw"
learning_rate = 0.001
betas = [0.9, 0.95]
weight_decay = 0.01
clip_max_norm = 0.5
warmup_steps = 1
total_steps = 10
compute_dtype = "bfloat16"
accumulate_dtype = "float32"

[[scenario]]
name = "user_fp16"
input_features = 6
layers = ["linear:8", "relu", "linear:2"]
split = [[4, 4], [4, 4], [4, 4]]
optimizer = "sgd"
momentum = 0.9
nesterov = true
compute_dtype = "float16"
loss_scale = 65536
dynamic_loss_scale = true
growth_interval = 2
compensated = true
TOML
expect 0 "user_lm_adamw" -- check --config "$work/good.toml" --property Exactness --cases 3
bad() {  # bad NAME PATTERN TOML-BODY
  printf '%s\n' "$3" >"$work/$1.toml"
  expect 2 "$2" -- check --config "$work/$1.toml"
}
bad zero_mb "micro-batch size must be >= 1" '[[scenario]]
name = "z"
input_features = 4
layers = ["linear:2"]
split = [[4, 0]]'
bad negative "micro-batch size must be >= 1" '[[scenario]]
name = "n"
input_features = 4
layers = ["linear:2"]
split = [[-3]]'
bad empty_window "non-empty list of micro-batch sizes" '[[scenario]]
name = "e"
input_features = 4
layers = ["linear:2"]
split = [[4], []]'
bad zero_features "input_features must be >= 1" '[[scenario]]
name = "f"
input_features = 0
layers = ["linear:2"]
split = [[4]]'
bad unknown_key "unknown key .batchsize." '[[scenario]]
name = "k"
input_features = 4
batchsize = 3
layers = ["linear:2"]
split = [[4]]'
bad bad_layer "linear:<output features>" '[[scenario]]
name = "l"
input_features = 4
layers = ["linear:two"]
split = [[4]]'
bad bn_single "batchnorm needs >= 2 values per channel" '[[scenario]]
name = "b"
input_features = 4
layers = ["linear:4", "batchnorm", "linear:2"]
split = [[2, 1]]'
bad gn_groups "groups do not divide" '[[scenario]]
name = "g"
input_features = 4
layers = ["linear:6", "groupnorm:4", "linear:2"]
split = [[2]]'
bad betas "betas must be a list of two numbers" '[[scenario]]
name = "b"
input_features = 4
layers = ["linear:2"]
split = [[2]]
optimizer = "adam"
betas = [0.9]'
bad warmup "warmup_steps and total_steps go together" '[[scenario]]
name = "w"
input_features = 4
layers = ["linear:2"]
split = [[2]]
warmup_steps = 3'
bad scale "power of two" '[[scenario]]
name = "s"
input_features = 4
layers = ["linear:2"]
split = [[2]]
loss_scale = 1000'
bad nesterov "nesterov needs momentum" '[[scenario]]
name = "n"
input_features = 4
layers = ["linear:2"]
split = [[2]]
nesterov = true'
bad bad_dtype "not one of" '[[scenario]]
name = "d"
input_features = 4
layers = ["linear:2"]
split = [[4]]
compute_dtype = "float8"'
bad syntax "syntax.toml:2" '[[scenario]]
name = = "x"'
expect 2 "exist" -- check --config "$work/no_such_file.toml"
exit $((failures > 0))
