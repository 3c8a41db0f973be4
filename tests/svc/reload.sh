#!/usr/bin/env bash
# SIGHUP re-reads the config file's policy and
# tuning keys and applies them to later jobs, under a 300-job load, losing
# no job and redelivering none; a file that does not load is refused with a
# log line and the old values stay. "Later" is consumed later: --max-inflight
# 16 keeps most of the 300 in Kafka when the signal comes.
# Usage: reload.sh CONFKV CONFKVD MODELS
CONFKV=$1 CONFKVD=$2 MODELS=$3
source "$(dirname "$0")/lib.sh"
printf 'policy=full\n' > "$TMP/confkvd.conf"
start_broker 4
start_confkvd d1 --brokers "$BOOT" --config "$TMP/confkvd.conf" --threads 1 --max-running 8 --max-inflight 16
python3 - "$TMP" <<'PY'
import json, sys
with open(sys.argv[1] + "/jobs.jsonl", "w") as f, open(sys.argv[1] + "/ids.txt", "w") as ids:
    for i in range(300):
        f.write("r-%d\t%s\n" % (i, json.dumps({"id": "r-%d" % i, "prompt": "Once upon a time", "max_tokens": 300, "ignore_eos": True,
                                               "seed": i, "temperature": 0.8})))
        ids.write("r-%d\n" % i)
PY
count() { kcat -C -b "$BOOT" -t confkv.results -o beginning -e -q -f 'x\n' 2>/dev/null | wc -l; }

# --- a file that does not load: refused, the old values stay
printf 'policy=full\nno_such_key=1\n' > "$TMP/confkvd.conf"
kill -HUP "$LAST_PID"
for ((i = 0; i < 50; i++)); do grep -q 'event=config_reload status=refused' "$TMP/d1.err" && break; sleep 0.1; done
grep -q 'event=config_reload status=refused' "$TMP/d1.err" || fail "a bad config file was not refused"
printf 'policy=bogus:1\n' > "$TMP/confkvd.conf"
kill -HUP "$LAST_PID"
for ((i = 0; i < 50; i++)); do [ "$(grep -c 'event=config_reload status=refused' "$TMP/d1.err")" -ge 2 ] && break; sleep 0.1; done
[ "$(grep -c 'event=config_reload status=refused' "$TMP/d1.err")" -ge 2 ] || fail "a bad policy was not refused"
kill -0 "$LAST_PID" || fail "confkvd died on a bad reload"

# --- 300 jobs: 150, a good reload once 30 results are out (the rest of the
# 150 still running or waiting), then 150 more
head -150 "$TMP/jobs.jsonl" | kcat -P -b "$BOOT" -t confkv.jobs -K $'\t' || fail "kcat"
for ((i = 0; i < 600; i++)); do [ "$(count)" -ge 30 ] && break; sleep 0.05; done
printf 'policy=window:32\ntuning=adaptive\ntuning_window_s=5\n' > "$TMP/confkvd.conf"
kill -HUP "$LAST_PID"
for ((i = 0; i < 50; i++)); do grep -q 'event=config_reload status=applied' "$TMP/d1.err" && break; sleep 0.1; done
grep -q 'event=config_reload status=applied policy="window:32" tuning=adaptive' "$TMP/d1.err" ||
  fail "the good reload was not applied: $(grep config_reload "$TMP/d1.err")"
[ "$(count)" -lt 150 ] || fail "the first 150 jobs were done before the reload: no load across it"
tail -150 "$TMP/jobs.jsonl" | kcat -P -b "$BOOT" -t confkv.jobs -K $'\t' || fail "kcat"
wait_count confkv.results 300 180 || fail "not every job finished"
consume confkv.results "$TMP/results.bin"
$KMSG coverage "$TMP/results.bin" "$TMP/ids.txt" || fail "a job was lost across the reload"
$KMSG dump "$TMP/results.bin" > "$TMP/results.jsonl"
python3 - "$TMP/results.jsonl" <<'PY' || fail "results across the reload"
import json, sys
res = [json.loads(l)["value"] for l in open(sys.argv[1]) if l.strip()]
ids = [r["id"] for r in res]
assert len(ids) == 300 and len(set(ids)) == 300, "%d results, %d ids" % (len(ids), len(set(ids)))
assert not any(r["redelivered"] for r in res), "a job was redelivered"
assert all(r["status"] == "ok" for r in res), [r for r in res if r["status"] != "ok"][:1]
pol = [r["kv"]["policy"] for r in res]
n_full, n_win = pol.count("full"), pol.count("window:32")
assert n_full + n_win == 300, set(pol)
assert n_full >= 30 and n_win >= 150, (n_full, n_win)
# in the order results were produced: the early ones all ran before the reload
assert all(p == "full" for p in pol[:30]), pol[:30]
# the jobs produced after it all ran under the new default
late = [r["kv"]["policy"] for r in res if int(r["id"].split("-")[1]) >= 150]
assert late and all(p == "window:32" for p in late), set(late)
print("reload under load: %d results, %d under full (before), %d under window:32 (after), none lost or redelivered"
      % (len(res), n_full, n_win))
PY
ok=0
for ((i = 0; i < 20; i++)); do
  curl -s "http://$HTTP/metrics" | grep -q '^confkv_policy_threshold{model="[^"]*",param="entropy_threshold"}' && { ok=1; break; }
  sleep 0.2
done
[ "$ok" = 1 ] || fail "threshold gauge"
kill -TERM "$LAST_PID"; wait "$LAST_PID" || fail "exit code"
echo "PASS reload"
