#!/usr/bin/env bash
# tests/gpu/run.sh - build with the CUDA backend and run the GPU tests (label
# "gpu"), on a machine with a GPU. Budget: under 6 minutes (configure and
# build at most 4, tests at most 2; a cold build of the whole tree takes about
# one minute on 16 cores).
#
# Usage: tests/gpu/run.sh        (from anywhere; builds into <repo>/build-gpu)
# Env:   OUT                 folder to copy the logs into (device runs)
#        CONFKV_SHARED_MODELS folder with stories260K.bin and tok512.bin
#                            (default: the CMake cache's, ../shared/models)
#        CONFKV_CMAKE_ARGS   extra arguments for the configure step
# Exit:  ctest's status; 1 also when a GPU is visible but the tests skipped.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=build-gpu
jobs=$(nproc)
mkdir -p "$B"
LOG="$B/gpu-run.log"
: >"$LOG"
say() { echo "$@" | tee -a "$LOG"; }

copy_logs() {
    if [ -n "${OUT:-}" ]; then
        mkdir -p "$OUT"
        cp "$LOG" "$OUT/" 2>/dev/null || true
        cp "$B/Testing/Temporary/LastTest.log" "$OUT/gpu-LastTest.log" 2>/dev/null || true
    fi
}
trap copy_logs EXIT

say "== $(date -u +%FT%TZ) confkv GPU tests"
(nvidia-smi -L || echo "nvidia-smi: none") 2>&1 | tee -a "$LOG"
have_gpu=0
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && have_gpu=1

say "== configure"
models=()
[ -n "${CONFKV_SHARED_MODELS:-}" ] && models=("-DCONFKV_SHARED_MODELS=$CONFKV_SHARED_MODELS")
if ! timeout 120 cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCONFKV_CUDA=ON "${models[@]}" \
        ${CONFKV_CMAKE_ARGS:-} >>"$LOG" 2>&1; then
    say "configure failed (see $LOG)"; tail -30 "$LOG"; exit 2
fi
say "== build"
if ! timeout 240 cmake --build "$B" -j"$jobs" >>"$LOG" 2>&1; then
    say "build failed (see $LOG)"; tail -40 "$LOG"; exit 2
fi
say "== ctest -L gpu"
timeout 150 ctest --test-dir "$B" -L gpu --output-on-failure --timeout 120 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ] && [ "$have_gpu" -eq 1 ] && grep -q '(Skipped)' "$LOG"; then
    say "a GPU is visible but the GPU tests skipped"; rc=1
fi
say "== exit $rc"
exit "$rc"
