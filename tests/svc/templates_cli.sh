#!/usr/bin/env bash
# `confkv templates` against a real redis-server on a free loopback port,
# with a password and a database other than 0 (so AUTH and SELECT are
# exercised), and an ACL user for the user:password form:
#   create (and its refusal to overwrite, --force keeping the use count),
#   list --json, inspect --model (tokens, blocks_total by the engine's rule,
#   blocks_cached 0), records corrupted behind its back (listed as corrupt,
#   refused by inspect), delete (and again: exit 1), --key-prefix, usage
#   and URL errors, and prewarm against a closed port.
# confkvd is not started: its side of templates is tested with it.
# Usage: templates_cli.sh CONFKV CONFKVD MODELS
CONFKV=$1 CONFKVD=$2 MODELS=$3
source "$(dirname "$0")/lib.sh"
command -v redis-server >/dev/null && command -v redis-cli >/dev/null || { echo "redis-server missing: skip"; exit 77; }

free_port() { python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
PORT=$(free_port)
PASS=tpl-secret-42
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no --requirepass "$PASS" \
  --dir "$TMP" > "$TMP/redis.log" 2>&1 &
PIDS+=("$!")
export REDISCLI_AUTH=$PASS
for _ in $(seq 50); do redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG || fail "redis-server did not start"
rcli() { redis-cli -p "$PORT" -n 3 "$@"; }
URL="redis://:$PASS@127.0.0.1:$PORT/3"
T() { "$CONFKV" templates "$@"; }
# expect CODE NAME CMD...: run CMD (stderr to $TMP/NAME.err), check its exit code.
expect() {
  local want=$1 name=$2 got=0; shift 2
  "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" || got=$?
  [ "$got" = "$want" ] || fail "$name: exit $got, expected $want: $(cat "$TMP/$name.err")"
}
py() { python3 - "$@"; }

printf 'Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine.' \
  > "$TMP/sys.txt"
BYTES=$(wc -c < "$TMP/sys.txt")

# ---- create
expect 0 create T create --redis "$URL" --name sys --text "$TMP/sys.txt" --json
py "$TMP/create.out" "$BYTES" <<'PY' || fail "create --json: $(cat "$TMP/create.out")"
import json, sys, time
d = json.load(open(sys.argv[1]))
assert d["created"] is True and d["name"] == "sys" and d["bytes"] == int(sys.argv[2]), d
assert abs(d["created_ms"] - time.time() * 1000) < 60000, d
PY
[ "$(rcli TTL confkv:tpl:sys)" = -1 ] || fail "the record has an expiry"
[ "$(rcli ZSCORE confkv:tpl-uses sys)" = 0 ] || fail "create did not add the use count at 0"
rcli EXISTS confkv:tpl:sys | grep -qx 1 || fail "no record under confkv:tpl:sys in db 3"
[ "$(redis-cli -p "$PORT" -n 0 DBSIZE)" = 0 ] || fail "db 0 was written (SELECT not sent?)"

# ---- create again: refused, the record unchanged; --force replaces it and keeps the count
before=$(rcli GET confkv:tpl:sys | md5sum)
expect 1 create_again T create --redis "$URL" --name sys --text "$TMP/sys.txt"
grep -q "exists" "$TMP/create_again.err" || fail "create again: no clear message: $(cat "$TMP/create_again.err")"
[ "$(rcli GET confkv:tpl:sys | md5sum)" = "$before" ] || fail "create again changed the record"
rcli ZINCRBY confkv:tpl-uses 3 sys > /dev/null
printf 'Tom had a big red ball.' > "$TMP/other.txt"
expect 0 create_force T create --redis "$URL" --name sys --text "$TMP/other.txt" --force
[ "$(rcli ZSCORE confkv:tpl-uses sys)" = 3 ] || fail "--force reset the use count"
expect 0 create_back T create --redis "$URL" --name sys --text "$TMP/sys.txt" --force
expect 0 create_two T create --redis "$URL" --name fewshot.v2 --text "$TMP/other.txt"

# ---- list --json (and the human form)
expect 0 list T list --redis "$URL" --json
py "$TMP/list.out" "$BYTES" <<'PY' || fail "list --json: $(cat "$TMP/list.out")"
import json, sys
t = {x["name"]: x for x in json.load(open(sys.argv[1]))["templates"]}
assert sorted(t) == ["fewshot.v2", "sys"], t
assert t["sys"]["uses"] == 3 and t["sys"]["bytes"] == int(sys.argv[2]) and t["sys"]["created_ms"] > 0, t
assert t["fewshot.v2"]["uses"] == 0 and t["fewshot.v2"]["bytes"] == 23, t
assert not t["sys"]["corrupt"] and not t["fewshot.v2"]["corrupt"], t
PY
expect 0 list_h T list --redis "$URL"
grep -q "^2 templates" "$TMP/list_h.out" || fail "list: no summary line: $(cat "$TMP/list_h.out")"

# ---- inspect, without and with the model
expect 0 inspect T inspect --redis "$URL" --name sys --json
py "$TMP/inspect.out" "$TMP/sys.txt" <<'PY' || fail "inspect --json: $(cat "$TMP/inspect.out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["name"] == "sys" and d["text"] == open(sys.argv[2]).read() and d["uses"] == 3, d
assert d["bytes"] == len(d["text"]) and d["created_ms"] > 0 and "tokens" not in d, d
PY
expect 0 inspect_model T inspect --redis "$URL" --name sys --json "${MODEL_ARGS[@]}"
py "$TMP/inspect_model.out" <<'PY' || fail "inspect --model: $(cat "$TMP/inspect_model.out")"
import json, re, sys
d = json.load(open(sys.argv[1]))
assert re.fullmatch("[0-9a-f]{16}", d["fingerprint"]), d
# stories260K: a context of 512, so 4 tokens a block; BOS + about 25 tokens.
assert d["block_size"] == 4 and 10 < d["tokens"] < 60, d
assert d["blocks_total"] == (d["tokens"] - 1) // d["block_size"], d
assert d["blocks_cached"] == 0, d
PY
expect 0 inspect_bs T inspect --redis "$URL" --name sys --json "${MODEL_ARGS[@]}" --block-size 8
py "$TMP/inspect_bs.out" <<'PY' || fail "inspect --block-size: $(cat "$TMP/inspect_bs.out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["block_size"] == 8 and d["blocks_total"] == (d["tokens"] - 1) // 8, d
PY
expect 1 inspect_missing T inspect --redis "$URL" --name nope
grep -q "no template 'nope'" "$TMP/inspect_missing.err" || fail "inspect missing: $(cat "$TMP/inspect_missing.err")"

# ---- corrupted records: garbage, a bad checksum, a record of another name, a hash
rcli SET confkv:tpl:bad "not a template" > /dev/null
printf 'confkv-template 1\nname tampered\ncreated_ms 1\nbytes 5\nxxh64 0000000000000000\n\nhello' |
  rcli -x SET confkv:tpl:tampered > /dev/null
rcli GET confkv:tpl:fewshot.v2 | head -c -1 | rcli -x SET confkv:tpl:renamed > /dev/null
rcli HSET confkv:tpl:hash a b > /dev/null
expect 0 list_corrupt T list --redis "$URL" --json
py "$TMP/list_corrupt.out" <<'PY' || fail "list with corrupt records: $(cat "$TMP/list_corrupt.out")"
import json, sys
t = {x["name"]: x for x in json.load(open(sys.argv[1]))["templates"]}
assert sorted(t) == ["bad", "fewshot.v2", "hash", "renamed", "sys", "tampered"], t
for n in ("bad", "hash", "renamed", "tampered"):
    assert t[n]["corrupt"] is True and t[n]["bytes"] is None and t[n]["problem"], t[n]
assert not t["sys"]["corrupt"] and not t["fewshot.v2"]["corrupt"], t
PY
expect 0 list_corrupt_h T list --redis "$URL"
grep -q "^bad .*CORRUPT" "$TMP/list_corrupt_h.out" || fail "list: bad not shown corrupt: $(cat "$TMP/list_corrupt_h.out")"
grep -q "(4 corrupt)" "$TMP/list_corrupt_h.out" || fail "list: summary: $(cat "$TMP/list_corrupt_h.out")"
for n in bad tampered renamed hash; do
  expect 1 "inspect_$n" T inspect --redis "$URL" --name "$n"
  grep -q "corrupt" "$TMP/inspect_$n.err" || fail "inspect $n: $(cat "$TMP/inspect_$n.err")"
done

# ---- delete, and again
expect 0 delete T delete --redis "$URL" --name sys --json
py "$TMP/delete.out" <<'PY' || fail "delete --json: $(cat "$TMP/delete.out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d == {"deleted": True, "name": "sys"}, d
PY
[ "$(rcli EXISTS confkv:tpl:sys)" = 0 ] || fail "delete left the record"
[ -z "$(rcli ZSCORE confkv:tpl-uses sys)" ] || fail "delete left the use count"
expect 1 delete_again T delete --redis "$URL" --name sys
grep -q "no template 'sys'" "$TMP/delete_again.err" || fail "delete again: $(cat "$TMP/delete_again.err")"
expect 0 delete_bad T delete --redis "$URL" --name bad

# ---- another key prefix; an ACL user
expect 0 prefix_create T create --redis "$URL" --key-prefix 'team*a:' --name sys --text "$TMP/sys.txt"
rcli EXISTS 'team*a:tpl:sys' | grep -qx 1 || fail "--key-prefix: no record under team*a:tpl:sys"
expect 0 prefix_list T list --redis "$URL" --key-prefix 'team*a:' --json
py "$TMP/prefix_list.out" <<'PY' || fail "--key-prefix list: $(cat "$TMP/prefix_list.out")"
import json, sys
assert [t["name"] for t in json.load(open(sys.argv[1]))["templates"]] == ["sys"]
PY
redis-cli -p "$PORT" ACL SETUSER tpluser on '>user-pass' '~*' '+@all' > /dev/null
expect 0 acl_list T list --redis "redis://tpluser:user-pass@127.0.0.1:$PORT/3" --json
grep -q '"fewshot.v2"' "$TMP/acl_list.out" || fail "ACL user: $(cat "$TMP/acl_list.out")"

# ---- errors
expect 2 bad_url T list --redis "http://127.0.0.1:$PORT"
grep -q "redis://" "$TMP/bad_url.err" || fail "bad URL: no clear message: $(cat "$TMP/bad_url.err")"
expect 2 bad_db T list --redis "redis://127.0.0.1:$PORT/notadb"
expect 1 wrong_pass T list --redis "redis://:wrong-pass-77@127.0.0.1:$PORT/3"
grep -q "AUTH" "$TMP/wrong_pass.err" || fail "wrong password: $(cat "$TMP/wrong_pass.err")"
grep -q "wrong-pass-77" "$TMP/wrong_pass.err" && fail "the password is in the message"
CLOSED=$(free_port)
expect 1 closed_redis T list --redis "redis://127.0.0.1:$CLOSED"
grep -q "cannot connect" "$TMP/closed_redis.err" || fail "closed port: $(cat "$TMP/closed_redis.err")"
expect 2 no_redis T list
expect 2 bad_name T create --redis "$URL" --name 'has space' --text "$TMP/sys.txt"
expect 2 no_text T create --redis "$URL" --name x
expect 2 unknown_flag T delete --redis "$URL" --name x --frobnicate
expect 2 unknown_sub T frobnicate
head -c $((1024 * 1024 + 1)) /dev/zero | tr '\0' 'a' > "$TMP/big.txt"
expect 1 too_big T create --redis "$URL" --name big --text "$TMP/big.txt"
[ "$(rcli EXISTS confkv:tpl:big)" = 0 ] || fail "an oversized text was stored"
expect 1 missing_file T create --redis "$URL" --name x --text "$TMP/no-such-file"
for s in create list inspect delete prewarm; do expect 0 "help_$s" T "$s" --help; done
expect 0 help T --help

# ---- prewarm: only its failure here (confkvd's endpoint is tested with confkvd)
expect 1 prewarm_closed T prewarm --http "127.0.0.1:$CLOSED" --name fewshot.v2 --timeout 5
grep -q "cannot connect to 127.0.0.1:$CLOSED" "$TMP/prewarm_closed.err" ||
  fail "prewarm to a closed port: $(cat "$TMP/prewarm_closed.err")"
expect 2 prewarm_bad T prewarm --http nonsense
expect 2 prewarm_no_http T prewarm

echo "templates_cli: ok"
