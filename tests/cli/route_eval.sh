#!/usr/bin/env bash
# `confkv route-eval` end to end: the cascade's rows against
# oracles that do not run its code.
#  - tokens=4,never keeps every job: its nll is the "small" row's;
#    tokens=4,rewind=4,always moves every job that reaches 4 tokens with
#    nothing accepted: its nll is the "large" row's;
#  - the "large" row is `confkv eval`'s full-cache nll of the large model
#    (the second implementation of the reference and its scoring); with the
#    same model on both sides every row is that nll;
#  - the decisions of condition rules (kept share, escalations, mean
#    at_token, small_token_share) are recomputed here, in Python, from
#    `confkv generate --confidence-trace` of the small model;
#  - a large model of another vocabulary (size, or pieces) and a bad rule are
#    refused with exit 2.
# Usage: route_eval.sh CONFKV_BIN SHARED_MODELS_DIR
set -euo pipefail
bin=$1 models=$2
here=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$models/stories260K.bin" ] && [ -f "$models/tok512.bin" ] || { echo "SKIP: no stories260K in $models"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
S=(--small "$models/stories260K.bin" --small-tokenizer "$models/tok512.bin")
G=160 # some of the small model's jobs end (EOS) before: they must stay small
head -n 12 "$here/data/eval_prompts.txt" > "$tmp/prompts.txt"

# The large models: the q8_0 conversion (close to the small one), and a
# random-weight model on the same vocabulary (far from it, so that rows
# scored by the wrong model cannot agree by accident).
"$bin" convert --from llama2c "$models/stories260K.bin" --tokenizer "$models/tok512.bin" \
    -o "$tmp/q8.gguf" --type q8_0 >/dev/null 2>&1 || fail "convert q8_0"
"$bin" synth -o "$tmp/rand.gguf" --dim 64 --layers 2 --heads 8 --kv-heads 4 --ffn 172 --ctx 512 \
    --vocab-from "$tmp/q8.gguf" >/dev/null 2>&1 || fail "synth --vocab-from"

# Per prompt, the small model's own greedy job (stops at EOS) and its trace.
: > "$tmp/traces.jsonl"
while IFS= read -r p; do
    [ -n "$p" ] || continue
    "$bin" generate --model "$models/stories260K.bin" --tokenizer "$models/tok512.bin" --threads 1 \
        --prompt "$p" --temperature 0 --max-tokens $G --json --confidence-trace >> "$tmp/traces.jsonl"
    echo >> "$tmp/traces.jsonl"
done < "$tmp/prompts.txt"

# Thresholds for condition rules: midpoints between the prompts' window
# statistics, so no value sits on a threshold (float sums in another order).
python3 - "$tmp/traces.jsonl" $G > "$tmp/thr.txt" <<'PY'
import json, sys
G = int(sys.argv[2])
tr = [json.loads(l)["trace"] for l in open(sys.argv[1]) if l.strip()]
def mid(vals):
    v = sorted(set(vals)); i = len(v) // 2
    return (v[i - 1] + v[i]) / 2
first = [sum(t["entropy"] for t in x[:4]) / 4 for x in tr if len(x) >= 4]
mins = [min(t["pmax"] for t in x[:8]) for x in tr if len(x) >= 8]
# the shortest job that ends before G: a window of its length decides on
# its last token (fed or not: the EOS step is no token of the job)
short = min([len(x) for x in tr if len(x) < G] or [0])
print("%.6f %.6f %d" % (mid(first), mid(mins), short))
PY
read -r X1 X2 NS < "$tmp/thr.txt"
[ "$NS" -gt 8 ] || fail "no job of the first prompts ends (EOS) within $G tokens"
R1="tokens=4,mean_entropy>$X1"
R2="tokens=8,min_pmax<$X2,rewind=3"
R3="tokens=6,at=every,max_entropy>2.2"
R4="tokens=$NS,always"

for large in q8 rand; do
    "$bin" route-eval "${S[@]}" --large "$tmp/$large.gguf" --prompts "$tmp/prompts.txt" --gen-tokens $G \
        --rule tokens=4,never --rule tokens=4,rewind=4,always --rule "$R1" --rule "$R2" --rule "$R3" --rule "$R4" \
        --json > "$tmp/re_$large.json" 2>"$tmp/re_$large.err" || { cat "$tmp/re_$large.err"; fail "route-eval ($large)"; }
    "$bin" eval --model "$tmp/$large.gguf" --prompts "$tmp/prompts.txt" --gen-tokens $G --policies full \
        --json > "$tmp/eval_$large.json" 2>/dev/null || fail "eval ($large)"
done
# The same model on both sides.
"$bin" route-eval "${S[@]}" --large "$models/stories260K.bin" --large-tokenizer "$models/tok512.bin" \
    --prompts "$tmp/prompts.txt" --gen-tokens $G --rule "$R1" --rule tokens=4,always --json \
    > "$tmp/re_same.json" 2>/dev/null || fail "route-eval (same model)"
"$bin" eval --model "$models/stories260K.bin" --tokenizer "$models/tok512.bin" --prompts "$tmp/prompts.txt" \
    --gen-tokens $G --policies full --json > "$tmp/eval_same.json" 2>/dev/null || fail "eval (same model)"

python3 - "$tmp" $G "$R1" "$R2" "$R3" "$R4" <<'PY'
import json, sys, re
d, G, R1, R2, R3, R4 = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
tr = [json.loads(l)["trace"] for l in open(d + "/traces.jsonl") if l.strip()]
n = len(tr)

def parse(spec):
    r = dict(tokens=16, every=False, rewind=0, always=False, never=False, cond=[])
    for item in spec.split(","):
        m = re.fullmatch(r"(mean|min|max)_(entropy|gap|pmax)([<>])(.+)", item)
        if m: r["cond"].append((m[1], m[2], m[3], float(m[4])))
        elif item == "always": r["always"] = True
        elif item == "never": r["never"] = True
        elif item == "at=every": r["every"] = True
        elif item.startswith("tokens="): r["tokens"] = int(item[7:])
        elif item.startswith("rewind="): r["rewind"] = int(item[7:])
        else: raise SystemExit("test: rule item " + item)
    return r

def decide(r, t):
    """svc_route.h's contract, written again: the hand-over point A, or None (kept)."""
    w = r["tokens"]
    for k in range(w, len(t) + 1):       # k tokens seen
        if r["never"]: return None
        win = t[k - w:k]
        hit = r["always"]
        for stat, sig, op, x in r["cond"]:
            v = [e[sig] for e in win]
            s = sum(v) / w if stat == "mean" else (min(v) if stat == "min" else max(v))
            hit = hit or (s > x if op == ">" else s < x)
        # a job that reached max_tokens (G) on that token has ended: kept
        if hit and k >= G: return None
        if hit: return max(k - r["rewind"], 0)
        if not r["every"]: return None
    return None

def rows(name):
    o = json.load(open("%s/re_%s.json" % (d, name)))
    assert o["gen_tokens"] == G and o["prompts"] == n, (o["gen_tokens"], o["prompts"])
    assert o["reference_tokens"] == n * G, o["reference_tokens"]
    return o, {r["rule"]: r for r in o["rows"]}

for large in ("q8", "rand"):
    o, R = rows(large)
    names = [r["rule"] for r in o["rows"]]
    assert names[:2] == ["small", "large"] and len(names) == 8, names
    sm, lg = R["small"], R["large"]
    ev = json.load(open("%s/eval_%s.json" % (d, large)))[0]
    assert ev["policy"] == "full"
    assert lg["nll"] == ev["nll"], ("large row against confkv eval", lg["nll"], ev["nll"])
    assert sm["share_kept"] == 1 and sm["small_token_share"] == 1 and sm["escalated"] == 0
    assert lg["share_kept"] == 0 and lg["small_token_share"] == 0 and lg["escalated"] == n
    assert lg["nll_delta_pct"] == 0
    never = R["tokens=4,at=first,never"]
    assert never["share_kept"] == 1 and never["escalated"] == 0 and never["nll"] == sm["nll"], never
    reach4 = sum(len(t) >= 4 for t in tr)
    always = R["tokens=4,at=first,rewind=4,always"]
    assert always["escalated"] == reach4 and always["mean_at_token"] == 0, always
    if reach4 == n:
        assert always["share_kept"] == 0 and always["nll"] == lg["nll"], always
    if large == "rand":   # far apart: the two rows must differ
        assert sm["nll"] > 2 * lg["nll"], (sm["nll"], lg["nll"])
    # Condition rules: the decisions from the traces.
    checked = 0
    for spec in (R1, R2, R3, R4):
        r = parse(spec)
        at = [decide(r, t) for t in tr]
        esc = [a for a in at if a is not None]
        row = [x for x in o["rows"] if x["rule"] not in ("small", "large")][2 + checked]
        checked += 1
        assert row["escalated"] == len(esc), (spec, row, at)
        assert abs(row["share_kept"] - (n - len(esc)) / n) < 1e-8, (spec, row)
        mean_at = sum(esc) / len(esc) if esc else 0
        assert abs(row["mean_at_token"] - mean_at) < 1e-6, (spec, row, at)
        share = sum(G if a is None else min(a, G) for a in at) / (n * G)
        assert abs(row["small_token_share"] - share) < 1e-8, (spec, row, share)
        # the cascade's nll lies between the two models' per-position mixes:
        # all positions from one model or the other, so within [min, max]
        # of the whole-row figures only when the shares are 0 or 1
        if share == 1: assert row["nll"] == sm["nll"], (spec, row)
        if share == 0: assert row["nll"] == lg["nll"], (spec, row)
    # R1 splits the prompts (the threshold is a median of its statistic).
    r1 = [x for x in o["rows"] if x["rule"].startswith("tokens=4,at=first,mean_entropy")][0]
    assert 0 < r1["escalated"] < n, r1
    # R4 moves the jobs that reach its window, the shortest ended one on its
    # last token (it ends, EOS, before G: so it is no length cut-off)
    r4 = o["rows"][-1]
    ns = int(R4[7:].split(",")[0])
    assert r4["rule"].startswith("tokens=%d," % ns) and r4["escalated"] >= 1, r4
    assert any(len(t) == ns < G for t in tr)

o, R = rows("same")
ev = json.load(open(d + "/eval_same.json"))[0]
for r in o["rows"]:
    assert r["nll"] == ev["nll"], ("same model: every row is eval's nll", r, ev["nll"])
print("route_eval: %d prompts, decisions and nll rows agree" % n)
PY

# Refusals: another vocabulary size, other pieces, a bad rule, a bad policy.
"$bin" synth -o "$tmp/v1024.gguf" --dim 64 --layers 1 --heads 8 --kv-heads 4 --ffn 172 --vocab 1024 \
    --ctx 512 >/dev/null 2>&1 || fail "synth 1024"
"$bin" synth -o "$tmp/v512.gguf" --dim 64 --layers 1 --heads 8 --kv-heads 4 --ffn 172 --vocab 512 \
    --ctx 512 >/dev/null 2>&1 || fail "synth 512"
expect2() {
    local what=$1 pat=$2; shift 2
    set +e; "$bin" route-eval "$@" --prompts "$tmp/prompts.txt" --gen-tokens 8 > "$tmp/o" 2> "$tmp/e"; local rc=$?; set -e
    [ $rc -eq 2 ] || { cat "$tmp/e"; fail "$what: exit $rc, expected 2"; }
    grep -q -- "$pat" "$tmp/e" || { cat "$tmp/e"; fail "$what: no '$pat' in the error"; }
    [ ! -s "$tmp/o" ] || fail "$what: printed rows"
}
expect2 "vocab size" "vocabularies differ: 512 tokens (small) against 1024" "${S[@]}" --large "$tmp/v1024.gguf"
expect2 "vocab pieces" "vocabularies differ at token" "${S[@]}" --large "$tmp/v512.gguf"
expect2 "bad rule" "route rule" "${S[@]}" --large "$tmp/q8.gguf" --rule tokens=4,mean_entropy
expect2 "bad policy" "\-\-policy" "${S[@]}" --large "$tmp/q8.gguf" --policy nosuch
expect2 "no --large" "required" "${S[@]}"
echo "route_eval: ok"
