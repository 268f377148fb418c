#!/usr/bin/env bash
# The main job: set up and build if needed, run the gate (default suite and
# properties) and write the report to ./report. Extra arguments go to
# `gradeq report`, e.g. --backend cuda or --seed 7. Exits as gradeq does:
# 0 pass, 1 verification failure, 2 bad usage, 3 environment.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/gradeq report --out report "$@"
