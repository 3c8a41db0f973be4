#!/usr/bin/env bash
# Two models in one confkvd, jobs answered by name, and `"model":
# "auto"` jobs routed by the cascade's rule. Small: stories260K (llama2.c
# files); large: its q8_0 GGUF conversion (`confkv convert`: the same
# vocabulary, other weights). Every check compares texts with the model
# run alone (greedy, token-id prompts), in the same daemon:
#   - named jobs: each model's text is `confkv generate`'s on that file;
#   - always, rewind=tokens: the auto job's text is the large model's alone;
#   - always, rewind=0: the small model's first N tokens, then the large
#     model's continuation of prompt + those N ids (a tokens job);
#   - never: the small model's alone;
#   - a condition rule: a job escalates exactly when the small model's own
#     confidence trace (return_confidence) meets the rule;
# the same cascade through `confkv batch --local` gives the daemon's results;
# and a large model of another vocabulary is refused at start-up. One
# daemon: the rule changes by SIGHUP (route_rule is live) between phases.
# Usage: cascade.sh CONFKV CONFKVD MODELS
CONFKV=$1 CONFKVD=$2 MODELS=$3
source "$(dirname "$0")/lib.sh"

SMALL="$MODELS/stories260K.bin"
"$CONFKV" convert --from llama2c "$SMALL" --tokenizer "$MODELS/tok512.bin" -o "$TMP/large.gguf" --type q8_0 \
  > /dev/null 2> "$TMP/convert.err" || fail "convert"
MODEL_ARGS=(--model "small=$SMALL,tokenizer=$MODELS/tok512.bin" --model "large=$TMP/large.gguf"
            --route cascade --route-models small,large --threads 1)
PROMPTS=("Once upon a time" "The dragon said" "Lily and Tom went to" "A little bird" "Sam was sad because")
N=40 K=6

# prompt ids (BOS included), one JSON array a line
printf '%s\n' "${PROMPTS[@]}" > "$TMP/prompts.txt"
"$CONFKV" tokenize --model "$SMALL" --tokenizer "$MODELS/tok512.bin" --file "$TMP/prompts.txt" > "$TMP/ids.txt" ||
  fail "tokenize"

# run_jobs NAME: send $TMP/NAME.jobs (JSON lines) to the daemon, results in $TMP/NAME.out
run_jobs() {
  "$CONFKV" submit --brokers "$BOOT" --wait --timeout 60 < "$TMP/$1.jobs" > "$TMP/$1.out" 2> "$TMP/$1-submit.err" ||
    fail "submit $1"
}
stop() { kill -TERM "$LAST_PID"; wait "$LAST_PID" || fail "confkvd exit code $?"; }
# rule R: the config file says route_rule=R, SIGHUP, and the log says it is applied
RELOADS=0
rule() {
  echo "route_rule = $1" > "$TMP/c.conf"
  kill -HUP "$LAST_PID"
  RELOADS=$((RELOADS + 1))
  local i
  for ((i = 0; i < 100; i++)); do
    [ "$(grep -c 'event=config_reload status=applied route_rule' "$TMP/d.err")" -ge $RELOADS ] && return 0
    sleep 0.1
  done
  fail "route_rule $1 not applied"
}

# --- always, rewind = tokens: the large model from the prompt; and named jobs
echo "route_rule = tokens=$K,rewind=$K,always" > "$TMP/c.conf"
start_confkvd d --kafka-embedded --config "$TMP/c.conf"
python3 - "$TMP/ids.txt" $N > "$TMP/a.jobs" <<'PY'
import json, sys
ids = [json.loads(l) for l in open(sys.argv[1])]
n = int(sys.argv[2])
for i, p in enumerate(ids):
    for m in ("auto", "small", "large"):
        print(json.dumps({"id": f"{m}-{i}", "model": m, "tokens": p, "max_tokens": n, "temperature": 0,
                          "ignore_eos": True, "return_confidence": True}))
PY
run_jobs a
curl -sf "http://$HTTP/metrics" > "$TMP/a.metrics" || fail "/metrics"
curl -sf "http://$HTTP/readyz" > "$TMP/a.readyz" || fail "/readyz"
for i in 0 1; do # the named models against `confkv generate` on their files
  want_s=$("$CONFKV" generate --model "$SMALL" --tokenizer "$MODELS/tok512.bin" --prompt "${PROMPTS[$i]}" \
           --temperature 0 --max-tokens $N --ignore-eos --json | python3 -c "import json,sys;print(json.load(sys.stdin)['completion'])")
  want_l=$("$CONFKV" generate --model "$TMP/large.gguf" --prompt "${PROMPTS[$i]}" \
           --temperature 0 --max-tokens $N --ignore-eos --json | python3 -c "import json,sys;print(json.load(sys.stdin)['completion'])")
  python3 - "$TMP/a.out" "$i" "$want_s" "$want_l" <<'PY' || fail "named jobs against confkv generate"
import json, sys
r = {d["id"]: d for d in map(json.loads, open(sys.argv[1]))}
i = sys.argv[2]
assert r[f"small-{i}"]["text"] == sys.argv[3], (r[f"small-{i}"]["text"], sys.argv[3])
assert r[f"large-{i}"]["text"] == sys.argv[4], (r[f"large-{i}"]["text"], sys.argv[4])
PY
done
python3 - "$TMP/a.out" "$TMP/a.metrics" "$TMP/a.readyz" <<'PY' || fail "always, rewind=tokens"
import json, sys
r = {d["id"]: d for d in map(json.loads, open(sys.argv[1]))}
assert len(r) == 15 and all(d["status"] == "ok" for d in r.values()), [d.get("error") for d in r.values()]
for i in range(5):
    a, s, l = r[f"auto-{i}"], r[f"small-{i}"], r[f"large-{i}"]
    assert a["route"] == {"model": "large", "escalated": True, "at_token": 0}, a["route"]
    assert a["model"] == "large" and a["text"] == l["text"], (a["text"], l["text"])
    assert s["route"] == {"model": "small", "escalated": False, "at_token": None}, s["route"]
    assert l["route"]["model"] == "large" and not l["route"]["escalated"]
    assert a["usage"]["completion_tokens"] == 40
# the two models' texts differ somewhere (else the checks above prove little)
assert any(r[f"small-{i}"]["text"] != r[f"large-{i}"]["text"] for i in range(5)), "models agree everywhere"
m = open(sys.argv[2]).read()
for line in ('confkv_model_results_total{model="small"} 5', 'confkv_model_results_total{model="large"} 10',
             'confkv_route_jobs_total{model="small",outcome="escalated"} 5',
             'confkv_route_jobs_total{model="small",outcome="kept"} 0'):
    assert line in m, line
assert 'confkv_engine_steps_total{model="large"}' in m and 'confkv_engine_steps_total{model="small"}' in m
rz = json.load(open(sys.argv[3]))
assert [x["name"] for x in rz["models"]] == ["small", "large"] and all(x["loaded"] for x in rz["models"])
assert rz["models"][0]["vocab_hash"] == rz["models"][1]["vocab_hash"]
assert rz["route"]["small"] == "small" and rz["route"]["large"] == "large"
PY

# --- always, rewind = 0: the small model's first K tokens, then the large one's
rule "tokens=$K,always"
python3 - "$TMP/ids.txt" $N $K "$TMP/a.out" > "$TMP/b.jobs" <<'PY'
import json, sys
ids = [json.loads(l) for l in open(sys.argv[1])]
n, k = int(sys.argv[2]), int(sys.argv[3])
a = {d["id"]: d for d in map(json.loads, open(sys.argv[4]))}
for i, p in enumerate(ids):
    first = [t["id"] for t in a[f"small-{i}"]["confidence"]["trace"][:k]] # the small model's first k ids
    print(json.dumps({"id": f"auto-{i}", "model": "auto", "tokens": p, "max_tokens": n, "temperature": 0,
                      "ignore_eos": True, "return_confidence": True}))
    print(json.dumps({"id": f"small{k}-{i}", "model": "small", "tokens": p, "max_tokens": k, "temperature": 0,
                      "ignore_eos": True}))
    print(json.dumps({"id": f"cont-{i}", "model": "large", "tokens": p + first, "max_tokens": n - k,
                      "temperature": 0, "ignore_eos": True}))
PY
run_jobs b
python3 - "$TMP/b.out" $K "$TMP/a.out" <<'PY' || fail "always, rewind=0"
import json, sys
r = {d["id"]: d for d in map(json.loads, open(sys.argv[1]))}
k = int(sys.argv[2])
a = {d["id"]: d for d in map(json.loads, open(sys.argv[3]))}
for i in range(5):
    x = r[f"auto-{i}"]
    assert x["status"] == "ok" and x["route"] == {"model": "large", "escalated": True, "at_token": k}, x
    want = r[f"small{k}-{i}"]["text"] + r[f"cont-{i}"]["text"]
    assert x["text"] == want, (x["text"], want)
    ids = [t["id"] for t in x["confidence"]["trace"]]
    small = a[f"small-{i}"]["confidence"]["trace"]
    assert ids[:k] == [t["id"] for t in small[:k]] and len(ids) == 40
    # the accepted tokens' confidence is the small model's
    assert [t["entropy"] for t in x["confidence"]["trace"][:k]] == [t["entropy"] for t in small[:k]]
PY

# --- never: the small model alone
rule "tokens=$K,never"
sed 's/"model": "small"/"model": "auto"/; s/"id": "small-/"id": "never-/' "$TMP/a.jobs" | grep '"never-' > "$TMP/c.jobs"
run_jobs c
python3 - "$TMP/c.out" "$TMP/a.out" <<'PY' || fail "never"
import json, sys
r = {d["id"]: d for d in map(json.loads, open(sys.argv[1]))}
a = {d["id"]: d for d in map(json.loads, open(sys.argv[2]))}
assert len(r) == 5
for i in range(5):
    x = r[f"never-{i}"]
    assert x["route"] == {"model": "small", "escalated": False, "at_token": None}, x["route"]
    assert x["text"] == a[f"small-{i}"]["text"]
PY

# --- a condition: escalate when the mean entropy of the first 8 tokens is
# over the median of the five jobs' (so that some move and some stay),
# computed here from the small model's own traces
T=$(python3 - "$TMP/a.out" <<'PY'
import json, sys, statistics
a = {d["id"]: d for d in map(json.loads, open(sys.argv[1]))}
m = [statistics.fmean(t["entropy"] for t in a[f"small-{i}"]["confidence"]["trace"][:8]) for i in range(5)]
print(f"{statistics.median(m) - 1e-4:.6f}")
PY
)
rule "tokens=8,mean_entropy>$T"
grep '"auto-' "$TMP/a.jobs" | sed 's/"id": "auto-/"id": "cond-/' > "$TMP/e.jobs"
run_jobs e
stop
python3 - "$TMP/e.out" "$TMP/a.out" "$T" <<'PY' || fail "condition rule"
import json, sys, statistics
r = {d["id"]: d for d in map(json.loads, open(sys.argv[1]))}
a = {d["id"]: d for d in map(json.loads, open(sys.argv[2]))}
t = float(sys.argv[3])
moved = 0
for i in range(5):
    x = r[f"cond-{i}"]
    m = statistics.fmean(e["entropy"] for e in a[f"small-{i}"]["confidence"]["trace"][:8])
    want = m > t
    assert x["route"]["escalated"] == want, (i, m, t, x["route"])
    if want:
        moved += 1
        assert x["route"]["at_token"] == 8 and x["route"]["model"] == "large"
    else:
        assert x["text"] == a[f"small-{i}"]["text"] and x["route"]["model"] == "small"
assert 0 < moved < 5, moved
PY

# --- the same cascade in this process: `confkv batch --local` takes confkvd's
# flags, and gives the daemon's results (text, model) for the condition rule;
# a request for a model not served is refused as confkvd refuses it
python3 - "$TMP/e.jobs" > "$TMP/batch.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    cid = j.pop("id")
    j.pop("return_confidence", None)
    print(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/completions", "body": j}))
print(json.dumps({"custom_id": "unknown", "method": "POST", "url": "/v1/completions",
                  "body": {"model": "gpt-9", "prompt": "x"}}))
PY
"$CONFKV" batch --local "${MODEL_ARGS[@]}" --route-rule "tokens=8,mean_entropy>$T" --input "$TMP/batch.jsonl" \
  --output "$TMP/batch.out" 2> "$TMP/batch.err" || fail "batch --local cascade: $(tail -3 "$TMP/batch.err")"
python3 - "$TMP/batch.out" "$TMP/e.out" <<'PY' || fail "batch --local cascade against confkvd"
import json, sys
b = {d["custom_id"]: d["response"] for d in map(json.loads, open(sys.argv[1]))}
r = {d["id"]: d for d in map(json.loads, open(sys.argv[2]))}
assert len(b) == 6, len(b)
for i in range(5):
    x, y = b[f"cond-{i}"], r[f"cond-{i}"]
    assert x["status_code"] == 200, x
    assert x["body"]["choices"][0]["text"] == y["text"], (x, y["text"])
    assert x["body"]["model"] == y["route"]["model"], (x["body"]["model"], y["route"])
    assert x["body"]["usage"]["completion_tokens"] == y["usage"]["completion_tokens"]
u = b["unknown"]
assert u["status_code"] == 400 and u["body"]["error"]["code"] == "unknown_model", u
PY

# every result against schemas/result.schema.json (Debian's python3-jsonschema)
/usr/bin/python3 - "$HERE/../../schemas/result.schema.json" "$TMP"/[abce].out <<'PY' || fail "results against the schema"
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
v = jsonschema.Draft202012Validator(schema)
n = 0
for f in sys.argv[2:]:
    for line in open(f):
        v.validate(json.loads(line))
        n += 1
assert n == 40, n
PY

# --- another vocabulary: refused at start-up, naming both models
"$CONFKV" synth -o "$TMP/other.gguf" --dim 64 --layers 1 --heads 2 --ffn 64 --vocab 600 --ctx 256 > /dev/null 2>&1 ||
  fail "synth"
rc=0
"$CONFKVD" --kafka-embedded --http-port 0 --model "small=$SMALL,tokenizer=$MODELS/tok512.bin" \
  --model "other=$TMP/other.gguf" --route cascade --route-models small,other > "$TMP/v.out" 2> "$TMP/v.err" || rc=$?
[ "$rc" = 1 ] || fail "a cascade of two vocabularies: exit $rc"
grep -q 'route_models small,other do not share a vocabulary' "$TMP/v.err" || fail "vocabulary refusal message"
# and configuration errors are named
for bad in "--route cascade --route-models small,nope" "--route-rule tokens=0 --route cascade --route-models small,large" \
           "--route sometimes" "--default-model auto"; do
  rc=0
  # shellcheck disable=SC2086
  "$CONFKVD" --print-config --model "small=$SMALL" --model "large=$TMP/large.gguf" $bad > /dev/null 2> "$TMP/bad.err" || rc=$?
  [ "$rc" != 0 ] && [ -s "$TMP/bad.err" ] || fail "bad configuration accepted: $bad"
done
echo "PASS cascade"
