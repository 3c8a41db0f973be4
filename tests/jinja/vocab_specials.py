#!/usr/bin/env python3
"""Print a GGUF vocabulary's bos_token and eos_token texts as a JSON object,
read with this small reader of its own (not engine/format/gguf.c): the oracle side
of render_only.sh, which passes them to oracle.py as apply_chat_template
gets them from the tokenizer.

    vocab_specials.py FILE.gguf   ->  {"bos_token": "...", "eos_token": "..."}

A token id the file does not give, or one outside the vocabulary, is ""."""
import json
import struct
import sys

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def main():
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n]
        pos += n
        return s.decode("utf-8", "replace")

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(SCALAR[t])

    if data[:4] != b"GGUF":
        sys.exit("not a GGUF file")
    pos = 4
    take("<I")  # version
    take("<Q")  # tensors
    n_kv = take("<Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("<I"))
    toks = kv.get("tokenizer.ggml.tokens", [])

    def text(key):
        i = kv.get(key)
        return toks[i] if isinstance(i, int) and 0 <= i < len(toks) else ""

    print(json.dumps({"bos_token": text("tokenizer.ggml.bos_token_id"),
                      "eos_token": text("tokenizer.ggml.eos_token_id")}, ensure_ascii=False))


if __name__ == "__main__":
    main()
