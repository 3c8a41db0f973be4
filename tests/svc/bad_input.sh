#!/usr/bin/env bash
# Acceptance 2: random bytes, truncated msgpack, JSON with wrong types,
# out-of-range parameters, a 900 KB blob (and a 900 KB prompt), deep nesting:
# each gives a dead-letter record or an error result with a stable code, and
# the service goes on serving.
# Usage: bad_input.sh CONFKV CONFKVD MODELS
CONFKV=$1 CONFKVD=$2 MODELS=$3
source "$(dirname "$0")/lib.sh"
command -v kcat >/dev/null || { echo "kcat missing: skip"; exit 77; }

start_confkvd d --kafka-embedded
B=(-b "$BOOT" -t confkv.jobs -X message.max.bytes=2000000)
head -c 300 /dev/urandom > "$TMP/random.bin"
head -c 921600 /dev/urandom > "$TMP/blob.bin"
python3 -c "
import sys; sys.path.insert(0, '$(dirname "$0")')
from kmsg import mp_pack
m = mp_pack({'id': 'trunc', 'prompt': 'Once upon a time there was a cat', 'max_tokens': 5})
open('$TMP/trunc.bin', 'wb').write(m[:len(m) // 2])
open('$TMP/deep.json', 'w').write('[' * 100000 + ']' * 100000)
open('$TMP/bigprompt.json', 'w').write('{\"id\": \"bigprompt\", \"prompt\": \"' + 'a ' * 460000 + '\"}')
"
kcat -P "${B[@]}" "$TMP/random.bin" "$TMP/blob.bin" "$TMP/deep.json" || fail "kcat random"
kcat -P "${B[@]}" -H content-type=application/msgpack "$TMP/trunc.bin" || fail "kcat trunc"
kcat -P "${B[@]}" "$TMP/bigprompt.json" || fail "kcat bigprompt"
cat > "$TMP/bad.jsonl" <<'J'
{"id": "wrongtype", "prompt": ["a", "b"], "max_tokens": "ten"}
{"id": "wrongtype2", "prompt": "x", "stop": 5}
{"id": "noprompt", "max_tokens": 5}
{"id": "temp", "prompt": "x", "temperature": -1}
{"id": "topp", "prompt": "x", "top_p": 1.5}
{"id": "maxtok", "prompt": "x", "max_tokens": 100000}
{"id": "ctx", "prompt": "x", "max_tokens": 600}
{"id": "model", "prompt": "x", "model": "gpt-9"}
{"id": "tokens", "tokens": [1, 99999], "max_tokens": 3}
{"id": "policy", "prompt": "x", "policy": "nonsense:??"}
[1, 2, 3]
{"id": "good", "prompt": "Once upon a time", "max_tokens": 10, "temperature": 0}
J
kcat -P "${B[@]}" < "$TMP/bad.jsonl" || fail "kcat bad lines"
wait_count confkv.results 12 60 || fail "results missing"
wait_count confkv.dlq 5 30 || fail "dead letters missing"
consume confkv.results "$TMP/results.bin"
consume confkv.dlq "$TMP/dlq.bin"
python3 - "$TMP" "$(dirname "$0")" <<'PY' || fail "bad input handling"
import json, sys
sys.path.insert(0, sys.argv[2])
from kmsg import read_records, decode
tmp = sys.argv[1]
res = {}
for k, p in read_records(tmp + "/results.bin"):
    v, _ = decode(p)
    res[v["id"]] = v
want = {"wrongtype": "invalid_field", "wrongtype2": "invalid_field", "noprompt": "missing_prompt",
        "temp": "out_of_range", "topp": "out_of_range", "maxtok": "out_of_range",
        "ctx": "context_exceeded", "model": "unknown_model", "tokens": "out_of_range",
        "policy": "invalid_policy", "bigprompt": "prompt_too_long"}
for i, code in want.items():
    assert i in res, "no result for " + i
    r = res[i]
    assert r["status"] == "error" and r["error"]["code"] == code, (i, r["error"])
    assert len(r["error"]["message"]) > 10, r["error"]
assert res["good"]["status"] == "ok", res["good"]
dl = [json.loads(p) for k, p in read_records(tmp + "/dlq.bin")]
# random bytes, the 900 KB blob, deep nesting, truncated msgpack, a top-level array
assert len(dl) == 5, len(dl)
for d in dl:
    o = d["original"]
    assert o["topic"] == "confkv.jobs" and o["offset"] >= 0 and o["partition"] >= 0, o
    assert d["error"]["code"] == "undecodable" and d["error"]["message"], d
sizes = sorted(d["original"]["value_bytes"] for d in dl)
assert 921600 in sizes and 300 in sizes, sizes
print("ok:", len(want), "error results,", len(dl), "dead letters, good job ok")
PY
# still serving, still healthy
code=$(http_get /readyz "$TMP/ready.json"); [ "$code" = 200 ] || fail "/readyz $code after bad input"
kill -TERM "$LAST_PID"; wait "$LAST_PID" || fail "confkvd exit code"
echo "PASS bad_input"
