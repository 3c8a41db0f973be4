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
# GPU benchmarks: decode at batch 1, 8 and 64 on a synthetic model of
# the 1B shape (f16), with the fraction of the H200's 4.8 TB/s reached; the
# serve scenario full vs conf; eval on the GPU for comparison with the CPU's.
if [ "$have_gpu" -eq 1 ] && [ "$rc" -eq 0 ] && [ "${CONFKV_GPU_BENCH:-1}" = 1 ]; then
    bin="$B/service/confkv"
    m1b="$B/synth-1b-f16.gguf"
    models_dir=${CONFKV_SHARED_MODELS:-../shared/models}
    say "== bench: synth 1B shape f16"
    [ -f "$m1b" ] || timeout 300 "$bin" synth -o "$m1b" --dim 2048 --layers 16 --heads 32 --kv-heads 8 \
        --ffn 8192 --vocab 32000 --ctx 2048 --type f16 --seed 1 2>&1 | tee -a "$LOG"
    for b in 1 8 64; do
        timeout 120 "$bin" bench --backend cuda --model "$m1b" --batch "$b" --prompt-tokens 128 \
            --gen-tokens 128 --peak-bw 4800 --peak-tflops 989 --json 2>>"$LOG" | tee -a "$LOG" \
            | tee "$B/bench-b$b.json"
    done
    say "== serve: full vs conf (synth 1B, 512 MiB KV)"
    for p in full conf; do
        timeout 120 "$bin" bench --scenario serve --backend cuda --model "$m1b" --kv-budget-mb 512 \
            --requests 128 --rate 1000 --prompt-tokens 64 --gen-tokens 256 --policy "$p" --json \
            2>>"$LOG" | tee -a "$LOG" | tee "$B/serve-$p.json"
    done
    # The serve command of docs/BENCHMARKS.md's "Continuous batching", on the
    # GPU: on the 2-core CPU conf/full is 1.54x there, bounded by per-token
    # costs that a GPU step does not have.
    say "== serve: full vs conf (stories260K, 3 MiB KV)"
    for p in full conf; do
        timeout 120 "$bin" bench --scenario serve --backend cuda --model "$models_dir/stories260K.bin" \
            --tokenizer "$models_dir/tok512.bin" --kv-budget-mb 3 --requests 200 --rate 1000 \
            --prompt-tokens 16 --gen-tokens 300 --policy "$p" --json \
            2>>"$LOG" | tee -a "$LOG" | tee "$B/serve260k-$p.json"
    done
    say "== eval on cuda vs cpu (stories260K, 16 prompts)"
    for be in cuda cpu; do
        timeout 120 "$bin" eval --backend "$be" --model "$models_dir/stories260K.bin" \
            --tokenizer "$models_dir/tok512.bin" --prompts tests/data/eval_prompts.txt --limit 16 \
            --gen-tokens 400 --policies full,window:128,conf,conf-int8 --json 2>>"$LOG" \
            | tee -a "$LOG" | tee "$B/eval-$be.json"
    done
    if [ -n "${OUT:-}" ]; then
        mkdir -p "$OUT"
        cat "$B"/bench-b*.json "$B"/serve-*.json "$B"/serve260k-*.json "$B"/eval-*.json > "$OUT/gpu-results.jsonl" 2>/dev/null
    fi
fi
say "== exit $rc"
exit "$rc"
