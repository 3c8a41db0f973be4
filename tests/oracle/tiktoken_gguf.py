#!/usr/bin/env python3
"""A llama.cpp-style BPE vocabulary GGUF from tiktoken's o200k_base ranks.

The ranks come from the npm package js-tiktoken (installed by
ops/scripts/install-deps.sh under $CONFKV_DEPS_DIR/npm-tiktoken). The file is
what llama.cpp's converter makes of a tiktoken vocabulary: tokenizer.ggml.model
"gpt2", each token's bytes in GPT-2's byte-to-unicode alphabet, id = rank, and
the merges rebuilt from the ranks: for each token of two bytes or more, the
pair that BPE over its bytes ends in when it may use only lower ranks. Ids
the ranks leave free up to the last special token are control tokens
"<|reserved_ID|>"; a few control tokens follow for the BOS keys of each
pre-tokenizer (below). No tensors: a vocab-only file, as llama.cpp's
models/ggml-vocab-*.gguf.

Usage: tiktoken_gguf.py PRE OUT.gguf   (PRE: gpt-4o, tekken or glm4)
Exit 0, 1 on an error, 77 when js-tiktoken is not installed."""
import base64
import json
import os
import struct
import sys

EXTRA = ["<s>", "[gMASK]", "<|user|>", "<|observation|>"]  # after o200k's specials

T_U32, T_F32, T_BOOL, T_STR, T_ARR, T_I32 = 4, 6, 7, 8, 9, 5
NORMAL, CONTROL = 1, 3


def ranks_path():
    deps = os.environ.get("CONFKV_DEPS_DIR", os.path.expanduser("~/.cache/confkv"))
    return os.path.join(deps, "npm-tiktoken", "node_modules", "js-tiktoken", "dist", "ranks",
                        "o200k_base.js")


def load_ranks(path):
    """(bytes -> rank, special text -> id) from js-tiktoken's ranks module: an
    ES module exporting {pat_str, special_tokens, bpe_ranks}, where bpe_ranks
    is lines of "<tag> <first rank> <base64 token> <base64 token> ..."."""
    src = open(path, encoding="utf-8").read()
    d = json.loads(src[src.index("{"):src.rindex("}") + 1])
    ranks = {}
    for line in d["bpe_ranks"].split("\n"):
        if not line:
            continue
        parts = line.split(" ")
        first = int(parts[1])
        for i, tok in enumerate(parts[2:]):
            ranks[base64.b64decode(tok)] = first + i
    return ranks, d["special_tokens"]


def byte_to_unicode():
    """GPT-2's map of the 256 bytes to printable characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def merge_of(ranks, token, rank):
    """The last merge BPE makes on token's bytes with ranks below rank."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < rank and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts


def build(ranks, specials):
    """(tokens, types, merges) in id order."""
    n = max(max(ranks.values()), max(specials.values())) + 1
    enc = byte_to_unicode()
    tokens, types = [None] * n, [CONTROL] * n
    for tok, r in ranks.items():
        tokens[r] = "".join(enc[b] for b in tok)
        types[r] = NORMAL
    for text, i in specials.items():
        tokens[i] = text
    for i in range(n):
        if tokens[i] is None:
            tokens[i] = "<|reserved_%d|>" % i
    tokens += EXTRA
    types += [CONTROL] * len(EXTRA)
    merges = []
    for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) < 2:
            continue
        parts = merge_of(ranks, tok, r)
        if len(parts) != 2:
            raise SystemExit("token %d (%r): BPE with lower ranks ends in %d parts" % (r, tok, len(parts)))
        merges.append("".join(enc[b] for b in parts[0]) + " " + "".join(enc[b] for b in parts[1]))
    return tokens, types, merges


def special_keys(pre, tokens):
    """The BOS-related keys a GGUF of this pre-tokenizer's models carries.
    gpt-4o: none (llama.cpp's BPE defaults: bos 11, no BOS added). tekken:
    Mistral's converter writes bos <s> (and llama.cpp adds BOS by default for
    tekken, so add_bos_token is left out to exercise that default). glm4:
    GLM-4's converter writes bos [gMASK], eot <|user|>, unk <|endoftext|>,
    eom <|observation|> and no add_bos_token."""
    idx = {t: i for i, t in enumerate(tokens)}
    eos = [("tokenizer.ggml.eos_token_id", T_U32, idx["<|endoftext|>"])]
    if pre == "gpt-4o":
        return eos
    if pre == "tekken":
        return eos + [("tokenizer.ggml.bos_token_id", T_U32, idx["<s>"])]
    if pre == "glm4":
        return eos + [("tokenizer.ggml.bos_token_id", T_U32, idx["[gMASK]"]),
                      ("tokenizer.ggml.eot_token_id", T_U32, idx["<|user|>"]),
                      ("tokenizer.ggml.unknown_token_id", T_U32, idx["<|endoftext|>"]),
                      ("tokenizer.ggml.eom_token_id", T_U32, idx["<|observation|>"])]
    raise SystemExit("unknown pre-tokenizer %r" % pre)


def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(t, v):
    if t == T_STR:
        return gguf_str(v)
    if t == T_ARR:
        et, items = v
        out = [struct.pack("<IQ", et, len(items))]
        out += [gguf_value(et, x) for x in items]
        return b"".join(out)
    return struct.pack({T_U32: "<I", T_I32: "<i", T_F32: "<f", T_BOOL: "<?"}[t], v)


def write_gguf(path, kvs):
    """A GGUF v3 file of these (key, type, value) and no tensors (the layout
    is engine/format/gguf.h's header comment)."""
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)))
        for k, t, v in kvs:
            f.write(gguf_str(k) + struct.pack("<I", t) + gguf_value(t, v))


def vocab_kvs(pre, tokens, types, merges):
    # the hyperparameters llama.cpp reads before the vocabulary, even vocab-only
    kvs = [("general.architecture", T_STR, "llama"),
           ("general.name", T_STR, "o200k_base-" + pre),
           ("llama.block_count", T_U32, 1),
           ("llama.context_length", T_U32, 4096),
           ("llama.embedding_length", T_U32, 64),
           ("llama.feed_forward_length", T_U32, 128),
           ("llama.attention.head_count", T_U32, 1),
           ("llama.attention.head_count_kv", T_U32, 1),
           ("llama.rope.freq_base", T_F32, 10000.0),
           ("llama.attention.layer_norm_rms_epsilon", T_F32, 1e-5),
           ("tokenizer.ggml.model", T_STR, "gpt2"),
           ("tokenizer.ggml.pre", T_STR, pre),
           ("tokenizer.ggml.tokens", T_ARR, (T_STR, tokens)),
           ("tokenizer.ggml.token_type", T_ARR, (T_I32, types)),
           ("tokenizer.ggml.merges", T_ARR, (T_STR, merges))]
    return kvs + special_keys(pre, tokens)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    pre, out = sys.argv[1], sys.argv[2]
    path = ranks_path()
    if not os.path.exists(path):
        print("SKIP: no js-tiktoken at %s (run ops/scripts/install-deps.sh)" % path)
        return 77
    tokens, types, merges = build(*load_ranks(path))
    write_gguf(out, vocab_kvs(pre, tokens, types, merges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
