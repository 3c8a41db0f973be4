#!/usr/bin/env bash
# The cascade through confkvd (docs/BENCHMARKS.md, "Routing by confidence"): one
# confkvd serving SMALL and LARGE; the prompt mix sent three times per rule
# setting, as `"model": "auto"` jobs, as LARGE jobs and as SMALL jobs
# (greedy, G tokens each). For each it prints the share of jobs kept on
# SMALL, the completion tokens, the engine seconds spent (the models'
# confkv_engine_step_seconds_total from /metrics, before and after: the
# busy time of the engine threads, which a host's noise and Kafka's
# latency do not inflate), tokens per engine second, the wall time, and
# the KV: each job's hot peak (kv.hot_peak_bytes, on the model that
# finished it) and the models' memory plans. JSON on stdout.
#
# Usage: ops/scripts/bench_cascade.sh [--large FILE] [--gen G] [--prompts FILE]
#                                     [--rule R]... [--policy P] [--threads N]
#   --large FILE  the large model (default: stories260K's q8_0 conversion,
#                 made here; a same-vocabulary larger model:
#                 `confkv synth --vocab-from VOCAB.gguf ...`)
# Environment: CONFKV, CONFKVD (default build/service/...), MODELS
# (default ../shared/models).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
CONFKV=${CONFKV:-$here/build/service/confkv}
CONFKVD=${CONFKVD:-$here/build/service/confkvd}
MODELS=${MODELS:-$here/../shared/models}
large="" gen=64 prompts=$here/tests/data/eval_prompts.txt policy=full threads=1 rules=()
while [ $# -gt 0 ]; do
  case $1 in
  --large) large=$2; shift 2 ;;
  --gen) gen=$2; shift 2 ;;
  --prompts) prompts=$2; shift 2 ;;
  --rule) rules+=("$2"); shift 2 ;;
  --policy) policy=$2; shift 2 ;;
  --threads) threads=$2; shift 2 ;;
  -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
  *) echo "bench_cascade.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
[ ${#rules[@]} -gt 0 ] || rules=("tokens=16,mean_entropy>1.0" "tokens=16,mean_entropy>1.5" "tokens=16,mean_entropy>2.0")
work=$(mktemp -d)
trap 'kill $(cat "$work/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT
if [ -z "$large" ]; then
  large=$work/large-q8_0.gguf
  "$CONFKV" convert --from llama2c "$MODELS/stories260K.bin" --tokenizer "$MODELS/tok512.bin" -o "$large" \
    --type q8_0 > /dev/null
fi
python3 - "$CONFKV" "$CONFKVD" "$MODELS" "$large" "$gen" "$prompts" "$policy" "$threads" "$work" "${rules[@]}" <<'PY'
import json, os, re, subprocess, sys, time, urllib.request
confkv, confkvd, models, large, gen, prompts, policy, threads, work = sys.argv[1:10]
rules, gen = sys.argv[10:], int(gen)
texts = [l.rstrip("\n") for l in open(prompts) if l.strip()]
conf = os.path.join(work, "c.conf")
open(conf, "w").write(f"route_rule = {rules[0]}\n")
err = open(os.path.join(work, "d.err"), "w+")
ready = os.path.join(work, "ready")
d = subprocess.Popen([confkvd, "--kafka-embedded", "--http-port", "0", "--ready-file", ready, "--config", conf,
                      "--model", f"small={models}/stories260K.bin,tokenizer={models}/tok512.bin",
                      "--model", f"large={large}", "--route", "cascade", "--route-models", "small,large",
                      "--policy", policy, "--threads", threads, "--metrics-interval-s", "0"],
                     stdout=subprocess.DEVNULL, stderr=err)
open(os.path.join(work, "pid"), "w").write(str(d.pid))
for _ in range(600):
    if os.path.exists(ready) and os.path.getsize(ready): break
    time.sleep(0.1)
r = json.load(open(ready))
boot, http = r["bootstrap_servers"], r["http"]

def engine_seconds():
    m = urllib.request.urlopen(f"http://{http}/metrics").read().decode()
    return {k: float(v) for k, v in re.findall(r'confkv_engine_step_seconds_total\{model="(\w+)"\} (\S+)', m)}

def run(model, tag):
    jobs = "".join(json.dumps({"id": f"{tag}-{i}", "model": model, "prompt": t, "max_tokens": gen,
                               "temperature": 0}) + "\n" for i, t in enumerate(texts))
    e0, t0 = engine_seconds(), time.monotonic()
    out = subprocess.run([confkv, "submit", "--brokers", boot, "--wait", "--timeout", "600"], input=jobs,
                         capture_output=True, text=True, check=True).stdout
    wall, e1 = time.monotonic() - t0, engine_seconds()
    res = [json.loads(l) for l in out.splitlines()]
    assert len(res) == len(texts) and all(x["status"] == "ok" for x in res), [x.get("error") for x in res]
    toks = sum(x["usage"]["completion_tokens"] for x in res)
    es = {k: e1[k] - e0.get(k, 0) for k in e1}
    kept = sum(1 for x in res if not x["route"]["escalated"] and x["route"]["model"] == "small")
    return {"jobs": len(res), "kept_on_small": kept, "share_kept": round(kept / len(res), 3),
            "escalated": sum(1 for x in res if x["route"]["escalated"]),
            "mean_at_token": round(sum(x["route"]["at_token"] or 0 for x in res if x["route"]["escalated"]) /
                                   max(1, sum(1 for x in res if x["route"]["escalated"])), 2),
            "completion_tokens": toks, "engine_s": {k: round(v, 4) for k, v in es.items()},
            "engine_s_total": round(sum(es.values()), 4),
            "tokens_per_engine_s": round(toks / max(1e-9, sum(es.values())), 1),
            "wall_s": round(wall, 3),
            "kv_hot_peak_bytes_mean": round(sum(x["kv"]["hot_peak_bytes"] for x in res) / len(res)),
            "texts": [x["text"] for x in res]}

out = {"small": f"{models}/stories260K.bin", "large": large, "gen_tokens": gen, "prompts": len(texts),
       "policy": policy, "threads": int(threads)}
run("large", "warm")  # first jobs pay the group join and page faults
base_l, base_s = run("large", "large"), run("small", "small")
rows = []
for i, rule in enumerate(rules):
    if i:
        open(conf, "w").write(f"route_rule = {rule}\n")
        n = open(err.name).read().count("status=applied route_rule")
        d.send_signal(1)
        for _ in range(100):
            if open(err.name).read().count("status=applied route_rule") > n: break
            time.sleep(0.1)
        else:
            sys.exit(f"bench_cascade.sh: route_rule {rule} was not applied")
    a = run("auto", f"auto{i}")
    # texts the cascade changed from the large model's alone
    a["texts_differ_from_large"] = sum(1 for x, y in zip(a["texts"], base_l["texts"]) if x != y)
    a["rule"] = rule
    a["engine_s_over_large"] = round(a["engine_s_total"] / base_l["engine_s_total"], 3)
    a["kv_over_large"] = round(a["kv_hot_peak_bytes_mean"] / max(1, base_l["kv_hot_peak_bytes_mean"]), 3)
    rows.append(a)
plans = re.findall(r"event=memory_plan model=(\w+) total=(\d+) weights=(\d+) kv=(\d+)", open(err.name).read())
out["memory_plans"] = {m: {"total": int(t), "weights": int(w), "kv": int(k)} for m, t, w, k in plans}
for x in [base_l, base_s] + rows: x.pop("texts")
out["all_large"], out["all_small"], out["cascade"] = base_l, base_s, rows
d.terminate()
d.wait()
print(json.dumps(out, indent=1))
PY
