#!/usr/bin/env bash
# The include rules (engine/README.md) hold on this tree, and the check
# fails on a tree that breaks them: a copy of engine/, service/ and
# kernels/ with one forbidden include of each sort (a folder reaching up,
# the engine reaching a network library, a folder the rules do not list).
# Usage: tests/ops/include_rules.sh SOURCE_DIR
set -euo pipefail
src=$1
check=$src/ops/scripts/check_includes.py
python3 "$check" --root "$src"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$src/engine" "$src/service" "$src/kernels" "$tmp/"
expect_fail() { # what, then the message the check must print
  if python3 "$check" --root "$tmp" >"$tmp/out" 2>&1; then
    echo "include_rules: the check passed a tree with $1" >&2
    exit 1
  fi
  grep -qF -- "$2" "$tmp/out" || { echo "include_rules: no '$2' in:" >&2; cat "$tmp/out" >&2; exit 1; }
  echo "include_rules: refused $1"
}
printf '#include "engine.h"\n' >>"$tmp/engine/format/quant.c"
expect_fail "format/ including core/" 'engine/format/quant.c:'
cp "$src/engine/format/quant.c" "$tmp/engine/format/quant.c"
printf '#include <hiredis/hiredis.h>\n' >>"$tmp/engine/kv/tier.c"
expect_fail "the engine including hiredis" '<hiredis/hiredis.h>: the engine uses no network'
cp "$src/engine/kv/tier.c" "$tmp/engine/kv/tier.c"
printf '#include "cpu_qdot.h"\n' >>"$tmp/service/svc_job.c"
expect_fail "the service including the CPU backend's kernels" 'service/svc_job.c:'
cp "$src/service/svc_job.c" "$tmp/service/svc_job.c"
mkdir "$tmp/engine/extra" && printf 'int x;\n' >"$tmp/engine/extra/x.c"
expect_fail "a folder missing from the rules" 'engine/extra/: folder has no line'
rm -r "$tmp/engine/extra"
python3 "$check" --root "$tmp" >/dev/null
echo "include_rules: 4 forbidden includes refused, the restored copy clean"
