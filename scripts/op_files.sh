#!/bin/sh
# op_files.sh — the source files that define an op: its registry record
# (harness/core/ops/), the reference math it calls, and each Backend op it
# needs: its entry in kernels/backend_ops.def, its kernel in each backend
# (kernels/cpu/, kernels/cuda/), the preconditions the backends share
# (kernels/check.h) and its op-table entry (harness/core/op_table_entries.cpp).
# A Backend op counts every file under kernels/ and the op table that
# names it at all, comments included, so that nothing is missed.
#
#   scripts/op_files.sh OP [BACKEND_OP ...]
#   scripts/op_files.sh concat copy_columns
#
# Prints the files and their count; a new op's count is what adding it
# costs (docs/ARCHITECTURE.md, "Where new work goes").
set -eu
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 OP [BACKEND_OP ...]" >&2; exit 2; }
op=$1
shift
record=$(grep -l "name() const override { return \"$op\"; }" harness/core/ops/*.cpp harness/core/ops/*.h 2>/dev/null || true)
[ -n "$record" ] || { echo "$0: no record of op '$op' in harness/core/ops/" >&2; exit 2; }
files=$record
# The reference functions the record calls (ref::name), where they are defined.
for f in $(grep -o 'ref::[a-z_]*_\(forward\|backward[a-z_]*\)' $record | sort -u | sed 's/ref:://'); do
  files="$files $(grep -l "^[A-Za-z].* $f(" reference/*.h reference/*.cpp 2>/dev/null || true)"
done
for m in "$@"; do
  grep -q "GRADEQ_BACKEND_OP([a-z]*, $m," kernels/backend_ops.def ||
    { echo "$0: '$m' is not an op of kernels/backend_ops.def" >&2; exit 2; }
  files="$files $(grep -rlw "$m" kernels harness/core/op_table_entries.cpp 2>/dev/null || true)"
done
echo $files | tr ' ' '\n' | sort -u | sed '/^$/d'
echo "$(echo $files | tr ' ' '\n' | sort -u | sed '/^$/d' | wc -l) files"
