#!/usr/bin/env bash
# Byte-for-byte comparison of engine/jinja/jinja.c with Python's jinja2 (set up as
# Hugging Face's apply_chat_template sets it up) on real chat templates from
# llama.cpp's models/templates/, for every case in cases/.
#   oracle.sh JINJA_RENDER TESTS_JINJA_DIR
# Templates: $CONFKV_LLAMACPP_DIR/models/templates, default
# ${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}/llama.cpp (ops/scripts/install-llamacpp.sh).
# Exit 77 (skip) without them or without python3's jinja2.
set -u
render=$1
here=$2
llama=${CONFKV_LLAMACPP_DIR:-${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}/llama.cpp}
tdir=$llama/models/templates
if [ ! -d "$tdir" ]; then
  echo "SKIP: no llama.cpp templates in $tdir (run ops/scripts/install-llamacpp.sh)"
  exit 77
fi
if ! python3 -c 'import jinja2' 2>/dev/null; then
  echo "SKIP: python3 has no jinja2 (apt-get install python3-jinja2)"
  exit 77
fi
echo "jinja2 $(python3 -c 'import jinja2; print(jinja2.__version__)'), templates from $tdir"

templates=(
  meta-llama-Llama-3.1-8B-Instruct meta-llama-Llama-3.2-3B-Instruct meta-llama-Llama-3.3-70B-Instruct
  Qwen-Qwen2.5-7B-Instruct Qwen-Qwen3-0.6B HuggingFaceTB-SmolLM3-3B mistralai-Mistral-Nemo-Instruct-2407
  microsoft-Phi-3.5-mini-instruct google-gemma-2-2b-it
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
for t in "${templates[@]}"; do
  f=$tdir/$t.jinja
  if [ ! -f "$f" ]; then echo "FAIL $t: $f missing"; fail=$((fail + 1)); continue; fi
  for c in "$here"/cases/*.json; do
    name="$t $(basename "$c" .json)"
    if ! python3 "$here/oracle.py" "$f" "$c" >"$tmp/want" 2>"$tmp/want.err"; then
      echo "FAIL $name: the oracle failed: $(head -c 300 "$tmp/want.err")"; fail=$((fail + 1)); continue
    fi
    if ! "$render" "$f" "$c" >"$tmp/got" 2>"$tmp/got.err"; then
      echo "FAIL $name: $(head -c 300 "$tmp/got.err")"; fail=$((fail + 1)); continue
    fi
    if cmp -s "$tmp/want" "$tmp/got"; then
      pass=$((pass + 1))
      echo "ok   $name ($(wc -c <"$tmp/got") bytes$(grep -q '^ERROR chat_template_exception' "$tmp/got" && echo ', refused by the template'))"
    else
      fail=$((fail + 1))
      echo "FAIL $name: renderings differ"
      diff <(od -c "$tmp/want") <(od -c "$tmp/got") | head -20
    fi
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
