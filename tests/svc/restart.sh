#!/usr/bin/env bash
# With `confkv broker` outliving it, confkvd is killed with
# SIGKILL in the middle of a 500-job run, then restarted: every job id gets
# a result; duplicates are allowed and each duplicated id has a result
# marked "redelivered": true; no result produced before the kill is marked
# (a fresh group has no dispatch mark). Marked results without a duplicate
# are reported: jobs the killed instance had taken but not finished, plus at
# most 64 per partition it never took (docs/SERVICE.md). Then a clean stop
# (SIGTERM) and a third start: the mark the clean stop committed is exact
# (the earlier mark, or the highest offset it dispatched + 1), and a new job
# is marked exactly when its offset is below it.
# Usage: restart.sh CONFKV CONFKVD MODELS [N]
CONFKV=$1 CONFKVD=$2 MODELS=$3 N=${4:-500}
source "$(dirname "$0")/lib.sh"
command -v kcat >/dev/null || { echo "kcat missing: skip"; exit 77; }

start_broker 4
# A short session so the group hands the dead member's partitions over quickly.
FAST=(--kafka.session.timeout.ms 6000 --kafka.heartbeat.interval.ms 500 --kafka.auto.commit.interval.ms 200)
# The first instance commits offsets only along with its dispatch marks (no
# timer commit within the run), so finished jobs are left uncommitted at the
# kill and come back as duplicates; every job is taken at once (no pause, so
# no later mark renewal commits an offset along with it either).
start_confkvd d1 --brokers "$BOOT" --kafka.session.timeout.ms 6000 --kafka.heartbeat.interval.ms 500 \
  --kafka.auto.commit.interval.ms 600000 --max-inflight 1024
# Lengths from 32 to 495 tokens: the jobs run in one batch, and with one
# length they would all end together, 1.6 s in, so on a fast host the poll
# below would see the first results only after the last (every job done, and
# committed, before the kill). Spread out, they end one after another over
# the run.
python3 - "$TMP" "$N" <<'PY'
import json, sys
tmp, n = sys.argv[1], int(sys.argv[2])
with open(tmp + "/jobs.jsonl", "w") as f, open(tmp + "/ids.txt", "w") as ids:
    for i in range(n):
        jid = "r-%04d" % i
        job = {"id": jid, "prompt": "Tom and Sue", "max_tokens": 32 + (i * 53) % 464, "seed": i}
        f.write(jid + "\t" + json.dumps(job) + "\n")
        ids.write(jid + "\n")
PY
kcat -P -b "$BOOT" -t confkv.jobs -K $'\t' < "$TMP/jobs.jsonl" || fail "kcat produce"
# Kill it somewhere in the middle of the run.
for ((i = 0; i < 600; i++)); do
  n=$(kcat -C -b "$BOOT" -t confkv.results -o beginning -e -q -f 'x\n' 2>/dev/null | wc -l)
  [ "$n" -ge $((N / 10)) ] && break
  sleep 0.1
done
kill -9 "$LAST_PID"
echo "killed confkvd after $n results"
[ "$n" -lt "$N" ] || fail "the run finished before the kill ($n results): make the jobs longer"
# Everything on the results topic now came from the killed instance.
consume confkv.results "$TMP/before.bin"
start_confkvd d2 --brokers "$BOOT" "${FAST[@]}"
for ((i = 0; i < 120; i++)); do
  consume confkv.results "$TMP/results.bin"
  $KMSG coverage "$TMP/results.bin" "$TMP/ids.txt" > "$TMP/cov.json" 2>/dev/null && break
  sleep 1
done
$KMSG coverage "$TMP/results.bin" "$TMP/ids.txt" --require-marked ||
  fail "not every job got a result, or a duplicated id has no redelivered result"
python3 - "$HERE" "$TMP/before.bin" "$TMP/results.bin" "$N" <<'PY' || fail "redelivery marks"
import json, sys
sys.path.insert(0, sys.argv[1])
import kmsg
before = [kmsg.decode(p)[0] for _, p in kmsg.read_records(sys.argv[2])]
after = [kmsg.decode(p)[0] for _, p in kmsg.read_records(sys.argv[3])]
assert before, "no result before the kill"
assert len(before) < int(sys.argv[4]), \
    "every job had its result before the kill (%d): nothing was left to redeliver" % len(before)
marked = [r["id"] for r in before if r["redelivered"]]
assert not marked, "results produced before the kill are marked redelivered: %s" % marked[:5]
first = {}
for r in after:
    first.setdefault(r["id"], r)
by_id = {}
for r in after:
    by_id.setdefault(r["id"], []).append(r)
dups = [i for i, rs in by_id.items() if len(rs) > 1]
# The restarted instance's result of a duplicated id is the marked one.
unmarked = [i for i in dups if not any(r["redelivered"] for r in by_id[i][1:])]
assert not unmarked, "duplicated ids whose second result is not marked: %s" % unmarked[:5]
false_pos = [i for i, rs in by_id.items() if len(rs) == 1 and rs[0]["redelivered"]]
print(json.dumps({"results_before_kill": len(before), "duplicated_ids": len(dups),
                  "marked_without_duplicate": len(false_pos)}))
assert dups, "no duplicate to check (every finished job was committed before the kill)"
PY
kill -TERM "$LAST_PID"; wait "$LAST_PID" || fail "confkvd exit code"

# Clean stop, restart, 40 new jobs: marked exactly when below the exact mark.
start_confkvd d3 --brokers "$BOOT" "${FAST[@]}"
for ((i = 0; i < 40; i++)); do
  printf 'n-%04d\t{"id":"n-%04d","prompt":"Tom","max_tokens":4}\n' "$i" "$i"
done > "$TMP/new.jsonl"
base=$(kcat -C -b "$BOOT" -t confkv.results -o beginning -e -q -f 'x\n' | wc -l)
kcat -P -b "$BOOT" -t confkv.jobs -K $'\t' < "$TMP/new.jsonl" || fail "kcat produce"
wait_count confkv.results $((base + 40)) 60 ||
  fail "the new jobs were not answered"
consume confkv.results "$TMP/results.bin"
python3 - "$HERE" "$TMP" <<'PY' || fail "marks after a clean stop"
import json, re, sys
sys.path.insert(0, sys.argv[1])
import kmsg
tmp = sys.argv[2]
def marks(name):  # partition -> mark read at the start of instance `name`
    out = {}
    for l in open("%s/%s.err" % (tmp, name)):
        m = re.search(r"event=partition_committed partition=(\d+) offset=(-?\d+) mark=(-?\d+)", l)
        if m:
            out[int(m.group(1))] = int(m.group(3))
    return out
m2, m3 = marks("d2"), marks("d3")
rs = [kmsg.decode(p)[0] for _, p in kmsg.read_records(tmp + "/results.bin")]
d2_inst = {r["instance"] for r in rs if r["id"].startswith("r-") and r["redelivered"]}
assert len(d2_inst) == 1, d2_inst
hi = {}
for r in rs:
    if r["instance"] in d2_inst:
        p = r["source"]["partition"]
        hi[p] = max(hi.get(p, -1), r["source"]["offset"])
for p, m in m3.items():
    want = max(m2.get(p, -1), hi.get(p, -1) + 1)
    assert m == want, "partition %d: mark after the clean stop %d, want %d" % (p, m, want)
new = [r for r in rs if r["id"].startswith("n-")]
assert len(new) == 40, len(new)
for r in new:
    src = r["source"]
    assert r["redelivered"] == (src["offset"] < m3[src["partition"]]), r
print(json.dumps({"marks_after_clean_stop": m3, "new_jobs": 40,
                  "new_jobs_marked": sum(r["redelivered"] for r in new)}))
PY
kill -TERM "$LAST_PID"; wait "$LAST_PID" || fail "confkvd exit code (d3)"
echo "PASS restart"
