#!/usr/bin/env bash
# Sweep every KV policy over its budget and plot nll_delta_pct against
# kv_retained_mean: the quality/memory frontier in docs/BENCHMARKS.md.
# Usage: ops/scripts/eval_sweep.sh [PROMPTS] [OUT_DIR]
#   PROMPTS  default tests/data/eval_prompts.txt
#   OUT_DIR  default docs/img (writes frontier.jsonl, frontier.svg)
# Needs a built ./build/service/confkv and gnuplot (gnuplot-nox).
set -euo pipefail
cd "$(dirname "$0")/../.."
prompts=${1:-tests/data/eval_prompts.txt}
out=${2:-docs/img}
models=${CONFKV_SHARED_MODELS:-../shared/models}
bin=${CONFKV_BIN:-./build/service/confkv}
mkdir -p "$out"
M=(--model "$models/stories260K.bin" --tokenizer "$models/tok512.bin")

fixed=""
for n in 32 48 64 96 128 192 256; do
  fixed+="window:$n,sinks:$n,h2o:$n,"
done
conf=""
for mm in 24:40 32:56 40:64 48:80 56:80 64:96 80:128 96:160 128:224; do
  lo=${mm%:*} hi=${mm#*:}
  p="min_size=$lo,base_size=$lo,max_size=$hi,retry_size=$((hi * 2))"
  conf+="conf:$p,conf-int8:$p,"
done
echo "eval_sweep: $(wc -l < "$prompts") prompts; this takes a few minutes" >&2
"$bin" eval "${M[@]}" --prompts "$prompts" --gen-tokens 400 --json \
    --policies "full,${fixed}${conf%,}" > "$out/frontier.json"
python3 - "$out/frontier.json" "$out/frontier.dat" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
groups = {}
for r in rows:
    kind = r["policy"].split(":")[0]
    groups.setdefault(kind, []).append(r)
with open(sys.argv[2], "w") as f:
    for kind in ("window", "sinks", "h2o", "conf", "conf-int8"):
        f.write(f"# {kind}\n")
        for r in sorted(groups.get(kind, []), key=lambda r: r["kv_retained_mean"]):
            f.write(f'{r["kv_retained_mean"]:.4f} {r["nll_delta_pct"]:.4f} {r["kv_hot_bytes_ratio"]:.4f}\n')
        f.write("\n\n")
PY
gnuplot <<EOF2
set terminal svg size 900,560 font "sans,12"
set output "$out/frontier.svg"
set title "stories260K: quality lost against KV kept ($(wc -l < "$prompts") prompts x 400 tokens)"
set xlabel "kv\\\\_retained\\\\_mean (hot KV tokens / full-cache tokens)"
set ylabel "nll\\\\_delta\\\\_pct (vs full cache, %)"
set logscale y
set grid
set key top right
plot "$out/frontier.dat" index 0 using 1:2 with linespoints title "window", \
     "" index 1 using 1:2 with linespoints title "sinks", \
     "" index 2 using 1:2 with linespoints title "h2o", \
     "" index 3 using 1:2 with linespoints lw 2 title "conf", \
     "" index 4 using 3:2 with linespoints lw 2 title "conf-int8 (x = bytes ratio)"
EOF2
echo "eval_sweep: wrote $out/frontier.json $out/frontier.svg" >&2
