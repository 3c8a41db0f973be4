#!/usr/bin/env bash
# A real Prometheus (Debian's) on a loopback port
# scrapes a running confkvd and evaluates ops/prometheus/alerts.yml against
# it. At rest the memory alert is silent; with the hot KV pool driven past
# 85% (a 1 MiB pool, CONF-KV sequences oversubscribing it, many long jobs)
# it fires.
#
# The rules are the real file's with one change: every `for:` becomes 0s, so
# the test waits seconds, not the 2 minutes an operator wants before being
# paged. The expressions are byte-for-byte alerts.yml's; the `for` durations
# are covered by promtool's unit tests (alerts_test.yml).
# Usage: alerts_live.sh CONFKV CONFKVD MODELS REPO_ROOT
CONFKV=$1 CONFKVD=$2 MODELS=$3 ROOT=$4
source "$(dirname "$0")/lib.sh"
command -v prometheus >/dev/null || { echo "no prometheus binary (Debian package prometheus): skip"; exit 77; }

# A Redis cold tier too, so the Redis series the rules and dashboard read exist.
need_redis
start_redis
start_confkvd d1 --kafka-embedded --kv-budget-mb 1 --max-running 32 --policy conf --threads 1 \
  --max-tokens-cap 4096 --redis "redis://127.0.0.1:$REDIS_PORT"
PROM_PORT=$(python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
sed 's/^\( *\)for: .*/\1for: 0s/' "$ROOT/ops/prometheus/alerts.yml" > "$TMP/alerts.yml"
cat > "$TMP/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [alerts.yml]
scrape_configs:
  - job_name: confkvd
    static_configs: [{targets: ["$HTTP"]}]
YML
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" > "$TMP/prom.log" 2>&1 &
PIDS+=("$!")
api() { curl -s "http://127.0.0.1:$PROM_PORT/api/v1/$1"; }
# alert_state NAME: firing, pending or none
alert_state() {
  api alerts | python3 -c '
import json, sys
a = [x["state"] for x in json.load(sys.stdin)["data"]["alerts"] if x["labels"]["alertname"] == sys.argv[1]]
print("firing" if "firing" in a else a[0] if a else "none")' "$1"
}
# pool_ratio: what Prometheus last scraped
pool_ratio() {
  api 'query?query=max(confkv_kv_bytes%7Btier%3D%22hot%22%7D/ignoring(tier)confkv_kv_hot_capacity_bytes)' |
    python3 -c 'import json,sys;r=json.load(sys.stdin)["data"]["result"];print(r[0]["value"][1] if r else "none")'
}
for ((i = 0; i < 100; i++)); do
  api targets 2>/dev/null | grep -q '"health":"up"' && break; sleep 0.2
done
api targets | grep -q '"health":"up"' || fail "prometheus never scraped confkvd: $(tail -5 "$TMP/prom.log")"
api rules | grep -q ConfkvKVPoolHigh || fail "prometheus did not load the rules: $(tail -5 "$TMP/prom.log")"

# --- at rest: a few evaluations, nothing about memory
sleep 4
[ "$(alert_state ConfkvKVPoolHigh)" = none ] || fail "ConfkvKVPoolHigh at rest (pool $(pool_ratio))"
[ "$(alert_state ConfkvKVBreakerEngaged)" = none ] || fail "ConfkvKVBreakerEngaged at rest"
echo "at rest: pool $(pool_ratio), ConfkvKVPoolHigh none"

# --- under load: waves of 64 long jobs on a 1 MiB pool. A wave can be over
# in under 1.5 s on a fast CPU (a Zen 5, stories260K), between two of
# Prometheus's scrapes and evaluations (1 s each), so another wave goes in
# every 5 s until the alert fires (at most 8: a check, not a soak)
wave() {
  python3 - "$TMP" "$1" <<'PY'
import json, sys
with open(sys.argv[1] + "/jobs.jsonl", "w") as f:
    for i in range(64):
        jid = "a-%s-%d" % (sys.argv[2], i)
        f.write("%s\t%s\n" % (jid, json.dumps({"id": jid, "prompt": "Once upon a time", "max_tokens": 480,
                                               "seed": i, "temperature": 0.8})))
PY
  kcat -P -b "$BOOT" -t confkv.jobs -K $'\t' < "$TMP/jobs.jsonl" || fail "kcat"
}
state=none waves=0
for ((i = 0; i < 120; i++)); do
  if ((i % 10 == 0 && waves < 8)); then
    wave "$waves"
    waves=$((waves + 1))
  fi
  state=$(alert_state ConfkvKVPoolHigh)
  [ "$state" = firing ] && break
  sleep 0.5
done
[ "$state" = firing ] || fail "ConfkvKVPoolHigh never fired under load ($waves waves; pool $(pool_ratio), state $state)"
echo "under load ($waves waves of 64 jobs): pool $(pool_ratio), ConfkvKVPoolHigh firing"
# --- every metric the rules and the Grafana dashboard read is one confkvd
# exports (recording rules' names, "instance:...", are the rules' own)
# (the consumer lag comes from librdkafka's statistics, every 5 s: wait for it)
for ((i = 0; i < 100; i++)); do
  [ "$(http_get /metrics "$TMP/metrics.txt")" = 200 ] && grep -q '^confkv_kafka_consumer_lag' "$TMP/metrics.txt" && break
  sleep 0.2
done
python3 - "$ROOT/ops/prometheus/alerts.yml" "$ROOT/ops/grafana/dashboards/confkv.json" "$TMP/metrics.txt" <<'PY' ||
import json, re, sys
rules, dash, live = sys.argv[1:4]
exported = set()
for line in open(live):
    m = re.match(r"^(confkv_[a-z0-9_]+)", line)
    if m:
        exported.add(m.group(1))
def names(text):
    return set(re.findall(r"(?<![:\w])(confkv_[a-z0-9_]+)", text))
exprs = {"alerts.yml": open(rules).read()}
d = json.load(open(dash))
exprs["confkv.json"] = "\n".join(t.get("expr", "") for p in d.get("panels", []) for t in p.get("targets", []))
bad = []
for where, text in exprs.items():
    for n in sorted(names(text)):
        if n not in exported:
            bad.append("%s reads %s, which confkvd does not export" % (where, n))
print("\n".join(bad) if bad else "metric names: %d in the rules, %d in the dashboard, all exported" %
      (len(names(exprs["alerts.yml"])), len(names(exprs["confkv.json"]))))
sys.exit(1 if bad else 0)
PY
  fail "metric names"
kill -TERM "$LAST_PID"; wait "$LAST_PID" || true
echo "PASS alerts_live"
