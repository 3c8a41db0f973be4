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
  prometheus curl             # promtool checks /metrics in the service tests; curl fetches it
  gnuplot-nox                 # plots in docs/BENCHMARKS.md
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
