#!/usr/bin/env bash
# `gradeq plan` end to end: a budget that fits micro-batch 8 but not 9 (so
# not 16) picks 8 and the N that reaches the effective batch, with an
# uneven last micro-batch; the planned split passes the equivalence checks
# and its measured peak is the predicted one. A plan whose split fails the
# checks exits 1; bad input exits 2 with a message.
# Usage: plan.sh path/to/gradeq path/to/model.toml
set -u
gradeq="$1" model="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The fit, from a budget that holds the whole batch (N = 1).
"$gradeq" plan --config "$model" --scenario mlp_layernorm_adamw --budget 1GiB --effective-batch 100 \
  --json "$work/whole.json" >"$work/whole.out" 2>&1 || fail "a 1 GiB plan exited $?: $(cat "$work/whole.out")"
budget=$(python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert d['micro_batch'] == 100 and d['micro_batches'] == 1, d
# usable = budget * 0.9 holds the fixed part and 8.5 samples: 8 fit, 9 (and 16) do not.
print(int((d['fixed'] + 8.5 * d['per_sample']) / 0.9))" "$work/whole.json") || fail "the whole-batch plan: $(cat "$work/whole.json")"

"$gradeq" plan --config "$model" --scenario mlp_layernorm_adamw --budget "$budget" --effective-batch 100 \
  --ranks 4 --json "$work/plan.json" >"$work/plan.out" 2>&1
code=$?
cat "$work/plan.out"
[ "$code" = 0 ] || fail "the plan for a budget of $budget bytes exited $code"
python3 - "$work/plan.json" <<'PY' || fail "the plan is not 13 micro-batches of 8 (12 x 8 + 4) within 5% of its prediction"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["micro_batch"] == 8, d["micro_batch"]
assert d["micro_batches"] == 13 and d["last_micro_batch"] == 4, d
assert d["split"] == [[8] * 12 + [4]] * 2, d["split"]
assert d["fixed"] + 16 * d["per_sample"] > d["usable"], "16 would fit"
assert d["equivalence_passed"] and d["passed"], d
assert d["relative_error"] <= 0.05, d["relative_error"]
assert d["per_rank"]["sharded"] < d["per_rank"]["replicated"], d["per_rank"]
print("ok: the plan is 13 micro-batches of 8, peak", d["measured_peak"], "predicted", d["predicted"]["peak"])
PY
grep -q "plan: micro-batch 8 x N = 13 per optimizer step (12 of 8 and a last of 4)" "$work/plan.out" || fail "the printed plan"

# The same split under equal-split normalization: the uneven last
# micro-batch is weighted wrongly, and the check says so.
"$gradeq" plan --config "$model" --scenario mlp_equal_split --budget "$budget" --effective-batch 100 >"$work/eq.out" 2>&1
code=$?
[ "$code" = 1 ] || fail "an equal_split plan with an uneven last micro-batch exited $code, expected 1: $(cat "$work/eq.out")"
grep -q "accumulation FAIL" "$work/eq.out" || fail "the equal_split plan does not show the failing accumulation verdict"

expect2() {  # expect2 PATTERN ARGS...
  local pattern="$1"
  shift
  "$gradeq" plan --config "$model" --scenario mlp_layernorm_adamw "$@" >"$work/out" 2>&1
  local code=$?
  if [ "$code" != 2 ] || ! grep -qE "$pattern" "$work/out"; then
    fail "gradeq plan $* exited $code (expected 2 and /$pattern/): $(cat "$work/out")"
  else
    echo "ok: gradeq plan $* -> 2"
  fi
}
expect2 "is not a size" --budget lots --effective-batch 100
expect2 "is not a size" --budget 8GiBs --effective-batch 100
expect2 "does not hold the fixed part" --budget 1KiB --effective-batch 100
expect2 "nothing to split" --budget 1GiB --effective-batch 0
expect2 "margin" --budget 1GiB --effective-batch 100 --margin 1.5
expect2 "required" --budget 1GiB
"$gradeq" plan --config "$model" --budget 1GiB --effective-batch 10 >"$work/out" 2>&1
[ $? = 2 ] && grep -q "name one with --scenario" "$work/out" || fail "two scenarios without --scenario: $(cat "$work/out")"

[ "$failures" = 0 ] && echo "plan: all checks pass" || echo "plan: $failures check(s) failed"
[ "$failures" = 0 ]
