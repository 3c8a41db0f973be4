#!/usr/bin/env bash
# bench_templates.sh - time to first token on a
# workload whose jobs share a 200-token system prompt, with the prefix cache
# off and with the system prompt prewarmed as a template
# (`confkv bench --scenario serve --system-prompt-tokens 200
#  --prefix-cache off|template`, same arrivals and prompts), and the cache hit
# rate (prompt blocks found over prompt blocks looked up).
#
#   ops/scripts/bench_templates.sh [--build DIR] [--models DIR] [--rounds K]
#       [--requests N] [--rate R] [--system-tokens S] [--prompt-tokens P]
#       [--gen-tokens G] [--threads T]
#
# Each round runs both modes one after the other, alternating the order;
# the JSON printed holds every run and the medians over rounds of
# ttft_p50 (off / template: target >= 5) and the hit rate (target >= 0.85).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$ROOT/build MODELS=$ROOT/../shared/models
ROUNDS=3 N=200 RATE=20 S=200 P=16 G=32 THREADS=1
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2 ;; --models) MODELS=$2 ;; --rounds) ROUNDS=$2 ;; --requests) N=$2 ;;
    --rate) RATE=$2 ;; --system-tokens) S=$2 ;; --prompt-tokens) P=$2 ;; --gen-tokens) G=$2 ;;
    --threads) THREADS=$2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "bench_templates.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
CONFKV=$BUILD/service/confkv
[ -x "$CONFKV" ] || { echo "bench_templates.sh: no $CONFKV (build first)" >&2; exit 1; }
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for ((r = 0; r < ROUNDS; r++)); do
  modes=(off template)
  [ $((r % 2)) = 1 ] && modes=(template off)
  for m in "${modes[@]}"; do
    echo "round $((r + 1))/$ROUNDS: prefix cache $m" >&2
    "$CONFKV" bench --scenario serve --model "$MODELS/stories260K.bin" --tokenizer "$MODELS/tok512.bin" \
      --system-prompt-tokens "$S" --prompt-tokens "$P" --gen-tokens "$G" --requests "$N" --rate "$RATE" \
      --threads "$THREADS" --prefix-cache "$m" --json >> "$OUT"
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
off = [r for r in runs if r["prefix_cache"] == "off"]
tpl = [r for r in runs if r["prefix_cache"] == "template"]
ratios = [a["ttft_p50_ms"] / b["ttft_p50_ms"] for a, b in zip(off, tpl)]
keys = ["ttft_p50_ms", "ttft_p99_ms", "prefix_hit_rate", "cached_tokens", "prefill_tokens", "tokens_per_s", "completed"]
print(json.dumps({
    "workload": {k: off[0][k] for k in ["requests", "rate", "system_prompt_tokens", "prompt_tokens", "gen_tokens", "policy"]},
    "runs": [{"prefix_cache": r["prefix_cache"], **{k: r[k] for k in keys}} for r in runs],
    "ttft_p50_ms_off": statistics.median(r["ttft_p50_ms"] for r in off),
    "ttft_p50_ms_template": statistics.median(r["ttft_p50_ms"] for r in tpl),
    "ttft_p50_ratio": statistics.median(ratios),
    "hit_rate": statistics.median(r["prefix_hit_rate"] for r in tpl),
}, indent=1))
PY
