#!/usr/bin/env bash
# Scaling out and in under load (docs/SERVICE.md, Scaling out): `confkv
# broker --partitions 8`, two confkvd (a, b) in one group, 1,000 jobs
# produced at 100 a second; a third (c) starts 3 s in and a leaves (SIGTERM)
# 6 s in. Asserts, from the results topic read by kcat and the instances'
# logs:
#  - nothing lost: every job id has a result;
#  - duplicates (ids with two results) are at most the jobs a revoke left
#    to the next owner (the partitions_revoked log lines' rerun=: the jobs
#    abandoned at the grace limit, abandoned=, and finished ones the commit
#    metadata could not carry) plus those behind a revoke commit the group
#    refused (revoke_commit_failed: from the acknowledged offset to the one
#    refused, and the refused commit's finished set); the finished jobs above the committed
#    offset travel in the commit metadata and the next owner skips them
#    (kafka_totals skipped_done=, printed);
#  - incremental rebalancing: the partitions that never changed owner kept
#    running through both rebalances: none of them went more than IDLE_MAX_S
#    with a job waiting and no result coming out (the longest such stretch
#    is printed with the same stretch measured before c joined);
#  - the group ran cooperative-sticky and the revokes ended with the jobs
#    finished (end=drained) or at the grace limit (end=grace).
# Prints the figures as one JSON object. The grace variant (ctest
# svc_scale_out_grace: 600 jobs of 300-331 tokens at 50 a second, so a
# backlog stands through the rebalances; revoke_grace_ms 1, dispatch_ahead
# 8, EXPECT_ABANDONED=1, EXPECT_DISPATCH_AHEAD=8) checks the same with jobs
# abandoned at the limit, never more than 8 per revoked partition; the
# eager variant (svc_scale_out_eager: strategy range, EXPECT_PROTOCOL=eager)
# that nothing is lost when every partition is revoked and some come back to
# the member that gave them up (no idle bound there: eager stops them all).
# The group runs with a short session (3.5 s): the mock cluster waits
# session.timeout.ms - 1 s for members to join, at every rebalance.
# Usage: scale_out.sh CONFKV CONFKVD MODELS [N] [RATE]
CONFKV=$1 CONFKVD=$2 MODELS=$3 N=${4:-1000} RATE=${5:-100}
source "$(dirname "$0")/lib.sh"
command -v kcat >/dev/null || { echo "kcat missing: skip"; exit 77; }
# Slack on a partition that stays: the mock broker answers an empty fetch
# only when fetch.wait.max.ms (500) has passed, plus a job's own run time on
# a loaded host.
IDLE_MAX_S=${IDLE_MAX_S:-1.5}

start_broker 8
GROUP=(--brokers "$BOOT" --kafka.session.timeout.ms 3500 --kafka.heartbeat.interval.ms 300
  --kafka.auto.commit.interval.ms 200 --threads 1)
# More confkvd options for a comparison (e.g. SCALE_OUT_ARGS="--kafka.partition.assignment.strategy
# range --revoke-grace-ms 0" for the eager protocol; the assertions then fail, the figures print).
read -r -a MORE <<< "${SCALE_OUT_ARGS:-}"
GROUP+=("${MORE[@]}")
start_confkvd a "${GROUP[@]}" --instance a
PID_A=$LAST_PID
start_confkvd b "${GROUP[@]}" --instance b
PID_B=$LAST_PID
# Both members hold their share of the 8 partitions before the load starts.
for _ in $(seq 300); do
  python3 - "$TMP" <<'PY' && break
import re, sys
tot = 0
for n in "ab":
    ls = [l for l in open("%s/%s.err" % (sys.argv[1], n)) if "event=partitions_" in l]
    m = re.search(r"total=(\d+)", ls[-1]) if ls else None
    tot += int(m.group(1)) if m else 0
sys.exit(0 if tot == 8 else 1)
PY
  sleep 0.1
done

# The load: one kcat producing the jobs as they come (100 a second, lengths
# 8..39 tokens so they finish out of order; SCALE_OUT_TOKENS moves the 8).
python3 - "$N" "$RATE" "${SCALE_OUT_TOKENS:-8}" <<'PY' | kcat -P -b "$BOOT" -t confkv.jobs -K $'\t' -X linger.ms=1 &
import json, sys, time
n, rate, base = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
t0 = time.monotonic()
for i in range(n):
    t = t0 + i / rate
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)
    job = {"id": "s-%04d" % i, "prompt": "Tom and Sue", "max_tokens": base + (i * 7) % 32, "seed": i}
    sys.stdout.write("s-%04d\t%s\n" % (i, json.dumps(job)))
    sys.stdout.flush()
PY
LOAD=$!
T0=$(date +%s.%N)
sleep 3
# c: started without waiting for it (it joins while the load runs).
"$CONFKVD" --http-port 0 "${MODEL_ARGS[@]}" "${GROUP[@]}" --instance c > "$TMP/c.out" 2> "$TMP/c.err" &
PID_C=$!
PIDS+=("$PID_C")
sleep "$(python3 -c "import time;print(max(0, $T0 + 6 - time.time()))")"
kill -TERM "$PID_A"
T_TERM=$(date +%s.%N)
wait "$LOAD" || fail "the load's kcat"
wait "$PID_A" || fail "a: exit code after SIGTERM"
for ((i = 0; i < 90; i++)); do
  [ "$(kcat -C -b "$BOOT" -t confkv.results -o beginning -e -q -f '%k\n' 2>/dev/null | sort -u | wc -l)" -ge "$N" ] &&
    break
  sleep 1
done
sleep 2 # late duplicates, if any
kcat -C -b "$BOOT" -t confkv.jobs -o beginning -e -q -J > "$TMP/jobs.json" 2>/dev/null || true
kcat -C -b "$BOOT" -t confkv.results -o beginning -e -q -J > "$TMP/results.json" 2>/dev/null || true
# b and c stop cleanly (their kafka_totals lines: the jobs they skipped).
kill -TERM "$PID_B" "$PID_C"
wait "$PID_B" || fail "b: exit code after SIGTERM"
wait "$PID_C" || fail "c: exit code after SIGTERM"

python3 - "$TMP" "$N" "$IDLE_MAX_S" "$T0" "$T_TERM" <<'PY' || fail "scale-out"
import json, os, re, sys
tmp, n, idle_max, t0, t_term = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
jobs = {}
for l in open(tmp + "/jobs.json"):
    m = json.loads(l)
    jobs[m["key"]] = (m["partition"], m["ts"] / 1000.0)
res = []
for l in open(tmp + "/results.json"):
    m = json.loads(l)
    r = json.loads(m["payload"])
    res.append((m["ts"] / 1000.0, r))
assert len(jobs) == n, "jobs produced: %d of %d" % (len(jobs), n)
by_id = {}
for ts, r in res:
    by_id.setdefault(r["id"], []).append((ts, r))
lost = sorted(set(jobs) - set(by_id))
dups = sum(len(v) - 1 for v in by_id.values())

def log(name):
    try:
        return open("%s/%s.err" % (tmp, name)).read().splitlines()
    except OSError:
        return []
abandoned, rerun, uncommitted, revokes, ends, protocols = 0, 0, 0, 0, {}, set()
skipped, truncated = 0, 0
for name in "abc":
    for l in log(name):
        m = re.search(r"event=kafka_totals .*skipped_done=(\d+) done_truncated=(\d+)", l)
        if m:
            skipped += int(m.group(1))
            truncated += int(m.group(2))
        m = re.search(r"event=partitions_revoked count=(\d+) .*abandoned=(\d+) rerun=(\d+) end=(\w+)", l)
        if m:
            abandoned += int(m.group(2))
            rerun += int(m.group(3))
            ends[m.group(4)] = ends.get(m.group(4), 0) + 1
            revokes += 1
            da = int(os.environ.get("EXPECT_DISPATCH_AHEAD", "0"))
            assert not da or int(m.group(2)) <= da * int(m.group(1)), \
                "a revoke abandoned %s jobs of %s partitions (dispatch_ahead %d)" % (m.group(2), m.group(1), da)
        m = re.search(r"event=revoke_commit_failed partition=\d+ offset=(\d+) acked=(-?\d+) done=(\d+)", l)
        if m:
            uncommitted += max(0, int(m.group(1)) - max(0, int(m.group(2)))) + int(m.group(3))
        m = re.search(r"event=partitions_assigned .*protocol=(\w+)", l)
        if m:
            protocols.add(m.group(1))

# Owners per partition, from the results (the first result of each id).
owners = {}
for ts, r in sorted(res, key=lambda x: x[0]):
    owners.setdefault(r["source"]["partition"], set()).add(r["instance"])
stayed = sorted(p for p, o in owners.items() if len(o) == 1)

def idle(p, lo, hi):
    """Longest stretch in [lo, hi) during which partition p had a job
    produced and not answered, and no result of p came out."""
    ev = []
    for jid, (jp, ts) in jobs.items():
        if jp == p:
            ev.append((ts, 1))
    first = {}
    for ts, r in res:
        if r["source"]["partition"] == p and r["id"] not in first:
            first[r["id"]] = ts
    for ts in first.values():
        ev.append((ts, -1))
    ev.sort()
    pending, last, worst = 0, None, 0.0
    for ts, d in ev:
        if pending > 0 and last is not None and lo <= ts < hi:
            worst = max(worst, ts - max(last, lo))
        if d < 0:
            last = ts
        elif pending == 0:
            last = ts
        pending += d
    return worst

t_end = max(ts for ts, _ in res) if res else t0
before = {p: idle(p, t0, t0 + 3) for p in stayed}
during = {p: idle(p, t0 + 3, t_end + 1) for p in stayed}
out = {"jobs": n, "results": len(res), "lost": len(lost), "duplicates": dups,
       "revokes": revokes, "revoke_ends": ends, "abandoned": abandoned, "rerun": rerun,
       "revoke_commit_refused_jobs": uncommitted, "skipped_done": skipped, "done_truncated": truncated,
       "protocols": sorted(protocols), "partitions_stayed": stayed,
       "stayed_idle_max_s_before_join": round(max(before.values() or [0]), 3),
       "stayed_idle_max_s_during": round(max(during.values() or [0]), 3),
       "owners": {str(p): sorted(o) for p, o in sorted(owners.items())},
       "last_result_s": round(t_end - t0, 2)}
print(json.dumps(out))
assert not lost, "lost: %s" % lost[:10]
want = os.environ.get("EXPECT_PROTOCOL", "cooperative")
assert protocols == {want}, protocols
assert revokes >= 2, "expected revokes at the join and at the leave"
assert dups <= rerun + uncommitted, \
    "%d duplicates; %d jobs left above the committed offset at a revoke (%d of them abandoned at the grace limit), %d behind a refused revoke commit" % (dups, rerun, abandoned, uncommitted)
if os.environ.get("EXPECT_ABANDONED") == "1":
    assert ends.get("grace") and abandoned > 0, "no revoke reached its grace limit with jobs running"
if want == "cooperative":
    assert stayed, "no partition kept its owner"
    assert max(during.values()) <= idle_max, "a partition that stayed was idle %.3f s" % max(during.values())
PY
echo "PASS scale_out"
