#!/usr/bin/env bash
# Acceptance 3: with `confkv broker` outliving it, confkvd is killed with
# SIGKILL in the middle of a 500-job run, then restarted: every job id gets
# a result (duplicates allowed; counted and reported, with how many of them
# are marked redelivered).
# Usage: restart.sh CONFKV CONFKVD MODELS [N]
CONFKV=$1 CONFKVD=$2 MODELS=$3 N=${4:-500}
source "$(dirname "$0")/lib.sh"
command -v kcat >/dev/null || { echo "kcat missing: skip"; exit 77; }

start_broker 4
# A short session so the group hands the dead member's partitions over quickly.
FAST=(--kafka.session.timeout.ms 6000 --kafka.heartbeat.interval.ms 500 --kafka.auto.commit.interval.ms 200)
start_confkvd d1 --brokers "$BOOT" "${FAST[@]}"
python3 - "$TMP" "$N" <<'PY'
import json, sys
tmp, n = sys.argv[1], int(sys.argv[2])
with open(tmp + "/jobs.jsonl", "w") as f, open(tmp + "/ids.txt", "w") as ids:
    for i in range(n):
        jid = "r-%04d" % i
        f.write(jid + "\t" + json.dumps({"id": jid, "prompt": "Tom and Sue", "max_tokens": 24, "seed": i}) + "\n")
        ids.write(jid + "\n")
PY
kcat -P -b "$BOOT" -t confkv.jobs -K $'\t' < "$TMP/jobs.jsonl" || fail "kcat produce"
# Kill it somewhere in the middle of the run.
for ((i = 0; i < 600; i++)); do
  n=$(kcat -C -b "$BOOT" -t confkv.results -o beginning -e -q -f 'x\n' 2>/dev/null | wc -l)
  [ "$n" -ge $((N / 5)) ] && break
  sleep 0.1
done
kill -9 "$LAST_PID"
echo "killed confkvd after $n results"
[ "$n" -lt "$N" ] || fail "the run finished before the kill ($n results): make the jobs longer"
start_confkvd d2 --brokers "$BOOT" "${FAST[@]}"
for ((i = 0; i < 120; i++)); do
  consume confkv.results "$TMP/results.bin"
  $KMSG coverage "$TMP/results.bin" "$TMP/ids.txt" > "$TMP/cov.json" 2>/dev/null && break
  sleep 1
done
$KMSG coverage "$TMP/results.bin" "$TMP/ids.txt" || fail "not every job got a result"
kill -TERM "$LAST_PID"; wait "$LAST_PID" || fail "confkvd exit code"
echo "PASS restart"
