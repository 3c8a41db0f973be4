#!/usr/bin/env bash
# confkv against llama.cpp on the same GGUF files, side by side.
#
# For every file, batch size and thread count: `confkv bench` and
# llamacpp_bench (tests/llamacpp/llamacpp_bench.c: the same loop against
# llama.cpp's public API: untimed prefill of P tokens in each of B sequences,
# then G timed decode steps of B tokens, argmax per sequence) run
# ALTERNATELY, RUNS times each, so drift in the machine's load falls on
# both. Prints one JSON document: the CPU model and ISA, the kernels each
# side used, and per cell the runs, medians and the ratio confkv /
# llama.cpp of decode tokens/s (aggregate over the batch), and the same of
# the prefill (B x P tokens: one llama_decode for llama.cpp, chunks of
# `bench`'s --max-batch-tokens for confkv; --prompt 512 --batches 1 is the
# prefill-512 comparison, its G steps then only a few). At batch 1
# confkv also measures its roofline in the same run (read bandwidth over a
# buffer as big as a step's reads, in rounds alternated with its decode:
# `confkv bench --help`), and the cell reports the median fraction of it
# reached: bytes read per step are the file's weight bytes for quantized
# weights (4 a weight for f32/f16/bf16 ones) and the KV's.
#
# Usage: ops/scripts/bench_vs_llamacpp.sh [options] FILE.gguf...
#   --runs N        alternated runs per side and cell (default 5)
#   --batches "B.." batch sizes (default "1 32")
#   --threads "T.." thread counts (default "1 2")
#   --prompt P      prompt tokens per sequence (default 32)
#   --gen G         decode steps (default 64)
#   --cpu-kernels K confkv's kernels (c|avx2|avx512|vnni; default: the CPU's best)
#   --cpu-variant V llama.cpp's CPU backend library: best (default: the one llama.cpp
#                   loads on this CPU, by the libraries' own scores: zen4 on a Zen 4/5,
#                   haswell on an AVX2-only one), or a name (haswell = AVX2, zen4, ...)
#   --poll N        llama.cpp's threadpool polling level 0..100 (default: its own,
#                   50; 0 sleeps between ops as confkv's threads do: fairer on a
#                   host whose cores other work shares)
#   --cells "C.."   instead of --batches/--prompt: named cells, each
#                   decode:B (B sequences, --prompt tokens each, --gen timed
#                   steps) or prefill:P[xB] (B sequences, default 1, of P
#                   prompt tokens, the prefill timed, 4 decode steps);
#                   --compute-bound is "prefill:512 prefill:4096 prefill:32x32
#                   decode:1 decode:32 decode:64". A cell's "kind" says which
#                   ratio is its figure: min_ratio is over decode cells,
#                   min_prefill_ratio over prefill cells.
#   --out FILE      also write the JSON there
# Environment: CONFKV (default build/service/confkv), LLAMACPP_BENCH
# (default build/tests/llamacpp/llamacpp_bench), LLAMACPP_LIBDIR (default
# node-llama-cpp's prebuilt libraries under $CONFKV_DEPS_DIR or
# ~/.cache/confkv, as ops/scripts/install-llamacpp.sh puts them).
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
CONFKV=${CONFKV:-$here/build/service/confkv}
LLAMACPP_BENCH=${LLAMACPP_BENCH:-$here/build/tests/llamacpp/llamacpp_bench}
deps=${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}
LLAMACPP_LIBDIR=${LLAMACPP_LIBDIR:-$deps/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64}
runs=5 batches="1 32" threads="1 2" prompt=32 gen=64 kernels="" variant=best out="" poll="" cells=""
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --gen) gen=$2; shift 2 ;;
    --cpu-kernels) kernels=$2; shift 2 ;;
    --cpu-variant) variant=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --poll) poll=$2; shift 2 ;;
    --cells) cells=$2; shift 2 ;;
    --compute-bound) cells="prefill:512 prefill:4096 prefill:32x32 decode:1 decode:32 decode:64"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "bench_vs_llamacpp: unknown option $1" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
[ ${#files[@]} -gt 0 ] || { echo "bench_vs_llamacpp: no GGUF files given (--help)" >&2; exit 2; }
for b in "$CONFKV" "$LLAMACPP_BENCH"; do
  [ -x "$b" ] || { echo "bench_vs_llamacpp: $b not built (cmake --build build --target confkv llamacpp_bench)" >&2; exit 1; }
done
[ "$variant" = best ] || [ -f "$LLAMACPP_LIBDIR/libggml-cpu-$variant.so" ] ||
  { echo "bench_vs_llamacpp: no $LLAMACPP_LIBDIR/libggml-cpu-$variant.so (ops/scripts/install-llamacpp.sh)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
kflag=()
[ -n "$kernels" ] && kflag=(--cpu-kernels "$kernels")
pflag=()
[ -n "$poll" ] && pflag=(--poll "$poll")
# confkv sets its OpenMP threads' waiting itself, as users run it
# (svc_prefer_passive_wait: passive after a 3 us spin); llama.cpp's CPU
# backend here has its own threadpool (--poll), not OpenMP.

# The cells as "kind batch prompt gen" lines: --cells, or every batch of
# --batches at --prompt (kind "both": the decode and the prefill of one run).
cell_list=()
if [ -n "$cells" ]; then
  for c in $cells; do
    case "$c" in
      decode:[0-9]*) cell_list+=("decode ${c#decode:} $prompt $gen") ;;
      prefill:[0-9]*x[0-9]*) pb=${c#prefill:}; cell_list+=("prefill ${pb#*x} ${pb%x*} 4") ;;
      prefill:[0-9]*) cell_list+=("prefill 1 ${c#prefill:} 4") ;;
      *) echo "bench_vs_llamacpp: bad cell \"$c\" (decode:B, prefill:P or prefill:PxB)" >&2; exit 2 ;;
    esac
  done
else
  for b in $batches; do cell_list+=("both $b $prompt $gen"); done
fi

for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "bench_vs_llamacpp: no file $f" >&2; exit 1; }
  for cell in "${cell_list[@]}"; do
    read -r kind b p g <<< "$cell"
    for t in $threads; do
      roof=(--no-roofline)
      [ "$b" = 1 ] && [ "$kind" != prefill ] && roof=()
      ctxflag=()
      [ $((p + g + 8)) -gt 2048 ] && ctxflag=(--max-context $((p + g + 8)))
      for r in $(seq 1 "$runs"); do
        echo "bench_vs_llamacpp: $(basename "$f") $kind batch $b prompt $p threads $t run $r/$runs" >&2
        tag="{\"side\":\"%s\",\"file\":\"$f\",\"kind\":\"$kind\",\"b\":$b,\"p\":$p,\"g\":$g,\"t\":$t,\"r\":"
        "$CONFKV" bench --model "$f" --batch "$b" --threads "$t" --prompt-tokens "$p" \
          --gen-tokens "$g" --json "${roof[@]}" "${kflag[@]}" "${ctxflag[@]}" 2>/dev/null |
          sed "s|^|$(printf "$tag" confkv)|" \
          >> "$tmp/confkv.jsonl" || { echo "bench_vs_llamacpp: confkv bench failed on $f" >&2; exit 1; }
        echo "}" >> "$tmp/confkv.jsonl"
        "$LLAMACPP_BENCH" --model "$f" --libdir "$LLAMACPP_LIBDIR" --cpu-variant "$variant" --batch "$b" \
          --threads "$t" --prompt-tokens "$p" --gen-tokens "$g" "${pflag[@]}" |
          sed "s|^|$(printf "$tag" llama)|" \
          >> "$tmp/llama.jsonl" || { echo "bench_vs_llamacpp: llamacpp_bench failed on $f" >&2; exit 1; }
        echo "}" >> "$tmp/llama.jsonl"
      done
    done
  done
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //' || true)
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512dq|avx512_vnni|avxvnni)$' | tr '\n' ' ' || true)
python3 - "$tmp" "$cpu" "$flags" "$variant" "$runs" "$prompt" "$gen" "$out" <<'PY'
import json, os, statistics, sys
tmp, cpu, flags, variant, runs, prompt, gen, out = sys.argv[1:9]
def load(name):
    rows = []
    with open(os.path.join(tmp, name)) as f:
        text = f.read().replace("\n}", "}")
    for line in text.splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows
cells = {}
for side in ("confkv", "llama"):
    for row in load(side + ".jsonl"):
        key = (row["file"], row["kind"], row["b"], row["p"], row["g"], row["t"])
        cells.setdefault(key, {"confkv": [], "llama": []})[side].append(row["r"])
res, kernels, llama_ver = [], set(), ""
for (f, kind, b, p, g, t), c in cells.items():
    ck = [r["decode"]["tokens_per_s_aggregate"] for r in c["confkv"]]
    ll = [r["tokens_per_s_aggregate"] for r in c["llama"]]
    for r in c["confkv"]:
        kernels.add(r.get("kernels", ""))
    llama_ver = c["llama"][0].get("llama_cpp", "") if c["llama"] else llama_ver
    if c["llama"] and variant == "best":  # the one llamacpp_bench chose
        variant = c["llama"][0].get("cpu_backend", variant)
    cell = {"file": os.path.basename(f), "kind": kind, "batch": b, "prompt_tokens": p, "gen_tokens": g,
            "threads": t,
            "confkv_tokens_per_s": ck, "llama_cpp_tokens_per_s": ll,
            "confkv_median": statistics.median(ck), "llama_cpp_median": statistics.median(ll),
            "ratio": statistics.median(ck) / statistics.median(ll),
            "prefill_confkv_median": statistics.median(r["prefill"]["tokens_per_s"] for r in c["confkv"]),
            "prefill_llama_cpp_median": statistics.median(b * p / r["prefill_s"] for r in c["llama"]),
            "file_bytes": c["confkv"][0].get("file_bytes"),
            "confkv_rss_bytes": statistics.median(r.get("rss_bytes", 0) for r in c["confkv"]),
            "confkv_peak_rss_bytes": statistics.median(r.get("peak_rss_bytes", 0) for r in c["confkv"])}
    cell["prefill_ratio"] = cell["prefill_confkv_median"] / cell["prefill_llama_cpp_median"]
    # resident memory against the file plus the KV pool bench configured
    # (its plan): the target is at most 1.15
    kv = c["confkv"][0].get("plan", {}).get("kv")
    if kv is not None and cell["file_bytes"]:
        cell["kv_pool_bytes"] = kv
        cell["rss_over_file_and_kv"] = cell["confkv_rss_bytes"] / (cell["file_bytes"] + kv)
        cell["peak_rss_over_file_and_kv"] = cell["confkv_peak_rss_bytes"] / (cell["file_bytes"] + kv)
    fr = [r["roofline"]["bandwidth_fraction"] for r in c["confkv"] if r["roofline"]["mem_read_bytes_per_s"] > 0]
    if fr:
        cell["bandwidth_fraction_median"] = statistics.median(fr)
        cell["read_bandwidth_median"] = statistics.median(r["roofline"]["mem_read_bytes_per_s"] for r in c["confkv"])
        cell["weight_bytes_per_step"] = c["confkv"][0]["roofline"]["weight_bytes_per_step"]
    res.append(cell)
load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else []
doc = {"cpu": cpu, "load_average_at_end": load, "cpu_flags": flags.split(), "confkv_kernels": sorted(kernels),
       "llama_cpp": {"version": llama_ver, "cpu_variant": variant,
                     "poll": next((c["llama"][0].get("poll") for c in cells.values() if c["llama"]), None)},
       "runs": int(runs), "prompt_tokens": int(prompt), "gen_tokens": int(gen),
       "alternated": True, "results": res,
       "min_ratio": min((c["ratio"] for c in res if c["kind"] != "prefill"), default=None),
       "min_prefill_ratio": min((c["prefill_ratio"] for c in res if c["kind"] != "decode"), default=None),
       "max_rss_over_file_and_kv": max((c.get("rss_over_file_and_kv", 0) for c in res), default=0),
       "max_peak_rss_over_file_and_kv": max((c.get("peak_rss_over_file_and_kv", 0) for c in res), default=0)}
s = json.dumps(doc, indent=1)
print(s)
if out:
    with open(out, "w") as f:
        f.write(s + "\n")
PY
