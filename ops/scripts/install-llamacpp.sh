#!/usr/bin/env bash
# Fetch llama.cpp's source (for its chat templates, models/templates/) the
# way npm ships it: node-llama-cpp bundles a git bundle of the llama.cpp
# release it builds against. Nothing is copied into the repository; the
# oracle test (tests/jinja/oracle.sh) reads the templates from here.
#
# Usage: ops/scripts/install-llamacpp.sh
#   CONFKV_DEPS_DIR  where to put it (default $HOME/.cache/confkv)
# Idempotent: an existing npm install or clone is kept.
# Prints the two paths (npm prefix, llama.cpp checkout) on success.
set -euo pipefail

VERSION=3.21.1
DEPS="${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}"
NPM_DIR="$DEPS/npm"
LLAMA_DIR="$DEPS/llama.cpp"
BUNDLE="$NPM_DIR/node_modules/node-llama-cpp/llama/gitRelease.bundle"

command -v npm >/dev/null 2>&1 || { echo "install-llamacpp: npm not found" >&2; exit 1; }
command -v git >/dev/null 2>&1 || { echo "install-llamacpp: git not found" >&2; exit 1; }

mkdir -p "$NPM_DIR"
if [ -f "$BUNDLE" ]; then
  echo "install-llamacpp: node-llama-cpp@$VERSION already in $NPM_DIR"
else
  echo "install-llamacpp: npm install node-llama-cpp@$VERSION into $NPM_DIR"
  # --ignore-scripts: we want the bundle, not a build of llama.cpp.
  (cd "$NPM_DIR" && npm i -E --omit=optional --ignore-scripts --no-audit --no-fund \
      "node-llama-cpp@$VERSION" "@node-llama-cpp/linux-x64@$VERSION")
  [ -f "$BUNDLE" ] || { echo "install-llamacpp: $BUNDLE missing after npm install" >&2; exit 1; }
fi

if [ -f "$LLAMA_DIR/models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja" ]; then
  echo "install-llamacpp: llama.cpp already cloned in $LLAMA_DIR"
else
  rm -rf "$LLAMA_DIR.tmp"
  git -c advice.detachedHead=false clone -q "$BUNDLE" "$LLAMA_DIR.tmp"
  # A bundle's HEAD may be detached or absent from its refs: check out
  # whatever the bundle names as HEAD, else its first ref.
  head=$(git bundle list-heads "$BUNDLE" | awk '$2=="HEAD"{print $1; exit}')
  [ -n "$head" ] || head=$(git bundle list-heads "$BUNDLE" | awk 'NR==1{print $1}')
  git -C "$LLAMA_DIR.tmp" -c advice.detachedHead=false checkout -q "$head"
  rm -rf "$LLAMA_DIR"
  mv "$LLAMA_DIR.tmp" "$LLAMA_DIR"
fi

echo "npm:       $NPM_DIR"
echo "llama.cpp: $LLAMA_DIR"
echo "templates: $LLAMA_DIR/models/templates"
