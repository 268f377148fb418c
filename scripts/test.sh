#!/usr/bin/env bash
# The tests: set up and build if needed, then run every CTest test (unit,
# property, cli labels). Extra arguments go to ctest, e.g. -L property.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
