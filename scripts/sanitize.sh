#!/usr/bin/env bash
# The unit, cli and mpi tests under AddressSanitizer and UndefinedBehaviorSanitizer
# (any report fails the test that triggered it), in build-sanitize/. CI runs
# it after scripts/test.sh; it needs what scripts/setup.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRADEQ_WITH_CUDA=OFF -DGRADEQ_BUILD_BENCHMARKS=OFF \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >build-sanitize.configure.log 2>&1 ||
  { cat build-sanitize.configure.log; exit 1; }
cmake --build build-sanitize -j "$(nproc 2>/dev/null || echo 2)"
# Leak checking is off: RapidCheck and GoogleTest keep process-lifetime
# allocations that LeakSanitizer would report as leaks of gradeq's.
# GRADEQ_SANITIZED: tests/registered_backend_verbs.sh leaves out its self-tests.
export GRADEQ_SANITIZED=1 ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-sanitize --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" -L 'unit|cli|mpi' "$@"
