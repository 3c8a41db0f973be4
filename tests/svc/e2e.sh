#!/usr/bin/env bash
# confkvd --kafka-embedded; kcat (an independent Kafka
# client) produces 100 jobs, half JSON lines, half msgpack files, some with
# sessions and priorities; each job id gets exactly one ok result on
# confkv.results, in its job's encoding; the greedy job's text equals
# `confkv generate`. Then our own `confkv submit --wait`.
# Usage: e2e.sh CONFKV CONFKVD MODELS
CONFKV=$1 CONFKVD=$2 MODELS=$3
source "$(dirname "$0")/lib.sh"
command -v kcat >/dev/null || { echo "kcat missing: skip"; exit 77; }

start_confkvd d --kafka-embedded
$KMSG write-jobs "$TMP" 100
# JSON half: key<TAB>value lines; msgpack half: one file = one message.
kcat -P -b "$BOOT" -t confkv.jobs -K $'\t' -H content-type=application/json < "$TMP/jobs.jsonl" ||
  fail "kcat produce (json)"
kcat -P -b "$BOOT" -t confkv.jobs "$TMP"/mp/*.bin || fail "kcat produce (msgpack)"
wait_count confkv.results 100 60 || fail "not all results arrived"
sleep 1
consume confkv.results "$TMP/results.bin"
$KMSG check-results "$TMP/results.bin" "$TMP/ids.txt" || fail "results"

# The greedy job (job-0000) against `confkv generate`.
want=$("$CONFKV" generate "${MODEL_ARGS[@]}" --prompt "Once upon a time" --temperature 0 --max-tokens 40 --json |
       python3 -c "import json,sys;print(json.load(sys.stdin)['completion'])")
got=$($KMSG dump "$TMP/results.bin" | python3 -c "
import json,sys
for l in sys.stdin:
    d = json.loads(l)['value']
    if d['id'] == 'job-0000': print(d['text'])")
[ "$want" = "$got" ] || fail "greedy text differs from confkv generate: '$got' vs '$want'"

# Our own client: submit --wait prints one result per job.
printf '%s\n' '{"id":"own-1","prompt":"Tom","max_tokens":5}' '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5}' |
  "$CONFKV" submit --brokers "$BOOT" --wait --timeout 60 > "$TMP/own.jsonl" 2>"$TMP/submit.err" || fail "confkv submit --wait"
python3 - "$TMP/own.jsonl" <<'PY' || fail "submit output"
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
assert len(rs) == 2 and all(r["status"] == "ok" for r in rs), rs
assert rs[0]["id"] == "own-1"
PY
# A metrics record reached confkv.metrics.
wait_count confkv.metrics 1 15 || fail "no metrics record"
kill -TERM "$LAST_PID"; wait "$LAST_PID" || fail "confkvd exit code $?"
echo "PASS e2e"
