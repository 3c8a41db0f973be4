#!/usr/bin/env bash
# Byte-for-byte comparison of engine/jinja/jinja.c with Python's jinja2 (set up as
# Hugging Face's apply_chat_template sets it up) on real chat templates from
# llama.cpp's models/templates/, for every case in cases/.
#   oracle.sh JINJA_RENDER TESTS_JINJA_DIR
# Templates: $CONFKV_LLAMACPP_DIR/models/templates, default
# ${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}/llama.cpp (ops/scripts/install-llamacpp.sh).
# Every template of that directory, on every case: the same bytes, a
# refusal by the template (raise_exception) included; where jinja2 itself
# fails (survey.sh says why), ours must fail too.
# Exit 77 (skip) without them or without python3's jinja2.
set -u
render=$1
here=$2
. "$here/lib.sh" # llama, tdir; exit 77 without them or jinja2
echo "jinja2 $(python3 -c 'import jinja2; print(jinja2.__version__)'), templates from $tdir"

date=2024-07-26
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
files=()
for f in "$tdir"/*.jinja; do files+=("$f"); done
[ "${#files[@]}" -gt 0 ] || { echo "FAIL: no templates in $tdir"; exit 1; }
cases=("$here"/cases/*.json)
# one jinja2 process renders them all: $tmp/<template>/<case>.out, or .fail with the reason
python3 "$here/oracle.py" --each "$tmp" "$date" "${files[@]}" -- "${cases[@]}" || { echo "FAIL: oracle.py"; exit 1; }
for f in "${files[@]}"; do
  t=$(basename "$f" .jinja)
  for c in "${cases[@]}"; do
    cn=$(basename "$c" .json)
    name="$t $cn"
    want=$tmp/$t/$cn.out
    if [ ! -f "$want" ]; then
      why=$(head -c 120 "$tmp/$t/$cn.fail")
      if "$render" "$f" "$c" "$date" >"$tmp/got" 2>"$tmp/got.err"; then
        echo "FAIL $name: the oracle failed ($why), ours rendered"; fail=$((fail + 1))
      else
        pass=$((pass + 1)); echo "ok   $name (fails in both: $why)"
      fi
      continue
    fi
    if ! "$render" "$f" "$c" "$date" >"$tmp/got" 2>"$tmp/got.err"; then
      echo "FAIL $name: $(head -c 300 "$tmp/got.err")"; fail=$((fail + 1)); continue
    fi
    if cmp -s "$want" "$tmp/got"; then
      pass=$((pass + 1))
      echo "ok   $name ($(wc -c <"$tmp/got") bytes$(grep -q '^ERROR chat_template_exception' "$tmp/got" && echo ', refused by the template'))"
    else
      fail=$((fail + 1))
      echo "FAIL $name: renderings differ"
      diff <(od -c "$want") <(od -c "$tmp/got") | head -20
    fi
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
