#!/usr/bin/env bash
# Every template of llama.cpp's models/templates/ through both renderers:
# jinja2 as Hugging Face sets it up (oracle.py) and engine/jinja
# (jinja_render), for every case in cases/. A report, not a test: it prints
# one line per template and the counts, and exits 0 whatever it finds
# (oracle.sh is the test, on the templates that match).
#   survey.sh JINJA_RENDER TESTS_JINJA_DIR [TEMPLATE_NAME...]
# Per case: match (the same bytes, a template's refusal included), differ,
# ours refused (jinja_render failed where jinja2 rendered), oracle fails
# (jinja2 itself cannot render it: the reason, and whether ours rendered).
# A template is "match" when every case matches; otherwise it takes its
# worst case's status, in the order differ, ours refused, oracle fails.
# Templates: as oracle.sh. Set SURVEY_KEEP=DIR to keep both renderings.
set -u
render=$1
here=$2
shift 2
. "$here/lib.sh" # llama, tdir; exit 77 without them or jinja2
date=2024-07-26
tmp=${SURVEY_KEEP:-$(mktemp -d)}
mkdir -p "$tmp"
[ -n "${SURVEY_KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT

if [ $# -gt 0 ]; then
  tpls=()
  for n in "$@"; do tpls+=("$tdir/$n.jinja"); done
else
  tpls=("$tdir"/*.jinja)
fi
cases=("$here"/cases/*.json)
python3 "$here/oracle.py" --each "$tmp/want" "$date" "${tpls[@]}" -- "${cases[@]}"
echo "jinja2 $(python3 -c 'import jinja2; print(jinja2.__version__)'), ${#tpls[@]} templates from $tdir," \
  "${#cases[@]} cases"

n_match=0 n_differ=0 n_refused=0 n_oracle=0
for f in "${tpls[@]}"; do
  t=$(basename "$f" .jinja)
  mkdir -p "$tmp/got/$t"
  worst=0 notes=""
  for c in "${cases[@]}"; do
    cn=$(basename "$c" .json)
    got=$tmp/got/$t/$cn
    "$render" "$f" "$c" "$date" >"$got.out" 2>"$got.err"
    ours=$?
    if [ -f "$tmp/want/$t/$cn.fail" ]; then
      why=$(head -c 160 "$tmp/want/$t/$cn.fail")
      if [ $ours -eq 0 ]; then what="ours renders"; else what="ours fails too"; fi
      notes+="    $cn: oracle fails ($why); $what"$'\n'
      [ $worst -lt 1 ] && worst=1
    elif [ $ours -ne 0 ]; then
      notes+="    $cn: ours refused: $(sed 's/^jinja_render: //' "$got.err" | head -c 200)"$'\n'
      [ $worst -lt 2 ] && worst=2
    elif ! cmp -s "$tmp/want/$t/$cn.out" "$got.out"; then
      at=$(cmp "$tmp/want/$t/$cn.out" "$got.out" 2>&1 | sed -n 's/.*differ: byte \([0-9]*\).*/\1/p')
      notes+="    $cn: differ at byte ${at:-EOF} ($(wc -c <"$tmp/want/$t/$cn.out") bytes wanted,"
      notes+=" $(wc -c <"$got.out") got)"$'\n'
      worst=3
    fi
  done
  case $worst in
  0) n_match=$((n_match + 1)); echo "match        $t" ;;
  1) n_oracle=$((n_oracle + 1)); echo "oracle-fails $t" ;;
  2) n_refused=$((n_refused + 1)); echo "refused      $t" ;;
  3) n_differ=$((n_differ + 1)); echo "DIFFER       $t" ;;
  esac
  printf '%s' "$notes"
done
echo "${#tpls[@]} templates: $n_match match, $n_differ differ, $n_refused ours refused, $n_oracle oracle fails"
