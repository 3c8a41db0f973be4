#!/usr/bin/env bash
# The tree's habits, checked: every C/CUDA source formatted as .clang-format
# says (clang-format --dry-run --Werror), the engine's include rules
# (ops/scripts/check_includes.py), and cppcheck's warning,
# performance and portability checks clean (findings that are false
# positives carry an inline `cppcheck-suppress` with the reason beside it).
# Usage: ops/scripts/lint.sh [--fix]   (--fix: reformat the files in place)
# Needs clang-format and cppcheck (ops/scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
fix=0
[ "${1:-}" = --fix ] && fix=1
mapfile -t src < <(git ls-files '*.c' '*.h' '*.cu' | grep -v '^tests/fuzz/\(corpus\|regress\)/')
if [ "$fix" = 1 ]; then
  clang-format -i "${src[@]}"
  echo "lint: formatted ${#src[@]} files"
  exit 0
fi
t0=$SECONDS
if ! clang-format --dry-run --Werror "${src[@]}" 2> /tmp/confkv-format.$$; then
  head -40 /tmp/confkv-format.$$ >&2
  echo "lint: $(grep -c 'error:' /tmp/confkv-format.$$) lines differ from .clang-format (ops/scripts/lint.sh --fix)" >&2
  rm -f /tmp/confkv-format.$$
  exit 1
fi
rm -f /tmp/confkv-format.$$
echo "lint: clang-format clean (${#src[@]} files, $((SECONDS - t0)) s)"
# The engine's include rules (engine/README.md): which folder may include which.
python3 ops/scripts/check_includes.py
t0=$SECONDS
# C sources only (the .cu files are C++ for nvcc); -j over the two cores.
mapfile -t inc < <(find engine -type d | sort | sed 's/^/-I/')
cppcheck --enable=warning,performance,portability --std=c11 --inline-suppr --error-exitcode=1 -q \
  --suppress=missingIncludeSystem -j "$(nproc)" "${inc[@]}" -I service -I tests engine service tests
echo "lint: cppcheck clean ($((SECONDS - t0)) s)"
