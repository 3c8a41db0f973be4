#!/usr/bin/env bash
# `confkv generate --messages F --render-only` against the Jinja oracle:
# for every template of llama.cpp's models/templates/ and every case in
# cases/, the CLI renders with a vocab-only GGUF (llama.cpp's
# models/ggml-vocab-*.gguf: no tensors, so no weights can be loaded) and
# --chat-template; oracle.py renders the same messages with the same
# bos_token/eos_token, which vocab_specials.py reads from that vocabulary
# with a GGUF reader of its own. The bytes must be equal.
#   render_only.sh CONFKV TESTS_JINJA_DIR
# Cases keep what `--messages` carries (a job's fields): role, content,
# add_generation_prompt and tools. A template without a system role (a probe
# render with jinja2 decides, as llama.cpp's rule says) gets the chat merged
# as llama.cpp merges it before the oracle renders it, and the CLI must say
# so on stderr. Where jinja2 itself fails (Hermes' tool_use templates
# without tools, firefunction without its functions variable, ...), the CLI
# must fail with chat_template_error.
# Exit 77 (skip) without the llama.cpp checkout or python3's jinja2.
set -u
confkv=$1
here=$2
. "$here/lib.sh" # llama, tdir; exit 77 without them or jinja2
# template : the vocabulary it is rendered with (Gemma 2 with the SentencePiece
# one: llama.cpp ships no Gemma vocabulary of a tokenizer model confkv reads)
pairs=(
  meta-llama-Llama-3.1-8B-Instruct:llama-bpe meta-llama-Llama-3.2-3B-Instruct:llama-bpe
  meta-llama-Llama-3.3-70B-Instruct:llama-bpe Qwen-Qwen2.5-7B-Instruct:qwen2 Qwen-Qwen3-0.6B:qwen2
  HuggingFaceTB-SmolLM3-3B:gpt-2 mistralai-Mistral-Nemo-Instruct-2407:llama-spm
  microsoft-Phi-3.5-mini-instruct:phi-3 google-gemma-2-2b-it:llama-spm
  NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use:llama-bpe NousResearch-Hermes-3-Llama-3.1-8B-tool_use:llama-bpe
  Qwen-QwQ-32B:qwen2 Qwen3-Coder:qwen2 ibm-granite-granite-3.3-2B-Instruct:gpt-2
)
# Every other template in the bundle, with the vocabulary of its family
# where the bundle has one and Llama 3's otherwise: both sides see that
# vocabulary's bos_token and eos_token, so the comparison is exact either way.
for f in "$tdir"/*.jinja; do
  t=$(basename "$f" .jinja)
  case " ${pairs[*]} " in *" $t:"*) continue ;; esac
  case $t in
    *gemma-4* | *gemma4* | *Gemma-4*) v=gemma-4 ;;
    *Qwen3.5* | *qwen3.5* | *Qwen3_5* | *qwen35*) v=qwen35 ;;
    *Qwen* | *qwen*) v=qwen2 ;;
    *Phi-3* | *phi-3*) v=phi-3 ;;
    *) v=llama-bpe ;;
  esac
  pairs+=("$t:$v")
done
date=2024-07-26
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
for p in "${pairs[@]}"; do
  t=${p%%:*} v=${p##*:}
  f=$tdir/$t.jinja vocab=$llama/models/ggml-vocab-$v.gguf
  if [ ! -f "$f" ] || [ ! -f "$vocab" ]; then echo "FAIL $t: $f or $vocab missing"; fail=$((fail + 1)); continue; fi
  if ! python3 "$here/vocab_specials.py" "$vocab" >"$tmp/specials.json"; then
    echo "FAIL $t: cannot read $vocab"; fail=$((fail + 1)); continue
  fi
  for c in "$here"/cases/*.json; do
    # string arguments of a tool call: once cut to what --messages carries
    # (role and content), the same chat as tool_calls
    [ "$(basename "$c")" = tool_calls_str.json ] && continue
    name="$t ($v) $(basename "$c" .json)"
    python3 - "$c" "$tmp/specials.json" "$tmp/msgs.json" "$tmp/vars.json" "$f" "$here" "$tmp/merged" <<'PY' ||
import json, sys
case, specials = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
sys.path.insert(0, sys.argv[6])
import oracle
msgs = [{"role": m["role"], "content": m["content"]} for m in case["messages"]]
agp = case.get("add_generation_prompt", True)
cli = {"messages": msgs, "add_generation_prompt": agp}
if "tools" in case:
    cli["tools"] = case["tools"]
json.dump(cli, open(sys.argv[3], "w"))
# llama.cpp's rule for a template without a system role, decided here with
# jinja2: a probe render of a system and a user message (tools an empty
# list) that fails or lacks the system content means none; then a leading
# system message's content and "\n" go before the next message's, and the
# system message is dropped
env = oracle.make_env(oracle.parse_date("2024-01-01"))
source = open(sys.argv[5], encoding="utf-8").read()
probe = [{"role": "system", "content": "System message"}, {"role": "user", "content": "User message"}]
try:
    out = oracle.render(env, source, {"messages": probe, "tools": [], "add_generation_prompt": True, **specials})
    system_role = not out.startswith("ERROR chat_template_exception: ") and "System message" in out
except Exception:
    system_role = False
merged = ""
if not system_role and msgs and msgs[0]["role"] == "system":
    if len(msgs) > 1:
        msgs = [{"role": msgs[1]["role"], "content": msgs[0]["content"] + "\n" + msgs[1]["content"]}] + msgs[2:]
        merged = "system message merged into the next turn"
    else:
        msgs, merged = [], "system message dropped"
open(sys.argv[7], "w").write(merged)
json.dump({**cli, "messages": msgs, **specials}, open(sys.argv[4], "w"))
PY
      { echo "FAIL $name: cannot prepare the case"; fail=$((fail + 1)); continue; }
    if ! python3 "$here/oracle.py" "$f" "$tmp/vars.json" "$date" >"$tmp/want" 2>"$tmp/want.err"; then
      # jinja2 itself fails (Hermes' tool_use templates without tools walk
      # None): the CLI must fail too, with the template's error
      if "$confkv" generate --model "$vocab" --messages "$tmp/msgs.json" --chat-template "$f" --date "$date" \
          --render-only >"$tmp/got" 2>"$tmp/got.err"; then
        echo "FAIL $name: the oracle failed, the CLI rendered: $(tail -c 200 "$tmp/want.err")"; fail=$((fail + 1))
      elif grep -q 'chat_template_error' "$tmp/got.err"; then
        pass=$((pass + 1)); echo "ok   $name (fails in both: $(tail -n 1 "$tmp/want.err" | head -c 80))"
      else
        echo "FAIL $name: the oracle failed, the CLI's error differs: $(head -c 300 "$tmp/got.err")"; fail=$((fail + 1))
      fi
      continue
    fi
    if grep -q '^ERROR chat_template_exception: ' "$tmp/want"; then
      # the template refuses these messages: the CLI must refuse them too, with that kind
      if "$confkv" generate --model "$vocab" --messages "$tmp/msgs.json" --chat-template "$f" --date "$date" \
          --render-only >"$tmp/got" 2>"$tmp/got.err"; then
        echo "FAIL $name: the oracle refused, the CLI rendered"; fail=$((fail + 1))
      elif grep -q "chat_template_exception: $(sed 's/^ERROR chat_template_exception: //' "$tmp/want" | head -c 60)" "$tmp/got.err"; then
        pass=$((pass + 1)); echo "ok   $name (refused by the template, as in the oracle)"
      else
        echo "FAIL $name: refusals differ: $(head -c 300 "$tmp/got.err")"; fail=$((fail + 1))
      fi
      continue
    fi
    if ! "$confkv" generate --model "$vocab" --messages "$tmp/msgs.json" --chat-template "$f" --date "$date" \
        --render-only >"$tmp/got" 2>"$tmp/got.err"; then
      echo "FAIL $name: $(head -c 300 "$tmp/got.err")"; fail=$((fail + 1)); continue
    fi
    if [ -s "$tmp/merged" ] && ! grep -q "warning: $(cat "$tmp/merged")" "$tmp/got.err"; then
      fail=$((fail + 1)); echo "FAIL $name: no warning '$(cat "$tmp/merged")' on stderr: $(head -c 300 "$tmp/got.err")"
    elif [ ! -s "$tmp/merged" ] && [ -s "$tmp/got.err" ]; then
      fail=$((fail + 1)); echo "FAIL $name: unexpected stderr: $(head -c 300 "$tmp/got.err")"
    elif cmp -s "$tmp/want" "$tmp/got"; then
      pass=$((pass + 1)); echo "ok   $name ($(wc -c <"$tmp/got") bytes$([ -s "$tmp/merged" ] && echo ', system merged'))"
    else
      fail=$((fail + 1)); echo "FAIL $name: renderings differ"
      diff <(od -c "$tmp/want") <(od -c "$tmp/got") | head -20
    fi
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
