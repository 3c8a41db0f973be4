#!/usr/bin/env bash
# The confkv CLI end to end: generate reproduces the llama2.c oracle (from
# the llama2.c files and from a GGUF conversion), --json carries the
# documented fields, convert writes GGUF an independent reader accepts, and
# bad arguments fail cleanly.
# Usage: generate.sh CONFKV_BIN TEST_GGUF_BIN SHARED_MODELS_DIR
set -euo pipefail
bin=$1 test_gguf=$2 models=$3
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
M=(--model "$models/stories260K.bin" --tokenizer "$models/tok512.bin")
fail() { echo "FAIL: $*" >&2; exit 1; }

# The oracle: the fenced block after "Greedy from BOS" in the shared README.
awk '/^Greedy from BOS/{f=1} f&&/^```$/{c++; if(c==2) exit; next} f&&c==1{print}' \
    "$models/README.md" > "$tmp/oracle.txt"
[ "$(wc -c < "$tmp/oracle.txt")" -gt 500 ] || fail "oracle not found in $models/README.md"

# llama2.c's 256 steps from BOS print 256 tokens.
"$bin" generate "${M[@]}" --temperature 0 --max-tokens 256 2>/dev/null > "$tmp/g.txt"
cmp "$tmp/g.txt" "$tmp/oracle.txt" || fail "greedy 256 tokens differ from the oracle"
# --steps is llama2.c's -n: the same text with and without the prompt.
"$bin" generate "${M[@]}" --temperature 0 --steps 256 --prompt "Once upon a time" 2>/dev/null > "$tmp/p.txt"
cmp "$tmp/p.txt" "$tmp/oracle.txt" || fail "--steps 256 with the prompt differs from the oracle"
# --max-tokens 255: the oracle's first 255 tokens (all but its final '.').
"$bin" generate "${M[@]}" --temperature 0 --max-tokens 255 2>/dev/null > "$tmp/g255.txt"
head -c -2 "$tmp/oracle.txt" > "$tmp/oracle255.txt"; echo >> "$tmp/oracle255.txt"
cmp "$tmp/g255.txt" "$tmp/oracle255.txt" || fail "--max-tokens 255 is not the oracle's first 255 tokens"

# JSON output and its fields.
"$bin" generate "${M[@]}" --temperature 0 --max-tokens 40 --prompt "Once upon a time" --json \
    --confidence-trace > "$tmp/g.json"
python3 - "$tmp/g.json" "$tmp/oracle.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
oracle = open(sys.argv[2]).read()
for k in ("prompt", "completion", "tokens", "finish_reason", "usage", "confidence", "trace"):
    assert k in d, k
assert d["prompt"] == "Once upon a time"
assert oracle.startswith(d["prompt"] + d["completion"]), "prompt + completion is not the oracle's start"
assert d["finish_reason"] == "length"
assert d["usage"] == {"prompt_tokens": 5, "completion_tokens": 40}, d["usage"]
assert len(d["tokens"]) == 40 and len(d["trace"]) == 40
for t in d["trace"]:
    assert set(t) == {"id", "entropy", "gap", "pmax"}
    assert 0 <= t["gap"] <= t["pmax"] <= 1 and t["entropy"] >= 0
assert [t["id"] for t in d["trace"]] == d["tokens"]
c = d["confidence"]
n = len(d["trace"])
for k, f in (("mean_entropy", "entropy"), ("mean_gap", "gap"), ("mean_pmax", "pmax")):
    assert abs(c[k] - sum(t[f] for t in d["trace"]) / n) < 1e-5, k
PY
# No prompt: prompt is "".
"$bin" generate "${M[@]}" --temperature 0 --max-tokens 3 --json | python3 -c '
import json, sys; d = json.load(sys.stdin); assert d["prompt"] == "" and d["completion"].startswith("Once")'

# --policy adds the kv object; full keeps everything, conf keeps less.
for pol in full conf conf-int8 window:64; do
    "$bin" generate "${M[@]}" --temperature 0 --max-tokens 200 --ignore-eos --policy $pol --json \
        > "$tmp/pol.json"
    python3 - "$tmp/pol.json" "$pol" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); pol = sys.argv[2]; kv = d["kv"]
for k in ("retained_mean", "retained_peak", "recalls", "demotions", "hot_peak_bytes", "warm_peak_bytes"):
    assert k in kv, k
assert d["usage"]["completion_tokens"] == 200
if pol == "full":
    assert kv["retained_mean"] == 1 and kv["demotions"] == 0
else:
    assert 0 < kv["retained_mean"] < 1 and kv["demotions"] > 0, kv
    assert kv["hot_peak_bytes"] > 0
if pol.startswith("conf"):
    assert kv["recalls"] > 0 and kv["warm_peak_bytes"] > 0, kv
PY
done

# convert: f32 reproduces the oracle; an independent GGUF reader agrees.
"$bin" convert --from llama2c "$models/stories260K.bin" --tokenizer "$models/tok512.bin" \
    -o "$tmp/m.gguf" 2>/dev/null
"$bin" generate --model "$tmp/m.gguf" --temperature 0 --max-tokens 256 2>/dev/null > "$tmp/gg.txt"
cmp "$tmp/gg.txt" "$tmp/oracle.txt" || fail "GGUF f32 conversion differs from the oracle"
for t in f16 q8_0; do
    "$bin" convert --from llama2c "$models/stories260K.bin" --tokenizer "$models/tok512.bin" \
        -o "$tmp/m-$t.gguf" --type $t 2>/dev/null
    "$bin" generate --model "$tmp/m-$t.gguf" --temperature 0 --max-tokens 256 --json > "$tmp/$t.json"
    "$bin" generate "${M[@]}" --temperature 0 --max-tokens 256 --json > "$tmp/ref.json"
    python3 - "$tmp/ref.json" "$tmp/$t.json" "$t" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))["tokens"]; b = json.load(open(sys.argv[2]))["tokens"]
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]: n += 1
print(f"{sys.argv[3]}: {n}/{len(a)} greedy tokens agree with f32")
PY
done
# A file whose scales are NaN (corrupt, or hostile: the reader cannot
# check every block's f16 scale) fails with a message that says what, in
# greedy and sampled decoding alike: every scale of blk.0.attn_q.weight set to
# f16 NaN, found through the GGUF header.
python3 - "$tmp/m-q8_0.gguf" "$tmp/nan.gguf" <<'PY'
import struct, sys
f = bytearray(open(sys.argv[1], "rb").read()); o = 8
def rd(fmt):
    global o; v = struct.unpack_from(fmt, f, o); o += struct.calcsize(fmt); return v[0]
def st(): n = rd("<Q"); global o; o += n; return f[o - n:o].decode()
SZ = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
def val(t):
    if t == 8: return st()
    if t == 9:
        et, n = rd("<I"), rd("<Q"); return [val(et) for _ in range(n)]
    return rd(SZ[t])
nt, nkv = rd("<Q"), rd("<Q"); align = 32
for _ in range(nkv):
    k = st(); v = val(rd("<I"))
    if k == "general.alignment": align = v
tens = {}
for _ in range(nt):
    name = st(); dims = [rd("<Q") for _ in range(rd("<I"))]; ty = rd("<I"); tens[name] = (dims, ty, rd("<Q"))
base = (o + align - 1) // align * align
dims, ty, off = tens["blk.0.attn_q.weight"]
assert ty == 8, ty  # q8_0: 34-byte blocks, the f16 scale first
n = dims[0] * dims[1] // 32
for b in range(n): f[base + off + 34 * b: base + off + 34 * b + 2] = b"\x00\x7e"
open(sys.argv[2], "wb").write(f)
PY
for temp in 0 0.8; do
    set +e
    "$bin" generate --model "$tmp/nan.gguf" --prompt "Once upon" --temperature $temp --max-tokens 8 \
        > /dev/null 2> "$tmp/e"
    rc=$?
    set -e
    [ $rc -eq 1 ] || fail "NaN scales at temperature $temp: exit $rc, not 1"
    grep -q "no finite maximum" "$tmp/e" || fail "NaN scales at temperature $temp: $(cat "$tmp/e")"
done
set +e
bash "$here/gguf_independent.sh" --compare "$test_gguf" "$tmp/m.gguf"
rc=$?
set -e
[ $rc -eq 0 ] || [ $rc -eq 77 ] || fail "independent GGUF reader disagrees (rc $rc)"

# version
"$bin" version --json | python3 -c '
import json, sys; d = json.load(sys.stdin); assert "cpu" in d["backends"] and d["version"]'
# The default thread count is every CPU this process may use (nproc), also
# when OMP_PROC_BIND / OMP_PLACES bind threads: libgomp binds the first
# process's initial thread to one CPU before main, and the re-exec for
# OMP_WAIT_POLICY (svc_proc.c) would inherit that one CPU unless it unbinds.
n=$(nproc)
for bind in "" "OMP_PROC_BIND=true" "OMP_PLACES=cores" "OMP_PROC_BIND=spread OMP_PLACES=threads"; do
    got=$(env -u OMP_WAIT_POLICY -u OMP_NUM_THREADS $bind "$bin" version --json |
          python3 -c 'import json, sys; print(json.load(sys.stdin)["cpu"]["threads"])')
    [ "$got" = "$n" ] || fail "version --json cpu.threads is $got with '$bind', nproc $n"
done

# --messages with a chat template: a template without a system role (it
# raises on one, as Gemma 2's does) gets the system message merged into the
# next turn, and --json says so in `warnings`; --render-only shows the merge
# and passes `tools` from the file to the template.
printf '%s' "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% if tools %}[{{ tools[0]['function']['name'] }}]{% endif %}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}" > "$tmp/nosys.jinja"
echo '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Once upon a time"}], "tools": [{"type": "function", "function": {"name": "get_weather"}}]}' > "$tmp/chat.json"
"$bin" generate "${M[@]}" --messages "$tmp/chat.json" --chat-template "$tmp/nosys.jinja" --render-only \
    > "$tmp/r.txt" 2> "$tmp/r.err"
[ "$(cat "$tmp/r.txt")" = "$(printf '[get_weather]<user>Be brief.\nOnce upon a time')" ] || fail "render-only merge: $(cat "$tmp/r.txt")"
grep -q "warning: system message merged into the next turn" "$tmp/r.err" || fail "render-only warning: $(cat "$tmp/r.err")"
"$bin" generate "${M[@]}" --messages "$tmp/chat.json" --chat-template "$tmp/nosys.jinja" --temperature 0 \
    --max-tokens 4 --json > "$tmp/c.json"
python3 - "$tmp/c.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["warnings"] == ["system message merged into the next turn: the chat template has no system role"], d.get("warnings")
PY
echo '{"messages": [{"role": "user", "content": "Once upon a time"}]}' > "$tmp/chat1.json"
"$bin" generate "${M[@]}" --messages "$tmp/chat1.json" --chat-template "$tmp/nosys.jinja" --temperature 0 \
    --max-tokens 4 --json | python3 -c 'import json, sys; assert "warnings" not in json.load(sys.stdin)' ||
    fail "warnings without a system message"
echo '{"messages": [{"role": "user", "content": "x"}], "tools": {"name": "f"}}' > "$tmp/badtools.json"
set +e
"$bin" generate "${M[@]}" --messages "$tmp/badtools.json" --chat-template "$tmp/nosys.jinja" --render-only \
    2> "$tmp/e" >/dev/null
[ $? -eq 1 ] && grep -q "'tools' must be an array of tool objects" "$tmp/e" || fail "tools not an array: $(cat "$tmp/e")"
set -e

# Bad input: clear errors, right exit codes, no crash.
set +e
"$bin" generate --bogus 2>"$tmp/e"; [ $? -eq 2 ] || fail "unknown flag should exit 2"
grep -q "unknown argument" "$tmp/e" || fail "unknown flag message"
"$bin" generate --model "$tmp/nope.bin" --tokenizer x 2>"$tmp/e"; [ $? -eq 1 ] || fail "missing model should exit 1"
grep -q "No such file" "$tmp/e" || fail "missing model message"
head -c 1000 "$models/stories260K.bin" > "$tmp/trunc.bin"
"$bin" generate --model "$tmp/trunc.bin" --tokenizer "$models/tok512.bin" 2>"$tmp/e"; [ $? -eq 1 ] || fail "truncated model should exit 1"
grep -q "truncated" "$tmp/e" || fail "truncated model message: $(cat "$tmp/e")"
"$bin" generate "${M[@]}" --temperature -1 2>/dev/null; [ $? -eq 2 ] || fail "negative temperature should exit 2"
set -e
echo "cli generate: all checks passed"
