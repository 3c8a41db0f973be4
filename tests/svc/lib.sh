# Shared helpers of the service tests (sourced). Expects: CONFKV, CONFKVD
# (binaries) and MODELS (the shared models folder) set by the caller.
set -euo pipefail
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if [ "${KEEP_TMP:-}" = 1 ]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$TMP"/*.err; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done; exit 1; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KMSG="python3 $HERE/kmsg.py"
MODEL_ARGS=(--model "$MODELS/stories260K.bin" --tokenizer "$MODELS/tok512.bin")

# wait_file PATH SECONDS
wait_file() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do [ -s "$1" ] && return 0; sleep 0.1; done
  return 1
}
json_get() { python3 -c "import json,sys;print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

# start_confkvd NAME ARGS...: starts confkvd, waits for its ready file;
# sets BOOT and HTTP; the pid is appended to PIDS and left in LAST_PID.
start_confkvd() {
  local name=$1; shift
  rm -f "$TMP/$name.ready"
  "$CONFKVD" --ready-file "$TMP/$name.ready" --http-port 0 --metrics-interval-s 1 "${MODEL_ARGS[@]}" "$@" \
    > "$TMP/$name.out" 2> "$TMP/$name.err" &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
  wait_file "$TMP/$name.ready" 60 || fail "$name: no ready file within 60 s"
  BOOT=$(json_get "$TMP/$name.ready" bootstrap_servers)
  HTTP=$(json_get "$TMP/$name.ready" http)
}

# start_broker: a standalone `confkv broker`; sets BOOT.
start_broker() {
  rm -f "$TMP/broker.ready"
  "$CONFKV" broker --partitions "${1:-4}" --ready-file "$TMP/broker.ready" > "$TMP/broker.out" 2> "$TMP/broker.err" &
  BROKER_PID=$!
  PIDS+=("$BROKER_PID")
  wait_file "$TMP/broker.ready" 30 || fail "broker: no ready file"
  BOOT=$(json_get "$TMP/broker.ready" bootstrap_servers)
}

# consume TOPIC OUTFILE: everything in TOPIC so far (kcat, length-prefixed records).
consume() {
  kcat -C -b "$BOOT" -t "$1" -o beginning -e -q -f '%S %K %k%s' > "$2" 2> "$TMP/kcat.err" || true
}

# wait_count TOPIC N SECONDS: until TOPIC holds N records (by kcat's count).
wait_count() {
  local i n
  for ((i = 0; i < $3; i++)); do
    n=$(kcat -C -b "$BOOT" -t "$1" -o beginning -e -q -f 'x\n' 2>/dev/null | wc -l)
    [ "$n" -ge "$2" ] && return 0
    sleep 1
  done
  echo "only $n of $2 records in $1" >&2
  return 1
}

http_get() { curl -s -o "$2" -w '%{http_code}' "http://$HTTP$1" || true; }

# A real redis-server on a free loopback port (skip the test when absent):
# start_redis (again: same port, after a kill), rcli ARGS, metric NAME (from
# confkvd's /metrics at $HTTP), info_stat KEY.
need_redis() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null || { echo "redis-server missing: skip"; exit 77; }
}
REDIS_PORT=$(python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
start_redis() {
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --dir "$TMP" > "$TMP/redis.log" 2>&1 &
  REDIS_PID=$!
  PIDS+=("$REDIS_PID")
  for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && return 0; sleep 0.1; done
  fail "redis-server did not start"
}
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }
# metric NAME{labels}: the sample's value; an engine series (labelled model="...",
# one sample a model) is summed over the models, so the names below need no model label.
metric() {
  curl -s "http://$HTTP/metrics" | awk -v m="$1" '
    { n = $1; sub(/model="[^"]*",?/, "", n); sub(/\{\}/, "", n) }
    n == m { s += $2; found = 1 }
    END { if (found) printf "%.15g\n", s }'
}
info_stat() { rcli INFO stats | tr -d '\r' | awk -F: -v k="$1" '$1 == k {print $2}'; }

