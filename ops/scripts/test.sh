#!/usr/bin/env bash
# Build and run the whole test suite: the release build, then the same tests
# under AddressSanitizer + UndefinedBehaviorSanitizer.
# Usage: ops/scripts/test.sh [--no-asan]
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=$(nproc)

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

if [ "${1:-}" != "--no-asan" ]; then
  # The sanitizer build skips CUDA: nvcc objects are not instrumented.
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCONFKV_SANITIZE=ON -DCONFKV_CUDA=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" -LE slow
fi
