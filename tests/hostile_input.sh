#!/usr/bin/env bash
# Hostile input: every class of bad scenario is refused up front with exit 2
# and a message naming the key and its domain (exit 3 for the environment);
# nothing hangs (each run under a 10 s limit), nothing is an internal error,
# and an interrupted run leaves no report that looks complete.
# Usage: hostile_input.sh path/to/gradeq
set -u
gradeq="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# refuse CODE PATTERN KEY=VALUE...: a one-scenario config with these keys
# (overriding the base below) must exit CODE, printing PATTERN, within 10 s.
base() {
  cat <<'TOML'
name = "hostile"
input_features = 6
layers = ["linear:8", "relu", "linear:3"]
loss = "mse"
split = [[2, 2]]
learning_rate = 0.1
TOML
}
config() {  # config KEY=VALUE... -> $work/c.toml
  local overrides=("$@")
  {
    echo "[[scenario]]"
    base | while IFS= read -r line; do
      key="${line%% =*}"
      skip=0
      for o in "${overrides[@]}"; do [ "${o%%=*}" = "$key" ] && skip=1; done
      [ $skip = 0 ] && echo "$line"
    done
    for o in "${overrides[@]}"; do echo "${o%%=*} = ${o#*=}"; done
  } >"$work/c.toml"
}
run() {  # run CODE PATTERN ARGS...
  local code="$1" pattern="$2"
  shift 2
  local start end
  start=$(date +%s.%N)
  timeout 10 "$gradeq" "$@" >"$work/out" 2>&1
  local got=$?
  end=$(date +%s.%N)
  local took
  took=$(echo "$end - $start" | bc)
  if [ "$got" != "$code" ]; then
    echo "FAIL ($got, expected $code, ${took}s): gradeq $*"; sed 's/^/    /' "$work/out" | head -5; cat "$work/c.toml" 2>/dev/null | sed 's/^/    | /'
    failures=$((failures + 1)); return
  fi
  if ! grep -qiE -- "$pattern" "$work/out"; then
    echo "FAIL (no /$pattern/): gradeq $*"; sed 's/^/    /' "$work/out" | head -5; failures=$((failures + 1)); return
  fi
  if grep -q "internal error" "$work/out"; then echo "FAIL (internal error): gradeq $*"; failures=$((failures + 1)); return; fi
  printf 'ok (%s, %.2fs): %s\n' "$got" "$took" "$(head -c 150 "$work/out" | tr '\n' ' ')"
}
refuse() {  # refuse PATTERN KEY=VALUE...
  local pattern="$1"
  shift
  config "$@"
  run 2 "$pattern" check --config "$work/c.toml"
}

# Numbers outside their domains, or not finite.
refuse "weight_decay must be finite and in \[0, " weight_decay=inf
refuse "weight_decay must be finite" weight_decay=nan
refuse "weight_decay must be finite and in" weight_decay=1e300
refuse "learning_rate must be finite and in \(0, " learning_rate=1e308
refuse "learning_rate must be finite" learning_rate=-0.1
refuse "loss_scale must be a power of two in \[2\^-24, 2\^24\]" loss_scale=8.98846567431158e307
refuse "loss_scale must be a power of two in" loss_scale=5e-324
refuse "loss_scale must be a power of two in" loss_scale=8.98846567431158e307 dynamic_loss_scale=true
refuse "loss_scale must be a power of two" loss_scale=3
refuse "momentum must be finite and in \[0, 1\]" momentum=nan
refuse "momentum must be finite" momentum=inf
refuse "dampening must be finite and in \[0, 1\]" dampening=nan
refuse "clip_max_norm must be finite" clip_max_norm=inf
refuse "eps must be finite and in \(0, 1\]" optimizer='"adam"' eps=inf
refuse "betas\[1\] must be finite and in \[0, 1\)" optimizer='"adamw"' "betas=[0.9, 1.0]"
refuse "norm_eps must be finite" 'layers=["linear:8", "layernorm", "linear:3"]' norm_eps=inf
# Keys that do not apply, and strict layer specs and names.
refuse "key 'betas' does not apply: the optimizer is sgd" "betas=[0.9, 0.999]"
refuse "key 'momentum' does not apply" optimizer='"adam"' momentum=0.9
refuse "key 'growth_interval' does not apply" growth_interval=10
refuse "key 'batchnorm_momentum' does not apply" batchnorm_momentum=0.1
refuse 'layer "linear:\+4": expected' 'layers=["linear:+4", "relu", "linear:3"]'
refuse 'layer "linear:32 ": expected' 'layers=["linear:32 ", "relu", "linear:3"]'
refuse 'layer "linear:08": expected' 'layers=["linear:08", "relu", "linear:3"]'
refuse "the model has no parameters" 'layers=["gelu"]'
refuse "checkpoint_every must be >= 1" checkpoint_every=0
refuse "checkpoint_every must be an integer" checkpoint_every=1.5
refuse "checkpoint_every: blocks of 1 to 3 layers" checkpoint_every=4
refuse "name: 1-64 printable characters" 'name=""'
refuse "name: 1-64 printable characters" 'name="two\nlines \" quoted"'
# Sizes past the machine: refused from the estimate (or the overflow
# check), before anything is allocated.
refuse "input_features must be an integer" input_features=1e9
refuse "needs about [0-9.]+ GiB at its peak" input_features=1000000000
refuse "needs about [0-9.]+ GiB|too large" positions=4611686018427387904
refuse "needs about [0-9.]+ GiB" 'layers=["linear:1000000000", "relu", "linear:3"]'
refuse "needs about [0-9.]+ GiB" "split=[[1000000000]]"
refuse "too many samples|too large" "split=[[4611686018427387904, 4611686018427387904]]"
refuse "a window's rows is too large|too large" positions=9223372036854775807
config
run 2 "needs about .* GiB.*--max-memory" check --config "$work/c.toml" --max-memory 1K
run 2 "--max-memory must be a positive size" check --config "$work/c.toml" --max-memory lots

# Seeds, files and outputs.
config
run 0 "PASS" check --config "$work/c.toml" --property Exactness --seed 0
run 0 "PASS" check --config "$work/c.toml" --property Exactness --seed 18446744073709551615
run 2 "--seed must be an integer from 0 to 18446744073709551615" check --seed 18446744073709551616
run 2 "--seed must be" check --seed -1
run 2 "not a regular file" check --config /dev/zero
head -c $((17 << 20)) /dev/zero | tr '\0' '#' >"$work/huge.toml"
run 2 "larger than 16 MiB" check --config "$work/huge.toml"
mkdir -p "$work/rep"
run 2 "--junit .* is a directory" check --config "$work/c.toml" --report "$work/rep" --junit "$work/rep"
run 3 "cannot write into /dev/null/out" report --config "$work/c.toml" --out /dev/null/out
run 3 "cannot write into /proc" selftest --out /proc/gradeq-out
run 2 "backend applies to .sweep precision" sweep norms --backend cuda

# An interrupted run stops within a second with 128 + the signal, and the
# earlier run's reports are gone rather than looking current.
mkdir -p "$work/st"
echo '{"stale": true}' >"$work/st/selftest.json"
echo "stale" >"$work/st/selftest.md"
"$gradeq" selftest --out "$work/st" >"$work/sig.log" 2>&1 &
pid=$!
sleep 2
start=$(date +%s.%N)
kill -TERM "$pid"
wait "$pid"
code=$?
took=$(echo "$(date +%s.%N) - $start" | bc)
if [ "$code" != 143 ]; then echo "FAIL: SIGTERM gave exit $code, expected 143"; failures=$((failures + 1)); fi
if [ "$(echo "$took > 1.0" | bc)" = 1 ]; then echo "FAIL: SIGTERM took ${took}s"; failures=$((failures + 1)); fi
if [ -e "$work/st/selftest.json" ] || [ -e "$work/st/selftest.md" ]; then
  echo "FAIL: an interrupted selftest left a report behind"; ls -la "$work/st"; failures=$((failures + 1))
fi
grep -q "interrupted" "$work/sig.log" || { echo "FAIL: no word of the interruption"; failures=$((failures + 1)); }
echo "ok: SIGTERM -> exit $code in ${took}s, no report left"

echo "$failures failure(s)"
[ "$failures" = 0 ]
