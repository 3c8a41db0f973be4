#!/usr/bin/env python3
"""llama.cpp's tokenizer test suite against `confkv tokenize`.

For a vocabulary <name>, llama.cpp ships models/ggml-vocab-<name>.gguf (the
tokenizer only, no tensors) with .gguf.inp (the inputs, separated by
"\\n__ggml_vocab_test__\\n") and .gguf.out (the expected ids, one line of
space-separated ids per input). Its tests/test-tokenizer-0 tokenizes each
input with add_special = false and parse_special = false and compares the
ids exactly; this does the same through `confkv tokenize --no-bos`, one
process per case (TEXT is the whole argument, newlines and all).

Usage: vocab_suite.py CONFKV NAME...   Exit 0 all equal, 1 a mismatch,
77 (skip) when the llama.cpp checkout is absent (made by
ops/scripts/install-llamacpp.sh under $CONFKV_DEPS_DIR, default
~/.cache/confkv)."""
import os
import subprocess
import sys
import json

SEP = "\n__ggml_vocab_test__\n"


def read_cases(inp, out):
    raw = open(inp, "rb").read().decode("utf-8", "surrogateescape")
    # split as test-tokenizer-0 does: a separator after the last case leaves
    # nothing behind it
    texts, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    want = [[int(x) for x in line.split()] for line in open(out).read().split("\n")]
    if want and want[-1] == [] and len(want) == len(texts) + 1:
        want.pop()  # the file's final newline
    if len(want) != len(texts):
        raise SystemExit("%s: %d inputs but %d outputs" % (inp, len(texts), len(want)))
    return list(zip(texts, want))


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    confkv, names = sys.argv[1], sys.argv[2:]
    deps = os.environ.get("CONFKV_DEPS_DIR", os.path.expanduser("~/.cache/confkv"))
    models = os.path.join(deps, "llama.cpp", "models")
    if not os.path.isdir(models):
        print("SKIP: no llama.cpp checkout at %s (run ops/scripts/install-llamacpp.sh)" % models)
        return 77
    failed = total = 0
    for name in names:
        base = os.path.join(models, "ggml-vocab-%s.gguf" % name)
        if not os.path.exists(base + ".inp"):
            print("SKIP: %s has no .inp/.out" % base)
            return 77
        cases = read_cases(base + ".inp", base + ".out")
        bad = 0
        for text, want in cases:
            arg = text.encode("utf-8", "surrogateescape")
            if b"\0" in arg:
                print("%s: a case holds a NUL byte, which argv cannot carry" % name)
                return 1
            p = subprocess.run([confkv, "tokenize", "--model", base, "--no-bos", "--", arg],
                               capture_output=True)
            got = None
            if p.returncode == 0:
                got = json.loads(p.stdout.decode())
            if got != want:
                bad += 1
                print("FAIL %s: %r\n  want %s\n  got  %s %s" %
                      (name, text, want, got, p.stderr.decode().strip()))
        total += len(cases)
        failed += bad
        print("%s: %d/%d cases equal" % (name, len(cases) - bad, len(cases)))
    print("all: %d/%d cases equal" % (total - failed, total))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
