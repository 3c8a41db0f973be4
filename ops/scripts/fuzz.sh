#!/usr/bin/env bash
# Fuzz one reader of outside bytes with libFuzzer (docs/FUZZING.md).
# Usage: ops/scripts/fuzz.sh TARGET SECONDS [extra libFuzzer flags...]
#   TARGET: job gguf model llama2c tokfile coldblock session template http
#           config batch tokenizer   (tests/fuzz/fuzz_TARGET.c)
# Builds the clang fuzz build (build-fuzz/, CONFKV_FUZZ=ON: ASan + UBSan +
# coverage) when needed, then runs the target for SECONDS over its seed
# corpus (tests/fuzz/corpus/TARGET, read only) and its regression inputs,
# growing a working corpus outside the repository
# (${CONFKV_FUZZ_WORK:-/tmp/confkv-fuzz}/TARGET/corpus).
# Exit status: 0 when nothing crashed; 1 on a crash, a leak, a timeout
# (-timeout=10 s an input) or running out of memory (-rss_limit_mb=2048), with
# the crash input's path and how to keep it as a regression input; 2 for a
# usage error or a failed build.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
targets="job gguf model llama2c tokfile coldblock session template http config batch tokenizer chat_template bpe prom offmd"

if [ $# -lt 2 ]; then
  echo "usage: $0 TARGET SECONDS [libFuzzer flags...]   (targets: $targets)" >&2
  exit 2
fi
target=$1 seconds=$2
shift 2
case " $targets " in *" $target "*) ;; *) echo "fuzz.sh: unknown target '$target' (targets: $targets)" >&2; exit 2 ;; esac
case "$seconds" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number" >&2; exit 2 ;; esac

# CONFKV_FUZZ_NOBUILD=1 runs the binary already in the build folder as it is
# (while a file that is not yours does not compile, say).
build=${CONFKV_FUZZ_BUILD:-$root/build-fuzz}
if [ "${CONFKV_FUZZ_NOBUILD:-0}" != 1 ]; then
  # configured every time (a second or two): a target added since the last
  # run is unknown to the build until CMake has run again
  CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCONFKV_FUZZ=ON -DCONFKV_CUDA=OFF >/dev/null
  if ! cmake --build "$build" -j"$(nproc)" --target "fuzz_$target" >"$build/fuzz-build.log" 2>&1; then
    tail -30 "$build/fuzz-build.log" >&2
    echo "fuzz.sh: the build of fuzz_$target failed (log $build/fuzz-build.log)" >&2
    exit 2
  fi
fi

work=${CONFKV_FUZZ_WORK:-/tmp/confkv-fuzz}/$target
mkdir -p "$work/corpus" "$work/crashes"
log=$work/fuzz.log
echo "fuzz.sh: $target for ${seconds}s (log $log, working corpus $work/corpus)"
set +e
# The working corpus comes first: libFuzzer writes new inputs there only, so
# the seeds in the repository are never touched.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
OMP_NUM_THREADS=1 \
  "$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$work/crashes/" -print_final_stats=1 "$@" \
    "$work/corpus" "tests/fuzz/corpus/$target" "tests/fuzz/regress/$target" >"$log" 2>&1
rc=$?
set -e
grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+ *DONE" "$log" | tr '\n' ' ' || true
echo
if [ $rc -ne 0 ]; then
  crash=$(grep -oE "(Test unit written to|artifact_prefix.*; Test unit written to) [^ ]+" "$log" | awk '{print $NF}' | tail -1)
  echo "fuzz.sh: $target FAILED (exit $rc). The report:" >&2
  grep -E "ERROR: |SUMMARY: |contract broken|#[0-3] 0x" "$log" | head -12 >&2 || true
  if [ -n "$crash" ]; then
    echo "fuzz.sh: the input is $crash" >&2
    echo "fuzz.sh: replay it:  $build/tests/fuzz/fuzz_$target $crash" >&2
    echo "fuzz.sh: keep it as a regression input (then ctest runs it in every build):" >&2
    echo "  cp $crash tests/fuzz/regress/$target/<what-it-breaks>" >&2
  fi
  exit 1
fi
echo "fuzz.sh: $target: no crash in ${seconds}s"
