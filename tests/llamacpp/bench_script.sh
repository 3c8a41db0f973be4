#!/usr/bin/env bash
# bench_script.sh - ops/scripts/bench_vs_llamacpp.sh end to end, on a small
# file llama.cpp quantizes (label oracle): the script runs both sides on it
# and its JSON has every field docs/BENCHMARKS.md's comparison reads (ratios, the
# bandwidth reached at batch 1, resident memory against the file plus the
# KV pool, the prefill's ratio). A check that the tool works, not of any speed: the figures only
# have to be positive and the fractions sane.
#
# Usage: bench_script.sh CONFKV LLAMACPP_BENCH LLAMACPP_QUANTIZE LIBDIR
set -euo pipefail
confkv=$1 llb=$2 llq=$3 libdir=$4
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$confkv" synth -o "$tmp/f32.gguf" --type f32 --seed 5 --dim 256 --layers 2 --heads 4 \
  --kv-heads 2 --ffn 768 --vocab 512 --ctx 128 2>"$tmp/synth.err" || { cat "$tmp/synth.err"; exit 1; }
"$llq" "$tmp/f32.gguf" "$tmp/q4km.gguf" Q4_K_M >/dev/null 2>"$tmp/quant.err" ||
  { echo "llamacpp_quantize failed:"; cat "$tmp/quant.err"; exit 1; }
CONFKV=$confkv LLAMACPP_BENCH=$llb LLAMACPP_LIBDIR=$libdir \
  bash "$here/../../ops/scripts/bench_vs_llamacpp.sh" --runs 2 --batches "1 4" --threads 1 \
  --prompt 4 --gen 4 --poll 0 --out "$tmp/out.json" "$tmp/q4km.gguf" >"$tmp/stdout.json" 2>"$tmp/err" ||
  { echo "bench_vs_llamacpp.sh failed:"; cat "$tmp/err"; exit 1; }
python3 - "$tmp/out.json" "$tmp/stdout.json" "$libdir" <<'PY'
import json, os, sys
doc = json.load(open(sys.argv[1]))
assert doc == json.load(open(sys.argv[2])), "--out and stdout differ"
for k in ("cpu", "cpu_flags", "confkv_kernels", "llama_cpp", "results", "min_ratio", "max_rss_over_file_and_kv"):
    assert k in doc, "no %s" % k
assert doc["alternated"] and doc["runs"] == 2 and doc["confkv_kernels"] and doc["llama_cpp"]["version"]
# the default variant, "best", resolved to the library llamacpp_bench loaded
v = doc["llama_cpp"]["cpu_variant"]
assert v != "best" and os.path.isfile(os.path.join(sys.argv[3], "libggml-cpu-%s.so" % v)), v
cells = {c["batch"]: c for c in doc["results"]}
assert sorted(cells) == [1, 4], cells.keys()
for b, c in cells.items():
    assert len(c["confkv_tokens_per_s"]) == 2 and len(c["llama_cpp_tokens_per_s"]) == 2, c
    assert all(x > 0 for x in c["confkv_tokens_per_s"] + c["llama_cpp_tokens_per_s"]), c
    assert abs(c["ratio"] - c["confkv_median"] / c["llama_cpp_median"]) < 1e-9, c
    assert c["file_bytes"] > 0 and c["kv_pool_bytes"] > 0 and c["confkv_rss_bytes"] > c["file_bytes"] / 2, c
    assert 0 < c["rss_over_file_and_kv"] < 50 and 0 < c["peak_rss_over_file_and_kv"], c
    assert c["prefill_confkv_median"] > 0 and c["prefill_llama_cpp_median"] > 0, c
    assert abs(c["prefill_ratio"] - c["prefill_confkv_median"] / c["prefill_llama_cpp_median"]) < 1e-9, c
assert "bandwidth_fraction_median" in cells[1] and 0 < cells[1]["bandwidth_fraction_median"] < 5, cells[1]
assert "bandwidth_fraction_median" not in cells[4], "roofline measured at batch 4"
assert doc["min_ratio"] == min(c["ratio"] for c in cells.values())
assert doc["min_prefill_ratio"] == min(c["prefill_ratio"] for c in cells.values())
print(json.dumps({"min_ratio": doc["min_ratio"], "max_rss_over_file_and_kv": doc["max_rss_over_file_and_kv"],
                  "bandwidth_fraction_b1": cells[1]["bandwidth_fraction_median"]}))
PY
