#!/usr/bin/env bash
# compose.yaml is valid: `docker compose config -q` (skipped, exit 77,
# where the docker CLI or its compose plugin is missing).
# Usage: compose.sh REPO_ROOT
set -euo pipefail
cd "$1"
command -v docker >/dev/null 2>&1 || { echo "no docker CLI: skip"; exit 77; }
docker compose version >/dev/null 2>&1 || { echo "no docker compose plugin: skip"; exit 77; }
docker compose -f compose.yaml config -q
echo "PASS compose"
