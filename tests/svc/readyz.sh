#!/usr/bin/env bash
# Readiness is "can take work", not "holds partitions" (docs/SERVICE.md,
# HTTP): a jobs topic of one partition and two confkvd in its group. The
# second one joins, gets no partition, and answers /readyz 200 within a
# second of joining (the log's group_joined); before that it said 503 with
# the reason. Both are ready at the end; /readyz and /metrics
# (confkv_kafka_partitions_assigned, confkv_kafka_group_joined) say which
# one holds the partition. A short session timeout keeps the mock
# cluster's rebalance (session timeout - 1 s) short.
# Usage: readyz.sh CONFKV CONFKVD MODELS
CONFKV=$1 CONFKVD=$2 MODELS=$3
source "$(dirname "$0")/lib.sh"

GROUP=(--kafka.session.timeout.ms 6000 --kafka.heartbeat.interval.ms 500)
start_broker 1
start_confkvd a --brokers "$BOOT" "${GROUP[@]}"
HTTP_A=$HTTP

# b: started by hand, /readyz polled from its first second
"$CONFKVD" --http-port 0 "${MODEL_ARGS[@]}" --brokers "$BOOT" "${GROUP[@]}" > "$TMP/b.out" 2> "$TMP/b.err" &
PIDS+=("$!")
for _ in $(seq 100); do grep -q 'event=http_listening' "$TMP/b.err" && break; sleep 0.1; done
HTTP_B=$(grep -o 'event=http_listening address=[^ ]*' "$TMP/b.err" | head -1 | cut -d= -f3)
[ -n "$HTTP_B" ] || fail "b: no HTTP address"
t_ready=""
for _ in $(seq 600); do # 30 s
  code=$(curl -s -o "$TMP/b.ready.json" -w '%{http_code}' "http://$HTTP_B/readyz" || true)
  if [ "$code" = 200 ]; then t_ready=$(date +%s.%N); break; fi
  [ "$code" = 503 ] && cp "$TMP/b.ready.json" "$TMP/b.503.json"
  sleep 0.05
done
[ -n "$t_ready" ] || fail "b: /readyz not 200 within 30 s: $(cat "$TMP/b.ready.json")"
joined=$(grep -m1 'event=group_joined' "$TMP/b.err") || fail "b: no group_joined in the log"
python3 - "$t_ready" "$joined" <<'PY' || fail "b: /readyz 200 too long after joining"
import datetime, sys
t_ready = float(sys.argv[1])
ts = sys.argv[2].split()[0].split("=", 1)[1]
t_join = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
lag = t_ready - t_join
print(f"b: /readyz 200 {lag:.3f} s after joining the group ({sys.argv[2].split('event=')[1]})")
sys.exit(0 if lag <= 1.0 else 1)
PY
grep -q '"reason": "the consumer has not joined its group yet"' "$TMP/b.503.json" 2> /dev/null ||
  fail "b: no 503 naming the group before it joined: $(cat "$TMP/b.503.json" 2> /dev/null)"

# Both ready; the partition is one instance's, the other is idle.
HTTP=$HTTP_A
[ "$(http_get /readyz "$TMP/a.json")" = 200 ] || fail "a: /readyz $(cat "$TMP/a.json")"
pa=$(metric confkv_kafka_partitions_assigned) ja=$(metric confkv_kafka_group_joined)
HTTP=$HTTP_B
[ "$(http_get /readyz "$TMP/b.json")" = 200 ] || fail "b: /readyz $(cat "$TMP/b.json")"
pb=$(metric confkv_kafka_partitions_assigned) jb=$(metric confkv_kafka_group_joined)
[ "$ja" = 1 ] && [ "$jb" = 1 ] || fail "confkv_kafka_group_joined a=$ja b=$jb"
[ $((pa + pb)) = 1 ] || fail "partitions assigned a=$pa b=$pb (one partition)"
python3 - "$TMP/a.json" "$TMP/b.json" "$pa" "$pb" <<'PY' || fail "/readyz bodies: $(cat "$TMP/a.json" "$TMP/b.json")"
import json, sys
for f, n in ((sys.argv[1], int(sys.argv[3])), (sys.argv[2], int(sys.argv[4]))):
    r = json.load(open(f))
    assert r["ready"] and r["reason"] is None and r["group_joined"] and r["partitions_assigned"] == n, r
PY
[ "$(metric confkv_ready)" = 1 ] || fail "b: confkv_ready"
echo "readyz: ok (partitions: a=$pa b=$pb)"
