#!/usr/bin/env bash
# Configuration precedence (file < CONFKV_* env < flags), kafka.* passed
# through, secrets masked by --print-config, bad keys refused; and
# `confkv batch` (OpenAI Batch API) in-process and through Kafka.
# Usage: config_batch.sh CONFKV CONFKVD MODELS
CONFKV=$1 CONFKVD=$2 MODELS=$3
source "$(dirname "$0")/lib.sh"

cat > "$TMP/c.conf" <<'C'
# a comment
http_port = 1111
max_inflight = 7
kafka.sasl.password = hunter2
kafka.socket.timeout.ms = 1234
C
CONFKV_HTTP_PORT=2222 CONFKV_KAFKA_CLIENT_RACK=r1 "$CONFKVD" --config "$TMP/c.conf" --max-inflight 9 --print-config \
  > "$TMP/p.txt" || fail "--print-config"
grep -qx 'http_port=2222' "$TMP/p.txt" || fail "env does not override the file"
grep -qx 'max_inflight=9' "$TMP/p.txt" || fail "flag does not override the file"
grep -qx 'kafka.socket.timeout.ms=1234' "$TMP/p.txt" || fail "kafka.* from the file"
grep -qx 'kafka.client.rack=r1' "$TMP/p.txt" || fail "kafka.* from the environment"
grep -qx 'kafka.sasl.password=\*\*\*\*\*' "$TMP/p.txt" || fail "secret not masked"
! grep -q hunter2 "$TMP/p.txt" || fail "secret printed"
"$CONFKVD" --no-such-key 1 2>/dev/null && fail "unknown key accepted"
"$CONFKVD" --http-port 99999 --print-config 2>/dev/null && fail "out-of-range port accepted"
"$CONFKVD" --kafka.no.such.property x "${MODEL_ARGS[@]}" --brokers 127.0.0.1:1 2>"$TMP/bad.err" && fail "bad kafka key accepted"
grep -q "no.such.property" "$TMP/bad.err" || fail "bad kafka key not named: $(cat "$TMP/bad.err")"
# exactly-once results are not implemented: a transactional producer is refused by name
"$CONFKVD" --kafka.transactional.id t1 "${MODEL_ARGS[@]}" --brokers 127.0.0.1:1 2>"$TMP/tx.err" &&
  fail "kafka.transactional.id accepted"
grep -q "transactional.id: exactly-once results are not implemented" "$TMP/tx.err" ||
  fail "transactional.id not refused by name: $(cat "$TMP/tx.err")"

cat > "$TMP/in.jsonl" <<'J'
{"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "stories260K", "messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 20, "temperature": 0}}
{"custom_id": "request-2", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Tom had a dog", "max_tokens": 15, "temperature": 0}}
{"custom_id": "request-3", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "temperature": 7}}
{"custom_id": "request-4", "method": "POST", "url": "/v1/completions", "body": {"model": "gpt-9", "prompt": "x"}}
J
"$CONFKV" batch --input "$TMP/in.jsonl" --output "$TMP/local.jsonl" --local "${MODEL_ARGS[@]}" 2>"$TMP/bl.err" ||
  fail "batch --local"
start_confkvd d --kafka-embedded
"$CONFKV" batch --input "$TMP/in.jsonl" --output "$TMP/kafka.jsonl" --brokers "$BOOT" --timeout 60 2>"$TMP/bk.err" ||
  fail "batch --brokers"
python3 - "$TMP/local.jsonl" "$TMP/kafka.jsonl" <<'PY' || fail "batch output"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 4
for x, y in zip(a, b):
    assert x["custom_id"] == y["custom_id"] and x["error"] is None
    assert x["response"]["status_code"] == y["response"]["status_code"]
assert a[0]["response"]["status_code"] == 200 and a[2]["response"]["status_code"] == 400
c0 = a[0]["response"]["body"]["choices"][0]
assert c0["message"]["role"] == "assistant" and c0["finish_reason"] in ("stop", "length")
assert a[1]["response"]["body"]["choices"][0]["text"]
# greedy requests: in-process and through Kafka give the same text
for i in (0, 1):
    assert json.dumps(a[i]["response"]["body"]["choices"]) == json.dumps(b[i]["response"]["body"]["choices"])
assert a[0]["response"]["body"]["usage"]["total_tokens"] == 25
assert b[2]["response"]["body"]["error"]["code"] == "out_of_range"
# a model this instance does not serve: refused in-process as confkvd refuses it
assert a[3]["response"]["body"]["error"]["code"] == b[3]["response"]["body"]["error"]["code"] == "unknown_model"
PY
kill -TERM "$LAST_PID"; wait "$LAST_PID" || fail "confkvd exit code"
echo "PASS config_batch"
