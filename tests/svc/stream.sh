#!/usr/bin/env bash
# Streamed jobs (`"stream": true`, docs/SERVICE.md, Streaming) through a
# Kafka client that is not librdkafka: kafkajs (tests/svc/stream_check.js)
# produces the jobs and consumes confkv.stream and confkv.results from a
# standalone `confkv broker`. Two confkvd in one group, stream_interval_ms
# 0 (a record every engine step) and 50; each serves
#   - stories260K (ASCII text),
#   - a random-weight model with Qwen2's byte-level vocabulary (`confkv
#     synth --vocab-from`): text full of multi-byte UTF-8, pieces of which
#     come as separate tokens,
#   - the cascade (stories260K, then its q8_0 conversion; rule "always,
#     rewind=3": every auto job moves after 6 tokens, 3 of them dropped).
# Checked for every streamed job (JSON and msgpack): records in seq order,
# done only on the last, all on the broker before the result (timestamps,
# and the stream's end offset when the result is consumed); the deltas concatenated
# equal the result's text; a refused job's stream is one end record with
# the result's error; jobs without a stream get no records. Then the
# coalescing bound (at most one record per interval and the end), every
# record against schemas/stream.schema.json, the stream metrics, and
# `confkv submit --stream`.
# Usage: stream.sh CONFKV CONFKVD MODELS
CONFKV=$1 CONFKVD=$2 MODELS=$3
source "$(dirname "$0")/lib.sh"

DEPS=${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}
command -v node > /dev/null || { echo "node missing: skip"; exit 77; }
[ -f "$DEPS/npm-kafkajs/node_modules/kafkajs/package.json" ] ||
  { echo "kafkajs missing (ops/scripts/install-deps.sh): skip"; exit 77; }

SMALL="$MODELS/stories260K.bin"
"$CONFKV" convert --from llama2c "$SMALL" --tokenizer "$MODELS/tok512.bin" -o "$TMP/large.gguf" --type q8_0 \
  > /dev/null 2> "$TMP/convert.err" || fail "convert"
MODEL_ARGS=(--model "small=$SMALL,tokenizer=$MODELS/tok512.bin" --model "large=$TMP/large.gguf"
            --route cascade --route-models small,large --route-rule "tokens=6,rewind=3,always" --threads 1)
VOCAB=$(ls "$DEPS"/llama.cpp/models/ggml-vocab-qwen2.gguf 2> /dev/null || true)
if [ -n "$VOCAB" ]; then
  "$CONFKV" synth -o "$TMP/qwen.gguf" --dim 32 --layers 1 --heads 2 --kv-heads 2 --ffn 64 --ctx 512 --tied \
    --vocab-from "$VOCAB" > /dev/null 2> "$TMP/synth.err" || fail "synth"
  MODEL_ARGS+=(--model "qwen=$TMP/qwen.gguf")
else
  echo "no Qwen2 vocabulary (ops/scripts/install-llamacpp.sh): the multi-byte jobs are left out"
fi

# a short session timeout: the mock cluster's rebalance lasts that minus 1 s
GROUP=(--kafka.session.timeout.ms 6000 --kafka.heartbeat.interval.ms 500)
start_broker 4
start_confkvd s0 --brokers "$BOOT" "${GROUP[@]}" --instance s0 --stream-interval-ms 0
HTTP0=$HTTP
start_confkvd s50 --brokers "$BOOT" "${GROUP[@]}" --instance s50 --stream-interval-ms 50
HTTP50=$HTTP

python3 - "$TMP/jobs.jsonl" "${VOCAB:+qwen}" <<'PY'
import json, sys
out, qwen = open(sys.argv[1], "w"), sys.argv[2] == "qwen"
prompts = ["Once upon a time", "The dragon said", "Lily and Tom went to", "A little bird", "Sam was sad"]
jobs = []
for i in range(24):
    j = {"id": f"st-{i}", "prompt": prompts[i % 5], "stream": True, "max_tokens": 60 + 9 * i,
         "temperature": 0.9, "seed": i + 1, "model": "small", "_expect": "stream"}
    if i % 4 == 1: j["_enc"] = "msgpack"
    if i % 6 == 2: j["model"] = "auto"           # moved to the large model after 6 tokens
    if i % 6 == 3: j["stop"] = ["the", "."]      # stop strings held back by the engine
    if qwen and i % 3 == 0: j.update(model="qwen", temperature=1.0, prompt="你好", max_tokens=120)
    jobs.append(j)
jobs += [
    {"id": "bad-temp", "prompt": "x", "stream": True, "temperature": "hot", "_expect": "stream_error"},
    {"id": "bad-temp-mp", "prompt": "x", "stream": True, "top_p": 7, "_enc": "msgpack", "_expect": "stream_error"},
    {"id": "bad-model", "prompt": "x", "stream": True, "model": "nope", "_expect": "stream_error"},
    {"id": "bad-stream", "prompt": "x", "stream": "yes", "_expect": "no_stream"},
    {"id": "plain-1", "prompt": "Once", "max_tokens": 20, "model": "small", "_expect": "no_stream"},
    {"id": "plain-2", "prompt": "Once", "max_tokens": 20, "stream": False, "model": "small", "_expect": "no_stream"},
]
for j in jobs: out.write(json.dumps(j, ensure_ascii=False) + "\n")
PY

node "$(dirname "$0")/stream_check.js" "$BOOT" "$TMP/jobs.jsonl" "$TMP/check.json" 2> "$TMP/check.err" ||
  { cat "$TMP/check.err" >&2; fail "kafkajs checks"; }

python3 - "$TMP/check.json" "${VOCAB:+qwen}" <<'PY' || fail "summary checks"
import json, sys
c = json.load(open(sys.argv[1]))
jobs = {k: v for k, v in c.items() if not k.startswith("_")}
err = []
per = {"s0": 0, "s50": 0}
for k, v in jobs.items():
    if v["instance"] in per: per[v["instance"]] += 1
    if not k.startswith("st-"): continue
    # coalescing: at most one record per interval (the first at once) and the end
    if v["instance"] == "s50" and v["records"] > int(v["total_ms"] // 50) + 2:
        err.append(f"{k}: {v['records']} records in {v['total_ms']} ms at 50 ms")
    if v["records"] > v["completion_tokens"] + 1:
        err.append(f"{k}: {v['records']} records for {v['completion_tokens']} tokens")
auto = [v for k, v in jobs.items() if k.startswith("st-") and int(k[3:]) % 6 == 2]
if not all(v["escalated"] for v in auto): err.append(f"auto jobs not all moved: {auto}")
if sys.argv[2] == "qwen" and c["_multibyte_texts"] < 4:
    err.append(f"only {c['_multibyte_texts']} texts with multi-byte UTF-8")
if min(per.values()) == 0: err.append(f"one instance served nothing: {per}")
print("streamed jobs:", len([k for k in jobs if k.startswith('st-')]), "by instance", per,
      "multi-byte texts", c["_multibyte_texts"], "results handed over before their stream's end record",
      c["_results_before_stream_end"],
      "records at 0 ms:", sum(v["records"] for v in jobs.values() if v["instance"] == "s0"),
      "at 50 ms:", sum(v["records"] for v in jobs.values() if v["instance"] == "s50"))
for e in err: print("FAIL", e, file=sys.stderr)
sys.exit(1 if err else 0)
PY

# every record against schemas/stream.schema.json (Debian's python3-jsonschema)
/usr/bin/python3 - "$(dirname "$0")/../../schemas/stream.schema.json" "$TMP/check.json.records.jsonl" <<'PY' ||
import json, sys
import jsonschema
v = jsonschema.Draft202012Validator(json.load(open(sys.argv[1])))
n = 0
for line in open(sys.argv[2], encoding="utf-8"):
    v.validate(json.loads(line))
    n += 1
assert n > 50, n
PY
  fail "stream records against the schema"

for h in "$HTTP0" "$HTTP50"; do
  HTTP=$h
  n=$(metric confkv_stream_records_total)
  [ "${n%.*}" -gt 0 ] 2> /dev/null || fail "confkv_stream_records_total at $h: $n"
  [ "$(metric confkv_stream_delivery_failures_total)" = 0 ] || fail "stream delivery failures at $h"
done

# confkv submit --stream: the text as it arrives, then the result
"$CONFKV" submit --brokers "$BOOT" --stream --timeout 60 --prompt "Once upon a time" \
  > "$TMP/submit.out" 2> "$TMP/submit.err" || fail "submit --stream: $(cat "$TMP/submit.err")"
python3 - "$TMP/submit.out" <<'PY' || fail "submit --stream output: $(head -c 600 "$TMP/submit.out")"
import json, sys
body = open(sys.argv[1], encoding="utf-8").read()
res = json.loads(body.rstrip("\n").split("\n")[-1])
assert res["status"] == "ok" and body.startswith(res["text"] + "\n"), body[:300]
PY
echo "stream: ok"
