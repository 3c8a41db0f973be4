#!/usr/bin/env bash
# `confkv tune` reads a running confkvd's /metrics
# and sweeps CONF-KV on the operator's prompts; its HTML report has the
# plots; its JSON's `recommended` keys, written as a config file and given
# to a fresh confkvd, give on those prompts (greedy, ignore_eos,
# max_tokens = gen_tokens) the KV kept and the agreement with the full
# cache that `predicted` says, within `tolerance`.
# Usage: tune.sh CONFKV CONFKVD MODELS
CONFKV=$1 CONFKVD=$2 MODELS=$3
source "$(dirname "$0")/lib.sh"
GEN=96
cat > "$TMP/prompts.txt" <<'P'
Once upon a time
The little dog
Lily and Ben went to the park
One day, a big bird
Tom had a red ball
The sun was hot
P

# --- a confkvd with some traffic, for /metrics
start_confkvd d1 --kafka-embedded --threads 1
python3 - "$TMP" <<'PY'
import json, sys
with open(sys.argv[1] + "/warm.jsonl", "w") as f:
    for i in range(24):
        f.write(json.dumps({"id": "w-%d" % i, "prompt": "Once upon a time there was a", "max_tokens": 48, "seed": i}) + "\n")
PY
"$CONFKV" submit --brokers "$BOOT" --wait --timeout 120 < "$TMP/warm.jsonl" > "$TMP/warm.out" 2>"$TMP/submit.err" ||
  fail "warm-up jobs"
TUNE=("$CONFKV" tune --metrics "http://$HTTP/metrics" --eval-prompts "$TMP/prompts.txt" "${MODEL_ARGS[@]}"
      --gen-tokens "$GEN")
"${TUNE[@]}" -o "$TMP/report.html" 2>"$TMP/tune.err" || fail "tune -o report.html"
grep -q '<svg' "$TMP/report.html" || fail "report without plots"
grep -q 'Recommendation' "$TMP/report.html" || fail "report without a recommendation"
"${TUNE[@]}" --json -o "$TMP/tune.json" 2>>"$TMP/tune.err" || fail "tune --json"
# the signals tune read from /metrics against the warm-up jobs' own results
python3 - "$TMP/tune.json" "$TMP/warm.out" <<'PY' || fail "tune's signal summary disagrees with the results"
import json, sys
d = json.load(open(sys.argv[1]))
res = [json.loads(l) for l in open(sys.argv[2]) if l.strip().startswith("{")]
ent = [r["confidence"]["mean_entropy"] for r in res]
s = d["signals"]["confkv_entropy_nats"]
assert s["jobs"] == len(ent) == 24, (s, len(ent))
assert abs(s["mean"] - sum(ent) / len(ent)) < 1e-4, (s["mean"], sum(ent) / len(ent))
ret = [r["kv"]["retained_mean"] for r in res]
k = d["signals"]["confkv_kv_retained_ratio"]
assert abs(k["mean"] - sum(ret) / len(ret)) < 1e-4, (k["mean"], sum(ret) / len(ret))
print("signals: %d jobs, mean entropy %.4f, mean kv retained %.4f (from /metrics = from the results)" %
      (s["jobs"], s["mean"], k["mean"]))
PY
kill -TERM "$LAST_PID"; wait "$LAST_PID" || true

# --- the recommendation, fed back: a config file of its keys
python3 - "$TMP/tune.json" "$TMP/rec.conf" <<'PY' || fail "no recommendation"
import json, sys
d = json.load(open(sys.argv[1]))
rec = d["recommended"]
assert rec, "recommended is null"
with open(sys.argv[2], "w") as f:
    for k, v in rec.items():
        f.write("%s=%s\n" % (k, v))
print("recommended:", rec, "predicted:", d["predicted"], "tolerance:", d["tolerance"])
PY
start_confkvd d2 --kafka-embedded --threads 1 --config "$TMP/rec.conf"
python3 - "$TMP" "$GEN" <<'PY'
import json, sys
tmp, gen = sys.argv[1], int(sys.argv[2])
prompts = [l.strip() for l in open(tmp + "/prompts.txt") if l.strip()]
with open(tmp + "/jobs.jsonl", "w") as f:
    for i, p in enumerate(prompts):
        base = {"prompt": p, "max_tokens": gen, "temperature": 0, "ignore_eos": True, "return_confidence": True}
        f.write(json.dumps(dict(base, id="rec-%d" % i)) + "\n")          # the config's default policy
        f.write(json.dumps(dict(base, id="full-%d" % i, policy="full")) + "\n")
PY
"$CONFKV" submit --brokers "$BOOT" --wait --timeout 120 < "$TMP/jobs.jsonl" > "$TMP/results.jsonl" 2>"$TMP/submit.err" ||
  fail "recommended-config jobs"
python3 - "$TMP/tune.json" "$TMP/results.jsonl" <<'PY' || fail "the recommended config did not give what tune predicted"
import json, sys
d = json.load(open(sys.argv[1]))
res = {}
for line in open(sys.argv[2]):
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
        res[r["id"]] = r
n = len([k for k in res if k.startswith("rec-")])
assert n and all(res[k]["status"] == "ok" for k in res), res
ret, match = 0.0, 0.0
for i in range(n):
    rec, full = res["rec-%d" % i], res["full-%d" % i]
    ret += rec["kv"]["retained_mean"]
    a = [t["id"] for t in rec["confidence"]["trace"]]
    b = [t["id"] for t in full["confidence"]["trace"]]
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    match += k
ret /= n
match /= n
p, t = d["predicted"], d["tolerance"]
print("measured kv_retained_mean %.4f (predicted %.4f +- %.3f), greedy_match_tokens_mean %.1f (predicted %.1f +- %.1f)"
      % (ret, p["kv_retained_mean"], t["kv_retained_mean"], match, p["greedy_match_tokens_mean"],
         t["greedy_match_tokens_mean"]))
assert abs(ret - p["kv_retained_mean"]) <= t["kv_retained_mean"] + 1e-9
assert abs(match - p["greedy_match_tokens_mean"]) <= t["greedy_match_tokens_mean"] + 1e-9
PY
kill -TERM "$LAST_PID"; wait "$LAST_PID" || true
echo "PASS tune"
