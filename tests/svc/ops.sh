#!/usr/bin/env bash
# /metrics passes `promtool check metrics`; /readyz fails
# before the model is loaded (the model file is a FIFO nobody writes yet)
# and passes after; /healthz answers throughout; SIGTERM under load exits 0
# and loses no job (after a restart every job id has a result).
# Usage: ops.sh CONFKV CONFKVD MODELS
CONFKV=$1 CONFKVD=$2 MODELS=$3
source "$(dirname "$0")/lib.sh"

# --- readiness before the model is loaded: a FIFO blocks the model's open.
mkfifo "$TMP/model.fifo"
"$CONFKVD" --kafka-embedded --http-port 0 --model "$TMP/model.fifo" --tokenizer "$MODELS/tok512.bin" \
  > "$TMP/f.out" 2> "$TMP/f.err" &
FPID=$!; PIDS+=("$FPID")
for ((i = 0; i < 100; i++)); do grep -q http_listening "$TMP/f.err" 2>/dev/null && break; sleep 0.1; done
HTTP=$(sed -n 's/.*event=http_listening address=\([^ ]*\).*/\1/p' "$TMP/f.err")
[ -n "$HTTP" ] || fail "no http address logged"
[ "$(http_get /healthz "$TMP/h")" = 200 ] || fail "/healthz not 200 while loading"
[ "$(http_get /readyz "$TMP/r")" = 503 ] || fail "/readyz not 503 before the model is loaded"
grep -q '"model_loaded": false' "$TMP/r" || fail "/readyz body: $(cat "$TMP/r")"
kill -9 "$FPID"

# --- after load: ready, metrics valid.
start_broker 4
FAST=(--kafka.session.timeout.ms 6000 --kafka.heartbeat.interval.ms 500 --kafka.auto.commit.interval.ms 200)
start_confkvd d1 --brokers "$BOOT" "${FAST[@]}" --drain-timeout-s 20
[ "$(http_get /readyz "$TMP/r")" = 200 ] || fail "/readyz not 200 after load: $(cat "$TMP/r")"
# the prompt format: stories260K is a llama2.c checkpoint without a chat template
grep -q '"arch": "llama", "tokenizer": "llama2c", "tokenizer_pre": "", "chat_template": "none"' "$TMP/r" ||
  fail "/readyz prompt format: $(cat "$TMP/r")"
[ "$(http_get /nope "$TMP/n")" = 404 ] || fail "unknown path not 404"
printf '%s\n' '{"id":"m1","prompt":"Hi","max_tokens":4}' | "$CONFKV" submit --brokers "$BOOT" --wait --timeout 60 >/dev/null 2>&1 ||
  fail "submit before metrics"
[ "$(http_get /metrics "$TMP/metrics.txt")" = 200 ] || fail "/metrics"
for m in confkv_jobs_total confkv_ttft_seconds_bucket confkv_request_seconds_count confkv_kafka_up \
         confkv_kv_bytes confkv_batch_sequences_bucket confkv_entropy_nats_bucket confkv_preemptions_total; do
  grep -q "^$m" "$TMP/metrics.txt" || fail "metric $m missing"
done
if command -v promtool >/dev/null; then
  promtool check metrics < "$TMP/metrics.txt" || fail "promtool check metrics"
else
  echo "promtool missing (apt-get install prometheus): metrics format not linted"
fi

# --- SIGTERM under load: exit 0; the restart finishes what was left.
python3 - "$TMP" <<'PY'
import json, sys
with open(sys.argv[1] + "/jobs.jsonl", "w") as f, open(sys.argv[1] + "/ids.txt", "w") as ids:
    for i in range(200):
        f.write("t-%d\t%s\n" % (i, json.dumps({"id": "t-%d" % i, "prompt": "A dog", "max_tokens": 24, "seed": i})))
        ids.write("t-%d\n" % i)
PY
kcat -P -b "$BOOT" -t confkv.jobs -K $'\t' < "$TMP/jobs.jsonl" || fail "kcat"
for ((i = 0; i < 300; i++)); do
  n=$(kcat -C -b "$BOOT" -t confkv.results -o beginning -e -q -f 'x\n' 2>/dev/null | wc -l)
  [ "$n" -ge 40 ] && break; sleep 0.1
done
kill -TERM "$LAST_PID"
wait "$LAST_PID"; rc=$?
[ "$rc" = 0 ] || fail "confkvd exited $rc after SIGTERM"
grep -q 'event=drained\|event=drain_timeout' "$TMP/d1.err" || fail "no drain logged"
grep -q 'event=stopped exit_code=0' "$TMP/d1.err" || fail "no clean stop logged"
start_confkvd d2 --brokers "$BOOT" "${FAST[@]}"
for ((i = 0; i < 90; i++)); do
  consume confkv.results "$TMP/results.bin"
  $KMSG coverage "$TMP/results.bin" "$TMP/ids.txt" >/dev/null 2>&1 && break
  sleep 1
done
$KMSG coverage "$TMP/results.bin" "$TMP/ids.txt" || fail "a job was lost across SIGTERM"
kill -TERM "$LAST_PID"; wait "$LAST_PID" || fail "second confkvd exit code"
echo "PASS ops"
