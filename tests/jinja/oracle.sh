#!/usr/bin/env bash
# Byte-for-byte comparison of engine/jinja/jinja.c with Python's jinja2 (set up as
# Hugging Face's apply_chat_template sets it up) on real chat templates from
# llama.cpp's models/templates/, for every case in cases/.
#   oracle.sh JINJA_RENDER TESTS_JINJA_DIR
# Templates: $CONFKV_LLAMACPP_DIR/models/templates, default
# ${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}/llama.cpp (ops/scripts/install-llamacpp.sh).
# The list: every template of that directory that jinja2 renders on every
# case (survey.sh reports the others and why). A refusal by the template
# (raise_exception) is compared too.
# Exit 77 (skip) without them or without python3's jinja2.
set -u
render=$1
here=$2
. "$here/lib.sh" # llama, tdir; exit 77 without them or jinja2
echo "jinja2 $(python3 -c 'import jinja2; print(jinja2.__version__)'), templates from $tdir"

templates=(
  Apertus-8B-Instruct Apriel-1.6-15b-Thinker-fixed Bielik-11B-v3.0-Instruct ByteDance-Seed-OSS Cohere2MoE
  CohereForAI-c4ai-command-r7b-12-2024-tool_use GLM-4.6 GLM-4.7-Flash GigaChat3-10B-A1.8B GigaChat3.1-10B-A1.8B
  HuggingFaceTB-SmolLM3-3B Kimi-K3 LFM2-8B-A1B LFM2.5-8B-A1B LFM2.5-Instruct MiMo-VL MiniMax-M1 MiniMax-M2
  MiniMax-M3 Mistral-Small-3.2-24B-Instruct-2506 NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 NVIDIA-Nemotron-Nano-v2
  Qwen-QwQ-32B Qwen-Qwen2.5-7B-Instruct Qwen-Qwen3-0.6B Qwen3-Coder Qwen3.5-4B Reka-Edge StepFun3.5-Flash
  deepseek-ai-DeepSeek-R1-Distill-Llama-8B deepseek-ai-DeepSeek-R1-Distill-Qwen-32B deepseek-ai-DeepSeek-V3.1
  deepseek-ai-DeepSeek-V3.2 deepseek-ai-DeepSeek-V4-Flash-0731 deepseek-ai-DeepSeek-V4 google-gemma-2-2b-it
  google-gemma-4-31B-it-interleaved google-gemma-4-31B-it ibm-granite-granite-3.3-2B-Instruct
  ibm-granite-granite-4.0 ibm-granite-granite-4.1 llama-cpp-rwkv-world meetkai-functionary-medium-v3.1
  meta-llama-Llama-3.1-8B-Instruct meta-llama-Llama-3.2-3B-Instruct meta-llama-Llama-3.3-70B-Instruct
  microsoft-Phi-3.5-mini-instruct mistralai-Ministral-3-14B-Reasoning-2512 mistralai-Mistral-Nemo-Instruct-2407
  moonshotai-Kimi-K2 muse-glimmer openai-gpt-oss-120b openbmb-MiniCPM5-1B poolside-Laguna-S-2.1
  poolside-Laguna-XS-2.1 poolside-Laguna-XS.2 tencent-Hy3 unsloth-Apriel-1.5 unsloth-mistral-Devstral-Small-2507
  upstage-Solar-Open-100B
)
date=2024-07-26
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
files=()
for t in "${templates[@]}"; do
  if [ -f "$tdir/$t.jinja" ]; then files+=("$tdir/$t.jinja"); else echo "FAIL $t: $tdir/$t.jinja missing"; fail=$((fail + 1)); fi
done
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
      echo "FAIL $name: the oracle failed: $(head -c 300 "$tmp/$t/$cn.fail")"; fail=$((fail + 1)); continue
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
