#!/usr/bin/env bash
# Random bytes, truncated msgpack, JSON with wrong types,
# out-of-range parameters, a 900 KB blob (and a 900 KB prompt), deep nesting:
# each gives a dead-letter record or an error result with a stable code, and
# the service goes on serving.
# Hostile jobs: 30,000 chat messages with empty content (~900 KB: 29,999
# separators and no text, which the joined prompt's buffer must grow for),
# an empty msgpack key, non-finite numbers
# (1e999, -1e999, msgpack inf/nan): each gets one error result with a stable
# code, confkvd goes on serving; `confkv batch --local` likewise. Jobs
# with bad `tools` (with a prompt, not objects, too deep, for a model without
# a chat template) get their codes.
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
import json
empty = [{'role': 'user', 'content': []}] * 30000
open('$TMP/emptycontent.json', 'w').write(json.dumps({'id': 'emptycontent', 'messages': empty}, separators=(',', ':')))
open('$TMP/emptykey.bin', 'wb').write(mp_pack({'id': 'emptykey', '': None}))
open('$TMP/emptykey5.bin', 'wb').write(b'\\xde\\x00\\x01\\xa0\\xc0')  # {'': nil}, no id
open('$TMP/inf_mp.bin', 'wb').write(mp_pack({'id': 'inf_mp', 'prompt': 'x', 'temperature': float('inf')}))
open('$TMP/nan_mp.bin', 'wb').write(mp_pack({'id': 'nan_mp', 'prompt': 'x', 'metadata': {'a': float('nan')}}))
body = {'messages': [{'role': 'user', 'content': []}] * 300, 'max_tokens': 5, 'temperature': 0}
lines = [{'custom_id': 'e300', 'url': '/v1/chat/completions', 'body': body},
         {'custom_id': 'e30000', 'url': '/v1/chat/completions', 'body': dict(body, messages=empty)},
         {'custom_id': 'good', 'url': '/v1/completions', 'body': {'prompt': 'Once upon a time', 'max_tokens': 5, 'temperature': 0}}]
with open('$TMP/batch.jsonl', 'w') as f:
    for l in lines: f.write(json.dumps(l, separators=(',', ':')) + '\\n')
    # JSON's 1e999 is an infinity: refused, never re-printed as null
    f.write('{\"custom_id\":\"inf\",\"body\":{\"prompt\":\"x\",\"temperature\":1e999}}\\n')
"
[ "$(stat -c %s "$TMP/emptycontent.json")" -gt 850000 ] || fail "the empty-content job is not ~900 KB"
[ "$(stat -c %s "$TMP/emptykey5.bin")" = 5 ] || fail "emptykey5.bin"
kcat -P "${B[@]}" "$TMP/random.bin" "$TMP/blob.bin" "$TMP/deep.json" || fail "kcat random"
kcat -P "${B[@]}" -H content-type=application/msgpack "$TMP/trunc.bin" || fail "kcat trunc"
kcat -P "${B[@]}" "$TMP/bigprompt.json" || fail "kcat bigprompt"
kcat -P "${B[@]}" "$TMP/emptycontent.json" || fail "kcat emptycontent"
kcat -P "${B[@]}" -H content-type=application/msgpack "$TMP/emptykey.bin" "$TMP/emptykey5.bin" "$TMP/inf_mp.bin" \
  "$TMP/nan_mp.bin" || fail "kcat msgpack"
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
{"id": "inf_meta", "prompt": "x", "metadata": {"a": [1, 1e999]}}
{"id": "neg_inf", "prompt": "x", "top_p": -1e999}
{"id": "tools_prompt", "prompt": "x", "tools": [{"type": "function", "function": {"name": "f"}}]}
{"id": "tools_notobj", "messages": [{"role": "user", "content": "x"}], "tools": [1]}
{"id": "tools_deep", "messages": [{"role": "user", "content": "x"}], "tools": [{"a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]}
{"id": "tools_notmpl", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]}
{"id": "good", "prompt": "Once upon a time", "max_tokens": 10, "temperature": 0}
J
kcat -P "${B[@]}" < "$TMP/bad.jsonl" || fail "kcat bad lines"
wait_count confkv.results 23 60 || fail "results missing"
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
        "policy": "invalid_policy", "bigprompt": "prompt_too_long",
        "emptycontent": "prompt_too_long", "emptykey": "missing_prompt", "inf_mp": "invalid_field",
        "nan_mp": "invalid_field", "inf_meta": "invalid_field", "neg_inf": "invalid_field",
        # tools: only with messages, an array of objects, within its limits, and a
        # model with a chat template to show them (stories has none: the engine says so)
        "tools_prompt": "invalid_field", "tools_notobj": "invalid_field", "tools_deep": "tools_too_large",
        "tools_notmpl": "invalid_field"}
for i, code in want.items():
    assert i in res, "no result for " + i
    r = res[i]
    assert r["status"] == "error" and r["error"]["code"] == code, (i, r["error"])
    assert len(r["error"]["message"]) > 10, r["error"]
assert res["good"]["status"] == "ok", res["good"]
# the 5-byte {"": nil} has no id: its result carries the fallback (topic-partition-offset)
anon = [r for i, r in res.items() if i not in want and i != "good"]
assert len(anon) == 1 and anon[0]["error"]["code"] == "missing_prompt", anon
assert res["emptycontent"]["error"]["message"].startswith("the prompt is 29999 bytes"), res["emptycontent"]["error"]
assert "chat template" in res["tools_notmpl"]["error"]["message"], res["tools_notmpl"]["error"]
assert "metadata" not in res["inf_meta"] or res["inf_meta"]["metadata"] is None, res["inf_meta"]
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
echo '{"id": "after", "prompt": "Once upon a time", "max_tokens": 5, "temperature": 0}' | kcat -P "${B[@]}" ||
  fail "kcat after"
wait_count confkv.results 20 60 || fail "no result for a job after the bad input"
consume confkv.results "$TMP/results2.bin"
python3 - "$TMP/results2.bin" "$(dirname "$0")" <<'PY' || fail "job after the bad input"
import sys
sys.path.insert(0, sys.argv[2])
from kmsg import read_records, decode
r = [v for v in (decode(p)[0] for k, p in read_records(sys.argv[1])) if v["id"] == "after"]
assert len(r) == 1 and r[0]["status"] == "ok" and r[0]["text"], r
PY
kill -TERM "$LAST_PID"; wait "$LAST_PID" || fail "confkvd exit code"

# `confkv batch --local`: the same renderer, without a size limit in front of it
"$CONFKV" batch --input "$TMP/batch.jsonl" --output "$TMP/batch.out" --local "${MODEL_ARGS[@]}" 2>"$TMP/batch.err" ||
  fail "batch --local on empty-content messages"
python3 - "$TMP/batch.out" <<'PY' || fail "batch --local output"
import json, sys
out = {o["custom_id"]: o["response"] for o in map(json.loads, open(sys.argv[1]))}
assert sorted(out) == ["e300", "e30000", "good", "inf"], sorted(out)
e = out["inf"]["body"]["error"]
assert out["inf"]["status_code"] == 400 and "invalid_field" in e["message"], out["inf"]
# 299 newlines: about 300 tokens, within the context: it runs
assert out["e300"]["status_code"] == 200, out["e300"]
e = out["e30000"]["body"]["error"]
assert out["e30000"]["status_code"] == 400 and e["code"] == "prompt_too_long", out["e30000"]
assert out["good"]["status_code"] == 200 and out["good"]["body"]["choices"][0]["text"], out["good"]
print("ok: batch --local:", {k: v["status_code"] for k, v in out.items()})
PY
echo "PASS bad_input"
