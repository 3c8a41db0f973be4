#!/usr/bin/env bash
# Fuzz every target for a short while (docs/FUZZING.md): what CI runs.
# Usage: ops/scripts/fuzz_ci.sh [SECONDS]   (SECONDS each, default 20: the
# sixteen targets take about 16 x SECONDS, 5.5 minutes, after one build of
# all of them; ops/scripts/test.sh, what CI runs, gives 15). Fails (1) if any target crashes, and fuzz.sh prints each crash
# input and how to keep it; 2 when the build fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-20}
targets="job gguf model llama2c tokfile coldblock session template http config batch tokenizer chat_template bpe prom offmd"
build=${CONFKV_FUZZ_BUILD:-$(pwd)/build-fuzz}
# One build of every target first, so the time below is fuzzing only.
if [ "${CONFKV_FUZZ_NOBUILD:-0}" != 1 ]; then
  # configured every time: a target added since the last run needs CMake again
  CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCONFKV_FUZZ=ON -DCONFKV_CUDA=OFF >/dev/null || exit 2
  if ! cmake --build "$build" -j"$(nproc)" --target $(printf 'fuzz_%s ' $targets) >"$build/fuzz-build.log" 2>&1; then
    tail -30 "$build/fuzz-build.log" >&2
    echo "fuzz_ci: the fuzz build failed (log $build/fuzz-build.log)" >&2
    exit 2
  fi
fi
failed=()
for t in $targets; do
  CONFKV_FUZZ_NOBUILD=1 CONFKV_FUZZ_BUILD="$build" ops/scripts/fuzz.sh "$t" "$seconds" || failed+=("$t")
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz_ci: crashes in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz_ci: all targets ran ${seconds}s each without a crash"
