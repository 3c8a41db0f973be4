#!/usr/bin/env bash
# The Redis cold tier end to end: confkvd --kafka-embedded with a real
# redis-server on a free loopback port, 100 greedy jobs through
# `confkv submit --wait`.
#   1. policy full, tiny hot + warm budgets, Redis attached: the same texts as
#      a run with default budgets and no Redis.
#   2. policy conf, tiny hot + warm budgets: blocks spill to Redis (SETs seen
#      by Redis itself, INFO), come back (GET hits), every job ok, and every
#      block key is deleted once its sequence ends (no kv:* key left; the
#      prefix blocks of the four prompts used 25 times each are promoted to
#      templates and stay, pfx:*); /metrics and /readyz show Redis up.
#   3. kill -9 of redis-server mid-run: every job still ok, /readyz says
#      "redis": "down"; after a restart on the same port confkvd is back on
#      Redis by itself (confkv_redis_up 1, reconnects counted).
# Usage: redis.sh CONFKV CONFKVD MODELS
CONFKV=$1 CONFKVD=$2 MODELS=$3
source "$(dirname "$0")/lib.sh"
need_redis

python3 - "$TMP/jobs.jsonl" <<'PY'
import json, sys
prompts = ["Lily saw a cat", "Once upon a time", "Tom had a big red", "The sun was"]
with open(sys.argv[1], "w") as f:
    for i in range(100):
        f.write(json.dumps({"id": "j%03d" % i, "prompt": prompts[i % 4], "max_tokens": 150 + i % 60,
                            "temperature": 0}) + "\n")
PY
# run NAME CONFKVD-ARGS...: all jobs through one confkvd; results in NAME.jsonl
run() {
  local name=$1; shift
  start_confkvd "$name" --kafka-embedded --threads 1 "$@"
  "$CONFKV" submit --brokers "$BOOT" --wait --timeout 100 --file "$TMP/jobs.jsonl" > "$TMP/$name.jsonl" \
    2> "$TMP/$name.submit.err" || fail "$name: confkv submit --wait"
}
stop() { kill -TERM "$LAST_PID"; wait "$LAST_PID" || fail "confkvd exit code $?"; }
all_ok() {
  python3 - "$TMP/$1.jsonl" <<'PY' || fail "$1: not every job ok"
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
assert len(rs) == 100 and all(r["status"] == "ok" for r in rs), [r for r in rs if r["status"] != "ok"][:2]
PY
}
same_texts() {
  python3 - "$TMP/$1.jsonl" "$TMP/$2.jsonl" <<'PY' || fail "$1 and $2 differ"
import json, sys
a, b = ({json.loads(l)["id"]: json.loads(l)["text"] for l in open(p)} for p in sys.argv[1:3])
diff = [k for k in a if a[k] != b.get(k)]
assert len(a) == 100 and not diff, "%d of %d differ, e.g. %s" % (len(diff), len(a), diff[:3])
PY
}

start_redis
URL="redis://127.0.0.1:$REDIS_PORT"

# 1. policy full: tiny budgets with Redis == default budgets without.
run base --policy full
stop
run full_redis --policy full --kv-budget-mb 1 --warm-budget-kb 100 --redis "$URL"
[ "$(metric confkv_redis_up)" = 1 ] || fail "confkv_redis_up is not 1"
# (Policy full admits a sequence only when its whole KV fits, so memory alone
# never preempts here; test_svc_redis forces preemptions by priority and
# checks the blocks' round trip through Redis with equal outputs.)
stop
all_ok base
all_ok full_redis
same_texts base full_redis

# 2. policy conf: blocks go to Redis and come back; no key left behind.
sets0=$(info_stat total_commands_processed)
run conf_redis --policy conf --kv-budget-mb 1 --warm-budget-kb 100 --redis "$URL"
all_ok conf_redis
puts=$(metric 'confkv_cold_requests_total{op="put"}')
hits=$(metric 'confkv_cold_gets_total{result="hit"}')
written=$(metric 'confkv_cold_bytes_total{direction="written"}')
bad=$(metric confkv_cold_bad_replies_total)
[ "${puts:-0}" -gt 100 ] || fail "only ${puts:-0} blocks spilled to Redis"
[ "${hits:-0}" -gt 100 ] || fail "only ${hits:-0} blocks came back from Redis"
[ "${bad:-1}" = 0 ] || fail "$bad bad Redis replies"
cmds=$(( $(info_stat total_commands_processed) - sets0 ))
[ "$cmds" -gt "$puts" ] || fail "Redis saw $cmds commands for $puts puts"
[ "$(info_stat keyspace_hits)" -ge "$hits" ] || fail "Redis counted fewer hits than confkvd"
# The engine delivers cold completions only while it steps (an idle engine
# does not poll): one small job lets the last ones (and their DELs) through.
"$CONFKV" submit --brokers "$BOOT" --wait --timeout 30 --prompt "Tom" > /dev/null 2>&1 || fail "one more job"
kvkeys() { rcli --scan --pattern 'confkv:kv:*' | wc -l; }
for _ in $(seq 50); do [ "$(kvkeys)" = 0 ] && break; sleep 0.1; done
[ "$(kvkeys)" = 0 ] || fail "$(kvkeys) block keys left in Redis after every job ended"
[ "$(rcli --scan --pattern 'confkv:pfx:*' | wc -l)" -gt 0 ] || fail "no prefix block promoted and persisted"
http_get /readyz "$TMP/ready.json" > /dev/null
grep -q '"redis": "up"' "$TMP/ready.json" || fail "/readyz: $(cat "$TMP/ready.json")"
echo "conf: $puts blocks ($written bytes) spilled to Redis, $hits recalled, $cmds Redis commands"
stop

# 3. kill -9 of redis-server mid-run: jobs still ok; Redis comes back by itself.
start_confkvd kill --kafka-embedded --threads 1 --policy conf --kv-budget-mb 1 --warm-budget-kb 100 --redis "$URL"
"$CONFKV" submit --brokers "$BOOT" --wait --timeout 100 --file "$TMP/jobs.jsonl" > "$TMP/kill.jsonl" \
  2> "$TMP/kill.submit.err" &
SUBMIT=$!
for _ in $(seq 100); do [ "$(metric 'confkv_cold_requests_total{op="put"}')" -gt 200 ] 2>/dev/null && break; sleep 0.05; done
kill -9 "$REDIS_PID"
wait "$SUBMIT" || fail "kill: confkv submit --wait"
all_ok kill
[ "$(metric confkv_redis_up)" = 0 ] || fail "confkv_redis_up should be 0 with Redis gone"
http_get /readyz "$TMP/ready.json" > /dev/null
grep -q '"redis": "down"' "$TMP/ready.json" || fail "/readyz: $(cat "$TMP/ready.json")"
[ "$(metric confkv_cold_failures_total)" -gt 0 ] || fail "no cold failures counted"
start_redis
for _ in $(seq 100); do [ "$(metric confkv_redis_up)" = 1 ] && break; sleep 0.1; done
[ "$(metric confkv_redis_up)" = 1 ] || fail "confkvd did not reconnect to Redis"
[ "$(metric confkv_redis_reconnects_total)" -ge 1 ] || fail "reconnect not counted"
stop
echo "PASS redis"
