#!/usr/bin/env bash
# Sessions and cache templates end to end:
# confkvd with --kafka-embedded and a real redis-server, jobs and results
# through Kafka (`confkv submit --wait`).
#   1. Session: turn 2 reports cached_tokens >= turn 1's prompt + completion
#      minus one block, and its text equals a fresh (session-less, cache-off)
#      run on the whole conversation. After SIGTERM and a restart on the same
#      Redis, turn 3 resumes from the cold tier (sessions fetched, cached
#      tokens) and again equals the fresh run.
#   2. Template: a ~200-token template saved by a job survives a restart, is
#      prewarmed at start-up (--prewarm-wait: /readyz waits for it), and a job
#      using it reports cached_tokens >= 192 and a lower time to first token
#      than jobs whose 200-token prefixes were never seen; POST
#      /templates/prewarm starts a round.
#   3. Every stored prefix block corrupted in Redis: a restarted confkvd counts
#      integrity failures, treats them as misses, and still answers exactly.
# Usage: cache.sh CONFKV CONFKVD MODELS
CONFKV=$1 CONFKVD=$2 MODELS=$3
source "$(dirname "$0")/lib.sh"
need_redis
start_redis
URL="redis://127.0.0.1:$REDIS_PORT"
BS=4 # stories260K's 512-token context: 4-token blocks (kv_default_block_size)

# one NAME JSON: submit one job, its result in $TMP/NAME.json
one() {
  printf '%s\n' "$2" > "$TMP/$1.job"
  "$CONFKV" submit --brokers "$BOOT" --wait --timeout 60 --file "$TMP/$1.job" > "$TMP/$1.json" \
    2> "$TMP/$1.submit.err" || fail "$1: confkv submit"
  python3 -c "import json,sys;r=json.load(open(sys.argv[1]));assert r['status']=='ok',r" "$TMP/$1.json" \
    || fail "$1: $(cat "$TMP/$1.json")"
}
field() { python3 -c "import json,sys;r=json.load(open(sys.argv[1]))
for k in sys.argv[2].split('.'): r=r[k]
print(r)" "$TMP/$1.json" "$2"; }
job() { # job ID PROMPT [EXTRA-JSON-FIELDS]
  python3 -c "import json,sys;d={'id':sys.argv[1],'prompt':sys.argv[2],'max_tokens':30,'temperature':0,'ignore_eos':True}
d.update(json.loads(sys.argv[3]));print(json.dumps(d))" "$1" "$2" "${3:-{\}}"
}
stop() { kill -TERM "$LAST_PID"; wait "$LAST_PID" || fail "confkvd exit code $?"; }

# ---- 1. sessions
P1="Lily saw a cat in the garden." P2="Then the cat ran up a tall tree." P3="Lily called her mom."
start_confkvd s1 --kafka-embedded --threads 1 --redis "$URL"
one t1 "$(job t1 "$P1" '{"session_id": "conv-1"}')"
one t2 "$(job t2 "$P2" '{"session_id": "conv-1"}')"
n1=$(( $(field t1 usage.prompt_tokens) + $(field t1 usage.completion_tokens) ))
c2=$(field t2 usage.cached_tokens)
[ "$c2" -ge $((n1 - BS)) ] || fail "turn 2 cached $c2 tokens; turn 1 had $n1"
CONV2="$P1$(field t1 text) $P2"
stop
# The reference: a fresh instance without prefix cache or Redis.
start_confkvd ref --kafka-embedded --threads 1 --prefix-cache=false
one r2 "$(job r2 "$CONV2")"
[ "$(field r2 usage.prompt_tokens)" = "$(field t2 usage.prompt_tokens)" ] \
  || fail "the conversation is $(field r2 usage.prompt_tokens) tokens as text, $(field t2 usage.prompt_tokens) as a session"
[ "$(field r2 text)" = "$(field t2 text)" ] || fail "turn 2 '$(field t2 text)' != fresh '$(field r2 text)'"
REF_PID=$LAST_PID REF_BOOT=$BOOT
# Restart on the same Redis: turn 3 resumes from the cold tier.
start_confkvd s2 --kafka-embedded --threads 1 --redis "$URL"
one t3 "$(job t3 "$P3" '{"session_id": "conv-1"}')"
n2=$(( $(field t2 usage.prompt_tokens) + $(field t2 usage.completion_tokens) ))
c3=$(field t3 usage.cached_tokens)
[ "$c3" -ge $((n2 - BS)) ] || fail "turn 3 after the restart cached $c3 tokens; the session had $n2"
[ "$(metric 'confkv_sessions_total{event="fetched"}')" = 1 ] || fail "the session did not come from Redis"
[ "$(metric 'confkv_cache_hits_total{tier="cold"}')" -gt 0 ] || fail "no cold-tier prefix hit"
CONV3="$CONV2$(field t2 text) $P3"
S2_PID=$LAST_PID S2_HTTP=$HTTP S2_BOOT=$BOOT
BOOT=$REF_BOOT
one r3 "$(job r3 "$CONV3")"
[ "$(field r3 text)" = "$(field t3 text)" ] || fail "turn 3 '$(field t3 text)' != fresh '$(field r3 text)'"
echo "sessions: turn 2 cached $c2 of $n1, turn 3 (after a restart) cached $c3 of $n2; texts equal fresh runs"

# ---- 2. templates
TEXT=$(python3 - <<'PY'
s = ("You are a storyteller for small children. You tell short, happy stories about animals, toys and "
     "friends. Every story has a name, a place and a little problem that is solved by being kind. Use "
     "simple words. Keep every sentence short. The stories happen in a park, a garden, a house or a "
     "forest. A dog, a cat, a bird or a bunny can be a friend. At the end everyone is happy and they "
     "play together until the sun goes down. Now tell the story.")
print(s)
PY
)
BOOT=$S2_BOOT HTTP=$S2_HTTP LAST_PID=$S2_PID
one save "$(job save "$TEXT" '{"template": "kids", "save": true, "max_tokens": 1}')"
TPL_TOKENS=$(field save usage.prompt_tokens)
[ "$TPL_TOKENS" -ge 190 ] && [ "$TPL_TOKENS" -le 260 ] || fail "the template is $TPL_TOKENS tokens"
[ "$(rcli TTL confkv:tpl:kids)" = -1 ] || fail "template record expires: TTL $(rcli TTL confkv:tpl:kids)"
[ "$(rcli ZSCORE confkv:tpl-uses kids)" -ge 1 ] || fail "template use not counted"
stop
start_confkvd s3 --kafka-embedded --threads 1 --redis "$URL" --prewarm-wait
http_get /readyz "$TMP/ready.json" > /dev/null
grep -q '"prewarm": "done"' "$TMP/ready.json" || fail "ready before the prewarm: $(cat "$TMP/ready.json")"
grep -q 'event=template_prewarmed name=kids' "$TMP/s3.err" || fail "kids was not prewarmed"
pinned=$(metric confkv_prefix_pinned_blocks)
[ "$pinned" -ge $(( (TPL_TOKENS - 1) / BS )) ] || fail "only $pinned blocks pinned"
ttft_t=() ttft_n=()
for i in 1 2 3 4 5; do
  one tu$i "$(job tu$i "Tom found a ball number $i." '{"template": "kids", "max_tokens": 4}')"
  ct=$(field tu$i usage.cached_tokens)
  [ "$ct" -ge 192 ] || fail "a job using the template cached only $ct tokens"
  ttft_t+=("$(field tu$i timings.ttft_ms)")
  # the same work without a cached prefix: a 200-token prompt never seen
  one nu$i "$(job nu$i "Story $i. $TEXT Tom found a ball number $i." '{"max_tokens": 4}')"
  [ "$(field nu$i usage.cached_tokens)" -lt 8 ] || fail "the uncached baseline was cached"
  ttft_n+=("$(field nu$i timings.ttft_ms)")
done
read -r med_t med_n < <(python3 -c "import statistics,sys;a,b=sys.argv[1].split(),sys.argv[2].split()
print(statistics.median(map(float,a)),statistics.median(map(float,b)))" "${ttft_t[*]}" "${ttft_n[*]}")
python3 -c "import sys;sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$med_t" "$med_n" \
  || fail "time to first token with the template $med_t ms, without $med_n ms"
code=$(curl -s -o "$TMP/pw.json" -w '%{http_code}' -X POST -d '{"names": ["kids"]}' "http://$HTTP/templates/prewarm")
[ "$code" = 202 ] || fail "POST /templates/prewarm: $code $(cat "$TMP/pw.json")"
code=$(curl -s -o "$TMP/pw.json" -w '%{http_code}' -X POST -d '{"names": [42]}' "http://$HTTP/templates/prewarm")
[ "$code" = 400 ] || fail "POST /templates/prewarm with a bad body: $code"
echo "templates: $TPL_TOKENS-token template prewarmed after a restart ($pinned blocks pinned); ttft median $med_t ms with it, $med_n ms without"
stop

# ---- 3. corruption: every stored prefix block damaged
n=0
for k in $(rcli --scan --pattern 'confkv:pfx:*'); do rcli SET "$k" "not a block" > /dev/null; n=$((n + 1)); done
[ "$n" -gt 40 ] || fail "only $n prefix blocks were in Redis"
start_confkvd s4 --kafka-embedded --threads 1 --redis "$URL" --prewarm-top 0
one tc "$(job tc "Tom found a ball number 1." '{"template": "kids", "max_tokens": 4}')"
[ "$(field tc text)" = "$(field tu1 text)" ] || fail "with corrupted blocks: '$(field tc text)' != '$(field tu1 text)'"
[ "$(field tc usage.cached_tokens)" -lt 8 ] || fail "corrupted blocks were used: cached $(field tc usage.cached_tokens)"
bad=$(metric confkv_kv_integrity_failures_total)
[ "${bad%.*}" -gt 0 ] || fail "no integrity failure counted"
echo "corruption: $n blocks damaged, $bad integrity failures counted, the answer unchanged"
stop
kill -TERM "$REF_PID"; wait "$REF_PID" || fail "reference confkvd exit code"
echo "PASS cache"
