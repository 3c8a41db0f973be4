#!/usr/bin/env bash
# check_1b.sh - a Llama-3.2-1B-shaped model in confkv and in llama.cpp:
# load it in both, compare the first step's logits,
# and measure load time and peak RSS. A manual benchmark, not a ctest.
#
# The model is synthetic (random weights, `confkv synth`) in Llama 3.2 1B's
# shape: dim 2048, 16 layers, 32 heads, 8 KV heads (head_dim 64), ffn 8192,
# the llama-bpe vocabulary (128,256 tokens, from llama.cpp's
# models/ggml-vocab-llama-bpe.gguf), tied embeddings, rope_freqs (Llama 3.1's
# factors), rope theta 500000.
#
# Usage: ops/scripts/check_1b.sh [BUILD_DIR]      (default build)
#   BUILD_DIR must hold service/confkv and tests/llamacpp/llamacpp_logits
#   (configure with ops/scripts/install-llamacpp.sh's install present).
# Environment:
#   TYPE     weights: f16 (default; 2.5 GB), f32 (4.9 GB), bf16, q8_0 (1.3 GB)
#   WORK     where the model is written (default /tmp/confkv-1b); kept and
#            reused by the next run unless KEEP=0
#   THREADS  threads for both engines (default: all cores)
#   CONFKV_DEPS_DIR  llama.cpp's install (default $HOME/.cache/confkv)
# Prints one JSON object on stdout (progress on stderr); exit 0 when the
# logits agree within the type's tolerance (see tests/llamacpp/oracle.sh
# for why the 16- and 8-bit types are looser), 1 otherwise.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
TYPE=${TYPE:-f16}
WORK=${WORK:-/tmp/confkv-1b}
THREADS=${THREADS:-$(nproc)}
KEEP=${KEEP:-1}
deps=${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}
libdir=$deps/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
vocab=$deps/llama.cpp/models/ggml-vocab-llama-bpe.gguf
confkv=$build/service/confkv
ll=$build/tests/llamacpp/llamacpp_logits
prompt="The capital of France is"

die() { echo "check_1b: $*" >&2; exit 1; }
[ -x "$confkv" ] || die "no $confkv (build it)"
[ -x "$ll" ] || die "no $ll (install llama.cpp: ops/scripts/install-llamacpp.sh, re-run cmake, build llamacpp_logits)"
[ -f "$vocab" ] || die "no $vocab (ops/scripts/install-llamacpp.sh)"
[ -x /usr/bin/time ] || die "no /usr/bin/time (apt-get install time)"
case $TYPE in
  f32) tol=1e-4 gb=5.0 ;; f16) tol=1e-3 gb=2.5 ;; bf16) tol=1e-2 gb=2.5 ;; q8_0) tol=3e-2 gb=1.4 ;;
  *) die "TYPE must be f32, f16, bf16 or q8_0" ;;
esac
"$confkv" synth --help | grep -q -- --rope-freqs || die "this confkv synth has no --rope-freqs"

mkdir -p "$WORK"
model=$WORK/llama-1b-shape-$TYPE.gguf
synth_s=null
if [ ! -s "$model" ]; then
  avail_kb=$(df -Pk "$WORK" | awk 'NR==2{print $4}')
  need_kb=$(awk -v g="$gb" 'BEGIN{printf "%d", g * 1.2 * 1024 * 1024}')
  [ "$avail_kb" -ge "$need_kb" ] || die "$WORK has $((avail_kb / 1024)) MB free, $TYPE needs ~${gb} GB"
  echo "check_1b: synth $model" >&2
  t0=$(date +%s.%N)
  "$confkv" synth -o "$model.tmp" --type "$TYPE" --seed 1 --dim 2048 --layers 16 --heads 32 \
    --kv-heads 8 --ffn 8192 --ctx 8192 --vocab-from "$vocab" --tied --rope-freqs \
    --rope-theta 500000 >&2
  mv "$model.tmp" "$model"
  synth_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
fi
[ "$KEEP" = 0 ] && trap 'rm -f "$model" "$WORK"/*.bin "$WORK"/*.json "$WORK"/*.time' EXIT

# Read the model once, so that both engines find it in the page cache: the
# figures are load time, not disk time, and neither run pays for the other.
cat "$model" >/dev/null

echo "check_1b: confkv generate" >&2
# --max-context 512: the KV cache of a short run, as llama.cpp's n_ctx here
# (prompt + steps + 16), so the peak RSS compares the weights and buffers.
/usr/bin/time -v -o "$WORK/confkv.time" "$confkv" generate --model "$model" --prompt "$prompt" \
  --temperature 0 --ignore-eos --max-tokens 1 --max-context 512 --threads "$THREADS" --json \
  --dump-logits "$WORK/confkv.bin" --dump-steps 1 >"$WORK/confkv.json" 2>"$WORK/confkv.err" ||
  { cat "$WORK/confkv.err" >&2; die "confkv generate failed"; }
echo "check_1b: llamacpp_logits" >&2
/usr/bin/time -v -o "$WORK/llama.time" "$ll" --model "$model" --libdir "$libdir" --prompt "$prompt" \
  --steps 1 --threads "$THREADS" --out "$WORK/llama.bin" >"$WORK/llama.json" 2>"$WORK/llama.err" ||
  { cat "$WORK/llama.err" >&2; die "llamacpp_logits failed"; }
set +e
python3 "$root/tests/llamacpp/compare_logits.py" --label "llama-1b-shape-$TYPE" --tol "$tol" \
  --min-steps 1 --confkv "$WORK/confkv.bin" --confkv-json "$WORK/confkv.json" \
  --llama "$WORK/llama.bin" --llama-json "$WORK/llama.json" >"$WORK/compare.out"
cmp_rc=$?
set -e

python3 - "$WORK" "$model" "$TYPE" "$THREADS" "$synth_s" "$cmp_rc" <<'EOF'
import json, os, re, subprocess, sys
work, model, typ, threads, synth_s, cmp_rc = sys.argv[1:]

def gnu_time(path):
    t = open(path).read()
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1))
    w = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", t).group(1)
    s = 0.0
    for part in w.split(":"):
        s = s * 60 + float(part)
    return s, rss

def last_json(path):
    return json.loads(open(path).read().strip().splitlines()[-1])

cpu = ""
for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
    if line.startswith("Model name:"):
        cpu = line.split(":", 1)[1].strip()
cj, lj = last_json(work + "/confkv.json"), last_json(work + "/llama.json")
cw, crss = gnu_time(work + "/confkv.time")
lw, lrss = gnu_time(work + "/llama.time")
cmp_lines = open(work + "/compare.out").read().strip().splitlines()
compare = json.loads(cmp_lines[0]) if cmp_lines and cmp_lines[0].startswith("{") else None
prefill, decode = cj["timings"]["prefill_s"], cj["timings"]["decode_s"]
out = {
    "cpu": cpu, "cores": os.cpu_count(), "threads": int(threads), "type": typ,
    "model_bytes": os.path.getsize(model), "prompt_tokens": len(cj["prompt_ids"]),
    "synth_s": None if synth_s == "null" else float(synth_s),
    "confkv": {"wall_s": round(cw, 2), "load_s": round(cw - prefill - decode, 2),
               "prefill_s": round(prefill, 3), "peak_rss_mb": round(crss / 1024, 1),
               "first_id": cj["tokens"][0] if cj["tokens"] else None},
    "llama_cpp": {"wall_s": round(lw, 2), "load_s": lj["load_s"], "prefill_s": lj["decode_s"],
                  "peak_rss_mb": round(lrss / 1024, 1), "first_id": lj["ids"][0],
                  "version": lj.get("llama_cpp"), "cpu_backend": lj.get("cpu_backend")},
    "compare": compare, "verdict": cmp_lines[-1] if cmp_lines else "",
}
print(json.dumps(out, indent=1))
EOF
exit "$cmp_rc"
