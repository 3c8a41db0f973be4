#!/usr/bin/env python3
"""compare_logits.py - confkv's logits against llama.cpp's, step by step.

Inputs: the two dumps (steps x n_vocab little-endian float32; confkv's from
`confkv generate --dump-logits`, llama.cpp's from llamacpp_logits) and the
two programs' JSON (confkv generate --json: "prompt_ids", "tokens";
llamacpp_logits: "prompt_ids", "ids", "n_vocab").

For each step s, with a = confkv's logits and b = llama.cpp's (the reference):
  err[s] = max_i |a_i - b_i| / max_i |b_i|          (normalised, as ggml's
                                                     test-backend-ops does)
Greedy agreement: each engine feeds back its own argmax, so the logits of a
later step are comparable only while the ids agree. A step whose top-2 gap in
b is larger than the measured difference max|a-b| cannot flip between the
engines, and must agree; a step whose gap is smaller is a tie within the
cross-engine error: the comparison stops there (reported as "tie") without
failing, unless --agree asks for that many agreeing steps.

Checks, each a failure when it does not hold:
  - the prompt ids are the same (else the engines ran different inputs);
  - each dump's argmax at each step is the id its program reports (the dump
    is the logits the program actually decoded from);
  - err[s] <= --tol at every compared step;
  - no unambiguous step disagrees; at least --agree steps agree;
  - at least --min-steps steps were compared.
Prints one JSON line (the figures), then PASS or FAIL with the reasons.
Exit 0 = pass, 1 = fail, 2 = bad input. Standard library only."""
import argparse
import array
import json
import sys


def load_dump(path, n_vocab):
    a = array.array("f")
    with open(path, "rb") as f:
        data = f.read()
    if len(data) % (4 * n_vocab):
        raise ValueError("%s: %d bytes is not a whole number of %d-float steps"
                         % (path, len(data), n_vocab))
    a.frombytes(data)
    if sys.byteorder == "big":
        a.byteswap()
    return [a[i:i + n_vocab] for i in range(0, len(a), n_vocab)]


def argmax(x):
    # lowest index on ties, as both programs do
    best = 0
    for i in range(1, len(x)):
        if x[i] > x[best]:
            best = i
    return best


def top2_gap(x):
    i = argmax(x)
    second = max(x[j] for j in range(len(x)) if j != i)
    return x[i] - second


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--confkv", required=True, help="confkv's dump")
    ap.add_argument("--confkv-json", required=True, help="confkv generate --json output")
    ap.add_argument("--llama", required=True, help="llamacpp_logits' dump")
    ap.add_argument("--llama-json", required=True, help="llamacpp_logits' output")
    ap.add_argument("--tol", type=float, required=True, help="max normalised error a step")
    ap.add_argument("--agree", type=int, default=0,
                    help="at least this many greedy steps must agree (ties included)")
    ap.add_argument("--min-steps", type=int, default=1,
                    help="at least this many steps compared")
    ap.add_argument("--label", default="", help="name of the case, for the output")
    o = ap.parse_args()

    try:
        with open(o.confkv_json) as f:
            cj = json.loads(f.read().strip().splitlines()[-1])
        with open(o.llama_json) as f:
            lj = json.loads(f.read().strip().splitlines()[-1])
        V = int(lj["n_vocab"])
        A = load_dump(o.confkv, V)
        B = load_dump(o.llama, V)
    except (OSError, ValueError, KeyError, IndexError) as e:
        print("compare_logits: %s" % e, file=sys.stderr)
        return 2

    fails = []
    if cj.get("prompt_ids") != lj.get("prompt_ids"):
        fails.append("prompt ids differ: confkv %s, llama.cpp %s"
                     % (cj.get("prompt_ids"), lj.get("prompt_ids")))
    a_ids, b_ids = list(cj.get("tokens", [])), list(lj.get("ids", []))
    if len(A) > len(a_ids) or len(B) > len(b_ids):
        fails.append("more dumped steps than ids (confkv %d/%d, llama.cpp %d/%d)"
                     % (len(A), len(a_ids), len(B), len(b_ids)))
    for name, D, ids in (("confkv", A, a_ids), ("llama.cpp", B, b_ids)):
        for s in range(min(len(D), len(ids))):
            if argmax(D[s]) != ids[s]:
                fails.append("%s: step %d: the dump's argmax %d is not the id it chose, %d"
                             % (name, s, argmax(D[s]), ids[s]))
                break

    n = min(len(A), len(B))
    errs, gaps, agree, tie_at = [], [], 0, None
    for s in range(n if not fails else 0):
        a, b = A[s], B[s]
        scale = max(abs(v) for v in b)
        diff = max(abs(a[i] - b[i]) for i in range(V))
        err = diff / scale if scale > 0 else diff
        errs.append(err)
        gap = top2_gap(b)
        gaps.append(gap / scale if scale > 0 else gap)
        if err > o.tol:
            fails.append("step %d: normalised error %.3g > %.3g" % (s, err, o.tol))
        ia, ib = argmax(a), argmax(b)
        if ia == ib:
            agree += 1
            continue
        if gap > diff:
            fails.append("step %d: greedy ids differ (confkv %d, llama.cpp %d) with a top-2 gap "
                         "%.3g above the difference %.3g" % (s, ia, ib, gap, diff))
        else:
            tie_at = s
        break  # the sequences diverged: later steps see different inputs
    compared = len(errs)
    if agree < o.agree:
        fails.append("%d greedy steps agree, %d wanted" % (agree, o.agree))
    if not fails and compared < o.min_steps:
        fails.append("%d steps compared, %d wanted" % (compared, o.min_steps))

    out = {"case": o.label, "steps": n, "compared": compared, "greedy_agree": agree,
           "tie_at": tie_at, "max_rel_err": max(errs) if errs else None,
           "mean_rel_err": sum(errs) / len(errs) if errs else None,
           "min_rel_gap": min(gaps) if gaps else None, "tol": o.tol,
           "rel_err": [float("%.3g" % e) for e in errs[:16]]}
    print(json.dumps(out))
    if fails:
        print("FAIL: " + "; ".join(fails[:8]))
        return 1
    print("PASS: %d steps within %.3g (max %.3g), %d/%d greedy ids agree"
          % (compared, o.tol, out["max_rel_err"], agree, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
