#!/usr/bin/env bash
# `confkv bench --json`: the roofline's figures
# recomputed here, in Python, from the rounds and totals the bench prints:
#  - the rounds cover every decode step once, each round at least one;
#  - each round's fraction is its decode rate over its read, the
#    bandwidth_fraction the median of those, mem_read_bytes_per_s the
#    median of the reads and mem_read_bytes_per_s_best their best;
#  - bandwidth_fraction_best_read is the mean decode rate (bytes a step x
#    steps a second) over that best read, and the decode's tokens/s its
#    steps over its seconds;
#  - --no-roofline measures nothing, --peak-bw takes the datasheet figure
#    with no rounds, and a bad flag is refused with exit 2;
#  - the prefill's compute_fraction is its int8 multiply-adds a token times
#    its tokens/s over the tiles' measured rate: 0 with all of it for the
#    f32 model; for its q8_0 conversion on a CPU with VNNI (Q8_0's tiles)
#    a positive rate and a fraction in (0, 2), else zeros.
# Usage: bench.sh CONFKV_BIN SHARED_MODELS_DIR
set -euo pipefail
bin=$1 models=$2
[ -f "$models/stories260K.bin" ] && [ -f "$models/tok512.bin" ] || { echo "SKIP: no stories260K in $models"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
M=(--model "$models/stories260K.bin" --tokenizer "$models/tok512.bin" --threads 2 --json)

"$bin" bench "${M[@]}" --gen-tokens 37 > "$tmp/r37.json" 2>/dev/null || fail "bench --gen-tokens 37"
"$bin" bench "${M[@]}" --gen-tokens 3 > "$tmp/r3.json" 2>/dev/null || fail "bench --gen-tokens 3"
"$bin" bench "${M[@]}" --gen-tokens 20 --no-roofline > "$tmp/none.json" 2>/dev/null || fail "--no-roofline"
"$bin" bench "${M[@]}" --gen-tokens 20 --peak-bw 100 > "$tmp/peak.json" 2>/dev/null || fail "--peak-bw"
"$bin" convert --from llama2c "$models/stories260K.bin" --tokenizer "$models/tok512.bin" \
    -o "$tmp/q8.gguf" --type q8_0 > /dev/null 2>&1 || fail "convert to q8_0"
"$bin" bench --model "$tmp/q8.gguf" --threads 2 --json --prompt-tokens 64 --gen-tokens 3 > "$tmp/q8.json" 2>/dev/null ||
    fail "bench q8_0"
vnni=$("$bin" version --json | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["cpu"]["kernels"] == "vnni"))')
rc=0
"$bin" bench "${M[@]}" --gen-tokens 0 > /dev/null 2> "$tmp/err" || rc=$?
[ "$rc" = 2 ] || fail "--gen-tokens 0: exit $rc, not 2"

python3 - "$tmp" "$vnni" <<'EOF'
import json, statistics, sys
d = sys.argv[1]
def load(n): return json.load(open(f"{d}/{n}.json"))
def close(a, b, what, rel=1e-6):
    assert abs(a - b) <= rel * max(abs(a), abs(b), 1e-30), f"{what}: {a} != {b}"

for name, gen, nr in (("r37", 37, 8), ("r3", 3, 3)):
    r = load(name)
    rf, dec = r["roofline"], r["decode"]
    rounds = rf["rounds"]
    assert len(rounds) == nr, f"{name}: {len(rounds)} rounds, not {nr}"
    assert sum(o["steps"] for o in rounds) == gen and min(o["steps"] for o in rounds) >= 1, rounds
    for o in rounds:
        assert o["read_bytes_per_s"] > 0 and o["decode_bytes_per_s"] > 0, o
        close(o["fraction"], o["decode_bytes_per_s"] / o["read_bytes_per_s"], f"{name} round fraction")
    close(rf["bandwidth_fraction"], statistics.median(o["fraction"] for o in rounds), f"{name} median fraction")
    close(rf["mem_read_bytes_per_s"], statistics.median(o["read_bytes_per_s"] for o in rounds), f"{name} median read")
    best = max(o["read_bytes_per_s"] for o in rounds)
    close(rf["mem_read_bytes_per_s_best"], best, f"{name} best read")
    close(dec["tokens_per_s_aggregate"], gen / dec["seconds"], f"{name} tokens/s")
    close(rf["bandwidth_fraction_best_read"], rf["bytes_per_step"] * dec["tokens_per_s_per_sequence"] / best,
          f"{name} fraction of the best read")
    assert 0 < dec["step_seconds_median"] <= dec["seconds"], dec
    assert rf["mem_read_buffer_bytes"] >= 1 << 20 and rf["dram_read_bytes_per_s"] > 0, rf

n = load("none")["roofline"]
assert n["rounds"] == [] and n["bandwidth_fraction"] == 0 and n["mem_read_bytes_per_s"] == 0, n
p = load("peak")
pr = p["roofline"]
assert pr["rounds"] == [] and pr["mem_read_bytes_per_s"] == 100e9, pr
close(pr["bandwidth_fraction"], pr["bytes_per_step"] * p["decode"]["tokens_per_s_per_sequence"] / 100e9,
      "peak fraction")
for name in ("r37", "none", "peak"):
    r = load(name)
    assert r["prefill"]["compute_fraction"] == 0 and r["roofline"]["int8_macs_per_token"] == 0, name
q = load("q8")
qr, qp = q["roofline"], q["prefill"]
if sys.argv[2] == "1":
    assert qr["int8_macs_per_s"] > 0 and qr["int8_macs_per_token"] > 0, qr
    close(qp["compute_fraction"], qr["int8_macs_per_token"] * qp["tokens_per_s"] / qr["int8_macs_per_s"],
          "compute_fraction")
    assert 0 < qp["compute_fraction"] < 2, qp
else:
    assert qp["compute_fraction"] == 0 and qr["int8_macs_per_s"] == 0, (qp, qr)
print("bench: rounds, medians and fractions agree")
EOF
