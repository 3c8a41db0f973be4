#!/usr/bin/env python3
"""A pre-tokenizer against llama.cpp's, on tiktoken's o200k_base vocabulary.

llama.cpp ships no vocab test for gpt-4o, tekken or glm4, so this makes one:
tiktoken_gguf.py writes o200k_base (from the npm package js-tiktoken) as a
vocab-only GGUF with tokenizer.ggml.pre = PRE; llamacpp_tokenize (llama.cpp's
own libllama, tests/llamacpp/) tokenizes every case of tok_pre_cases.txt,
and `confkv tokenize` must give the same ids, case for case:
  - without special tokens (llama_tokenize add_special false, --no-bos), as
    llama.cpp's test-tokenizer-0 does;
  - with them, on the first few cases: the BOS that each pre-tokenizer's
    defaults and the file's keys give (tekken adds one by default, glm4
    and gpt-4o do not).
Both with parse_special false.

tok_pre_cases.txt: one case a line, escapes \\n \\r \\t \\\\ \\s (a space,
for the ends of a line) and \\uXXXX.

Usage: tok_pre_suite.py CONFKV LLAMACPP_TOKENIZE PRE
Exit 0 all equal, 1 a mismatch, 77 (skip) without llama.cpp's library (the
harness was not built: LLAMACPP_TOKENIZE is "none") or without js-tiktoken."""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiktoken_gguf  # noqa: E402

N_SPECIAL = 12  # cases also checked with special tokens


def unescape(line):
    out, i = [], 0
    while i < len(line):
        c = line[i]
        if c != "\\" or i + 1 == len(line):
            out.append(c)
            i += 1
            continue
        e = line[i + 1]
        if e == "u":
            out.append(chr(int(line[i + 2:i + 6], 16)))
            i += 6
            continue
        out.append({"n": "\n", "r": "\r", "t": "\t", "s": " ", "\\": "\\"}[e])
        i += 2
    return "".join(out)


def read_cases():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tok_pre_cases.txt")
    with open(path, encoding="utf-8", newline="\n") as f:
        return [unescape(line.rstrip("\n")) for line in f if line.rstrip("\n")]


def oracle(harness, gguf, cases_bin, add_special):
    cmd = [harness] + (["--add-special"] if add_special else []) + [gguf, cases_bin]
    p = subprocess.run(cmd, capture_output=True)
    if p.returncode != 0:
        raise SystemExit("llamacpp_tokenize failed (%d): %s" % (p.returncode, p.stderr.decode()))
    lines = p.stdout.decode().split("\n")
    head = lines[0].split()
    return (int(head[1]), int(head[3])), [[int(x) for x in ln.split()] for ln in lines[1:-1]]


def confkv_ids(confkv, gguf, text, add_special):
    cmd = [confkv, "tokenize", "--model", gguf] + ([] if add_special else ["--no-bos"])
    p = subprocess.run(cmd + ["--", text.encode("utf-8")], capture_output=True)
    if p.returncode != 0:
        return None, p.stderr.decode().strip()
    return json.loads(p.stdout.decode()), ""


def confkv_file_ids(confkv, gguf, texts, tmp):
    """`confkv tokenize --no-bos --file` over texts (no line breaks in any):
    (ids, "") per text, or (None, the error) for every one when it fails."""
    path = os.path.join(tmp, "flat.txt")
    with open(path, "wb") as f:
        for t in texts:
            f.write(t.encode("utf-8") + b"\n")
    p = subprocess.run([confkv, "tokenize", "--model", gguf, "--no-bos", "--file", path], capture_output=True)
    lines = p.stdout.decode().split("\n")[:-1]
    if p.returncode != 0 or len(lines) != len(texts):
        return [(None, p.stderr.decode().strip() or "%d lines for %d cases" % (len(lines), len(texts)))] * len(texts)
    return [(json.loads(ln), "") for ln in lines]


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    confkv, harness, pre = sys.argv[1:]
    if harness == "none" or not os.path.exists(harness):
        print("SKIP: llamacpp_tokenize not built (no llama.cpp library; run "
              "ops/scripts/install-llamacpp.sh, then re-run cmake)")
        return 77
    ranks = tiktoken_gguf.ranks_path()
    if not os.path.exists(ranks):
        print("SKIP: no js-tiktoken at %s (run ops/scripts/install-deps.sh)" % ranks)
        return 77
    cases = read_cases()
    with tempfile.TemporaryDirectory() as tmp:
        gguf = os.path.join(tmp, "o200k-%s.gguf" % pre)
        tokens, types, merges = tiktoken_gguf.build(*tiktoken_gguf.load_ranks(ranks))
        tiktoken_gguf.write_gguf(gguf, tiktoken_gguf.vocab_kvs(pre, tokens, types, merges))
        cases_bin = os.path.join(tmp, "cases.bin")
        with open(cases_bin, "wb") as f:
            for c in cases:
                f.write(c.encode("utf-8") + b"\0")
        bos, want = oracle(harness, gguf, cases_bin, False)
        _, want_sp = oracle(harness, gguf, cases_bin, True)
        if len(want) != len(cases) or len(want_sp) != len(cases):
            raise SystemExit("llamacpp_tokenize: %d cases but %d/%d results" %
                             (len(cases), len(want), len(want_sp)))
        # The cases without a line break in one `tokenize --file` (one load of
        # the 200k-token vocabulary); the others a process each.
        res = [None] * len(cases)
        flat = [i for i, c in enumerate(cases) if "\n" not in c and "\r" not in c]
        res_flat = confkv_file_ids(confkv, gguf, [cases[i] for i in flat], tmp)
        for i, r in zip(flat, res_flat):
            res[i] = r
        rest = [i for i, r in enumerate(res) if r is None]
        with concurrent.futures.ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
            for i, r in zip(rest, pool.map(lambda i: confkv_ids(confkv, gguf, cases[i], False), rest)):
                res[i] = r
            res_sp = list(pool.map(lambda t: confkv_ids(confkv, gguf, t, True), cases[:N_SPECIAL]))
        bad = 0
        for i, text in enumerate(cases):
            got, err = res[i]
            if got != want[i]:
                bad += 1
                print("FAIL %s: %r\n  want %s\n  got  %s %s" % (pre, text, want[i], got, err))
        print("%s: %d/%d cases equal (bos %d, add_bos %d in llama.cpp)" %
              (pre, len(cases) - bad, len(cases), bos[0], bos[1]))
        bad_sp = 0
        for i, text in enumerate(cases[:N_SPECIAL]):
            got, err = res_sp[i]
            if got != want_sp[i]:
                bad_sp += 1
                print("FAIL %s with special tokens: %r\n  want %s\n  got  %s %s" %
                      (pre, text, want_sp[i], got, err))
        print("%s: %d/%d cases equal with special tokens" % (pre, N_SPECIAL - bad_sp, N_SPECIAL))
    return 1 if bad or bad_sp else 0


if __name__ == "__main__":
    sys.exit(main())
