#!/usr/bin/env bash
# Quickstart: build confkv, start confkvd with its embedded Kafka broker on
# the shared stories260K model, submit a few jobs with `confkv submit --wait`,
# print their results, show where /metrics is, then stop confkvd.
# Usage: ops/scripts/quickstart.sh [BUILD_DIR]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
models=${CONFKV_SHARED_MODELS:-../shared/models}
[ -f "$models/stories260K.bin" ] || { echo "quickstart: $models/stories260K.bin not found (set CONFKV_SHARED_MODELS)" >&2; exit 1; }

if [ "${CONFKV_SKIP_DEPS:-}" != 1 ]; then
  echo "== checking dependencies (ops/scripts/install-deps.sh; CONFKV_SKIP_DEPS=1 skips)"
  bash ops/scripts/install-deps.sh
fi
echo "== building ($build)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target confkvd confkv >/dev/null

tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

echo "== starting confkvd --kafka-embedded"
"$build/service/confkvd" --kafka-embedded --http-port 0 --ready-file "$tmp/ready" \
  --model "$models/stories260K.bin" --tokenizer "$models/tok512.bin" 2> "$tmp/confkvd.log" &
pid=$!
for _ in $(seq 600); do [ -s "$tmp/ready" ] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
[ -s "$tmp/ready" ] || { echo "confkvd did not become ready:" >&2; tail "$tmp/confkvd.log" >&2; exit 1; }
boot=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['bootstrap_servers'])" "$tmp/ready")
http=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['http'])" "$tmp/ready")
echo "   Kafka bootstrap servers: $boot   (any client works, e.g. kcat -b $boot -t confkv.results -C)"

echo "== submitting 3 jobs with: confkv submit --brokers $boot --wait"
cat > "$tmp/jobs.jsonl" <<'J'
{"id": "hello-1", "prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}
{"id": "hello-2", "messages": [{"role": "user", "content": "Lily and her dog"}], "max_tokens": 40, "temperature": 0.8, "seed": 1}
{"id": "hello-3", "prompt": "The sun was", "max_tokens": 30, "temperature": 0, "return_confidence": false, "metadata": {"from": "quickstart"}}
J
"$build/service/confkv" submit --brokers "$boot" --file "$tmp/jobs.jsonl" --wait --timeout 120 > "$tmp/results.jsonl"
python3 - "$tmp/results.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print("   [%s] %s (%s, %d+%d tokens, %.0f ms): %s" % (r["id"], r["status"], r["finish_reason"],
          r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"], r["timings"]["total_ms"], r["text"].strip()))
PY
echo "== metrics: http://$http/metrics  (also /healthz, /readyz)"
curl -s "http://$http/metrics" | grep -E '^confkv_(jobs_total|tokens_total|ready)'
echo "== stopping confkvd (SIGTERM: drain, commit, exit 0)"
kill -TERM "$pid"; wait "$pid"; pid=
echo "== done. Full result JSON: confkv submit ... --wait prints one object per job."
