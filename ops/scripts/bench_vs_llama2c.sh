#!/usr/bin/env bash
# bench_vs_llama2c.sh -- decode speed of confkv against the llama2.c reference program.
#
# usage: ops/scripts/bench_vs_llama2c.sh PATH_TO_LLAMA2C_RUN [RUNS]
#
# This script contains no llama2.c code and downloads nothing. Build llama2.c's `run`
# yourself from its own repository (https://github.com/karpathy/llama2.c, MIT) and pass
# the binary's path, e.g. as its README suggests for speed:
#     gcc -O3 -o run run.c -lm                  # "llama2.c -O3"
#     gcc -Ofast -march=native -o run run.c -lm # faster variant
#
# Both programs run alternately RUNS times (default 7) on stories260K (karpathy/tinyllamas,
# MIT), greedy, 256 positions from BOS:
#     RUN MODEL -z TOK -t 0 -n 256
#     confkv generate --model MODEL --tokenizer TOK --temperature 0 --max-tokens 256 --threads N
# and the script prints one JSON object with the medians of both tok/s figures:
#     {"llama2c_tok_s_median", "confkv_tok_s_median", "ratio" (confkv / llama2c), "runs",
#      "machine", "date"}
# Per-run figures go to stderr. Both must print the same greedy text, or the script fails.
#
# The two figures are close but not identical measures, both excluding load time:
#   llama2.c "achieved tok/s" = (pos-1) tokens / time from after the first forward pass
#   (millisecond clock; it also prints and flushes stdout after every token);
#   confkv "tokens/s (decode)" = completion tokens / time after the prefill (here the
#   BOS forward pass), sampling included.
#
# Environment:
#   CONFKV          confkv binary (default: build/service/confkv under the project root)
#   CONFKV_THREADS  --threads for confkv (default 1; set it empty for confkv's default, all cores)
#   MODELS          folder with stories260K.bin and tok512.bin (default: ../shared/models
#                   relative to the project root)
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
L2C=$1
RUNS=${2:-7}
CONFKV=${CONFKV:-$ROOT/build/service/confkv}
THREADS=${CONFKV_THREADS-1}
MODELS=${MODELS:-$ROOT/../shared/models}
MODEL=$MODELS/stories260K.bin
TOK=$MODELS/tok512.bin

[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "RUNS must be a positive integer" >&2; exit 2; }
for f in "$L2C" "$CONFKV"; do
    [[ -x "$f" ]] || { echo "not an executable: $f" >&2; exit 2; }
done
for f in "$MODEL" "$TOK"; do
    [[ -r "$f" ]] || { echo "missing: $f" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "python3 is required" >&2; exit 2; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

threads_args=()
[[ -n "$THREADS" ]] && threads_args=(--threads "$THREADS")

l2c_vals=()
ck_vals=()
for ((i = 1; i <= RUNS; i++)); do
    "$L2C" "$MODEL" -z "$TOK" -t 0 -n 256 >"$TMP/l2c.out" 2>"$TMP/l2c.err"
    "$CONFKV" generate --model "$MODEL" --tokenizer "$TOK" --temperature 0 --max-tokens 256 \
        "${threads_args[@]}" >"$TMP/ck.out" 2>"$TMP/ck.err"
    if ! cmp -s "$TMP/l2c.out" "$TMP/ck.out"; then
        echo "run $i: the two programs printed different text" >&2
        diff "$TMP/l2c.out" "$TMP/ck.out" >&2 || true
        exit 1
    fi
    l=$(sed -n 's/^achieved tok\/s: \([0-9.]*\).*/\1/p' "$TMP/l2c.err" | tail -n 1)
    c=$(sed -n 's/.* \([0-9.]*\) tokens\/s (decode).*/\1/p' "$TMP/ck.err" | tail -n 1)
    if [[ -z "$l" || -z "$c" ]]; then
        echo "run $i: could not parse tok/s" >&2
        cat "$TMP/l2c.err" "$TMP/ck.err" >&2
        exit 1
    fi
    echo "run $i/$RUNS: llama2c $l tok/s, confkv $c tok/s" >&2
    l2c_vals+=("$l")
    ck_vals+=("$c")
done

MACHINE="$(nproc) cores, $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)

python3 - "$RUNS" "$MACHINE" "$DATE" "${l2c_vals[*]}" "${ck_vals[*]}" <<'PY'
import json, statistics, sys
runs, machine, date = int(sys.argv[1]), sys.argv[2], sys.argv[3]
l2c = [float(v) for v in sys.argv[4].split()]
ck = [float(v) for v in sys.argv[5].split()]
lm, cm = statistics.median(l2c), statistics.median(ck)
print(json.dumps({
    "llama2c_tok_s_median": round(lm, 1),
    "confkv_tok_s_median": round(cm, 1),
    "ratio": round(cm / lm, 3),
    "runs": runs,
    "machine": machine,
    "date": date,
}))
PY
