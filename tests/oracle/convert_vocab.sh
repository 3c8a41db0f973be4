#!/usr/bin/env bash
# A re-typed model keeps its tokenizer: synth a model on llama.cpp's qwen2
# (byte-level BPE) and llama-spm vocabularies, convert it to q8_0 and f16, and
# every file must tokenize llama.cpp's test inputs exactly as the vocabulary
# file itself does (so a convert that rebuilt the keys as SentencePiece's fails).
# Usage: convert_vocab.sh CONFKV     Skips (77) without the llama.cpp checkout.
set -euo pipefail
C=$1
M=${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}/llama.cpp/models
[ -f "$M/ggml-vocab-qwen2.gguf" ] || { echo "SKIP: no $M (ops/scripts/install-llamacpp.sh)"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for v in qwen2 llama-spm; do
  V=$M/ggml-vocab-$v.gguf
  "$C" synth --dim 64 --layers 1 --heads 4 --kv-heads 2 --ffn 128 --ctx 128 --vocab-from "$V" --tied \
    -o "$T/m.gguf" --type f32 --seed 3 2>/dev/null
  "$C" tokenize --model "$V" --parse-special --file "$V.inp" >"$T/want"
  for ty in q8_0 f16; do
    "$C" convert --from gguf "$T/m.gguf" -o "$T/c.gguf" --type "$ty" 2>/dev/null
    "$C" tokenize --model "$T/c.gguf" --parse-special --file "$V.inp" >"$T/got"
    cmp -s "$T/want" "$T/got" || { echo "FAIL: $v converted to $ty tokenizes differently"; diff "$T/want" "$T/got" | head; exit 1; }
  done
  echo "ok: $v: $(wc -l <"$T/want") lines tokenize the same after convert to q8_0 and f16"
done
