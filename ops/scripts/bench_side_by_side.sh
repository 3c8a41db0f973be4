#!/usr/bin/env bash
# Two confkv binaries side by side (docs/BENCHMARKS.md, "How to reproduce"): the
# stories15M-shape decode at batch 1 and 32 and the serve scenario on
# stories260K, alternated round by round, one thread; prints each run as a
# JSON line and then the medians and NEW / OLD ratios as JSON.
# Usage: ops/scripts/bench_side_by_side.sh OLD_CONFKV NEW_CONFKV [ROUNDS (5)]
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OLD_CONFKV NEW_CONFKV [ROUNDS]" >&2; exit 2; }
OLD=$(realpath "$1") NEW=$(realpath "$2") R=${3:-5}
M=$(cd "$(dirname "$0")/../.." && pwd)/../shared/models
work=${CONFKV_BENCH_DIR:-/tmp/confkv-side}; mkdir -p "$work"; cd "$work"
[ -f s15.gguf ] || "$OLD" synth -o s15.gguf --dim 288 --layers 6 --heads 6 --kv-heads 6 --ffn 768 --vocab 32000 --ctx 512 --type f32 --seed 1 >/dev/null 2>&1
out=side.jsonl; : > $out
for ((r = 1; r <= R; r++)); do
  for which in OLD NEW; do
    bin=${!which}
    b1=$("$bin" bench --model s15.gguf --batch 1 --prompt-tokens 32 --gen-tokens 96 --threads 1 --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["decode"]["tokens_per_s_aggregate"])')
    b32=$("$bin" bench --model s15.gguf --batch 32 --prompt-tokens 32 --gen-tokens 64 --threads 1 --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["decode"]["tokens_per_s_aggregate"])')
    sv=$("$bin" bench --scenario serve --model $M/stories260K.bin --tokenizer $M/tok512.bin --kv-budget-mb 3 --requests 100 --rate 1000 --prompt-tokens 16 --gen-tokens 200 --policy conf --threads 1 --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["tokens_per_cpu_s"], d["completed"], d["steps"], d["max_concurrent"])')
    echo "{\"round\": $r, \"bin\": \"$which\", \"s15_b1\": $b1, \"s15_b32\": $b32, \"serve\": \"$sv\", \"load\": \"$(cut -d' ' -f1 /proc/loadavg)\"}" | tee -a $out
  done
done
python3 - $out <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(b, k, f=float):
    return statistics.median(f(r[k]) if k != "serve" else float(r[k].split()[0]) for r in rows if r["bin"] == b)
res = {}
for k in ("s15_b1", "s15_b32", "serve"):
    o, n = med("OLD", k), med("NEW", k)
    res[k] = {"old": round(o, 1), "new": round(n, 1), "new_over_old": round(n / o, 3)}
print(json.dumps(res))
PY
