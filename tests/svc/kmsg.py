#!/usr/bin/env python3
"""Helpers for the service tests: a small msgpack codec (no dependency), and
readers for what kcat prints with -f '%S %K %k%s' (length-prefixed records,
so binary payloads survive).

  kmsg.py write-jobs DIR N          N jobs: DIR/jobs.jsonl (half) + DIR/mp/*.bin (msgpack half)
  kmsg.py check-results FILE IDS    every id in IDS (one a line) has exactly one ok result
  kmsg.py dump FILE                 print the records as JSON lines (msgpack decoded)
"""
import json
import os
import struct
import sys


def mp_pack(o):
    if o is None:
        return b"\xc0"
    if o is True:
        return b"\xc3"
    if o is False:
        return b"\xc2"
    if isinstance(o, int):
        if 0 <= o < 128:
            return bytes([o])
        if -32 <= o < 0:
            return struct.pack("b", o)
        return b"\xd3" + struct.pack(">q", o)
    if isinstance(o, float):
        return b"\xcb" + struct.pack(">d", o)
    if isinstance(o, str):
        b = o.encode()
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        return b"\xdb" + struct.pack(">I", len(b)) + b
    if isinstance(o, (bytes, bytearray)):
        return b"\xc6" + struct.pack(">I", len(o)) + bytes(o)
    if isinstance(o, (list, tuple)):
        return b"\xdd" + struct.pack(">I", len(o)) + b"".join(mp_pack(x) for x in o)
    if isinstance(o, dict):
        out = b"\xdf" + struct.pack(">I", len(o))
        for k, v in o.items():
            out += mp_pack(k) + mp_pack(v)
        return out
    raise TypeError(type(o))


def mp_unpack(b, i=0):
    t = b[i]
    i += 1
    if t <= 0x7F:
        return t, i
    if t >= 0xE0:
        return t - 256, i
    if 0x80 <= t <= 0x8F:
        return _map(b, i, t & 15)
    if 0x90 <= t <= 0x9F:
        return _arr(b, i, t & 15)
    if 0xA0 <= t <= 0xBF:
        n = t & 31
        return b[i:i + n].decode(), i + n
    if t == 0xC0:
        return None, i
    if t in (0xC2, 0xC3):
        return t == 0xC3, i
    fmt = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
           0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if t in fmt:
        n = struct.calcsize(fmt[t])
        return struct.unpack(fmt[t], b[i:i + n])[0], i + n
    if t in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
        w = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}[t]
        n = int.from_bytes(b[i:i + w], "big")
        i += w
        s = b[i:i + n]
        return (s.decode() if t >= 0xD9 else s), i + n
    if t in (0xDC, 0xDD):
        w = 2 if t == 0xDC else 4
        return _arr(b, i + w, int.from_bytes(b[i:i + w], "big"))
    if t in (0xDE, 0xDF):
        w = 2 if t == 0xDE else 4
        return _map(b, i + w, int.from_bytes(b[i:i + w], "big"))
    raise ValueError("msgpack type 0x%02x" % t)


def _arr(b, i, n):
    out = []
    for _ in range(n):
        v, i = mp_unpack(b, i)
        out.append(v)
    return out, i


def _map(b, i, n):
    out = {}
    for _ in range(n):
        k, i = mp_unpack(b, i)
        v, i = mp_unpack(b, i)
        out[k] = v
    return out, i


def read_records(path):
    """Records of kcat -f '%S %K %k%s': (key bytes or None, payload bytes)."""
    data = open(path, "rb").read()
    i, out = 0, []
    while i < len(data):
        sp = data.index(b" ", i)
        s = int(data[i:sp])
        sp2 = data.index(b" ", sp + 1)
        k = int(data[sp + 1:sp2])
        i = sp2 + 1
        key = None
        if k >= 0:
            key = data[i:i + k]
            i += k
        payload = data[i:i + max(s, 0)]
        i += max(s, 0)
        out.append((key, payload))
    return out


def decode(payload):
    if payload[:1] == b"{":
        return json.loads(payload), "json"
    v, n = mp_unpack(payload)
    assert n == len(payload), "trailing bytes in msgpack"
    return v, "msgpack"


def write_jobs(d, n, max_tokens=8, greedy_prompt="Once upon a time"):
    os.makedirs(os.path.join(d, "mp"), exist_ok=True)
    ids = []
    with open(os.path.join(d, "jobs.jsonl"), "w") as f:
        for i in range(n):
            jid = "job-%04d" % i
            ids.append(jid)
            job = {"id": jid, "prompt": "Lily saw a %s" % ["cat", "dog", "bird", "ball"][i % 4],
                   "max_tokens": max_tokens, "temperature": 0.8, "seed": i,
                   "priority": i % 3, "metadata": {"n": i}}
            if i % 5 == 0:
                job["session_id"] = "session-%d" % (i % 7)
            if i == 0:
                # The greedy reference job starts a fresh context: jobs 35
                # and 70 share session-0 and may run first (keys are job ids,
                # so they sit on other partitions), which made its prompt
                # their conversation plus this text.
                job.pop("session_id", None)
                job.update(prompt=greedy_prompt, temperature=0, max_tokens=40)
            if i % 2 == 0:
                f.write(jid + "\t" + json.dumps(job) + "\n")
            else:
                job["messages"] = [{"role": "user", "content": job.pop("prompt")}]
                open(os.path.join(d, "mp", jid + ".bin"), "wb").write(mp_pack(job))
    open(os.path.join(d, "ids.txt"), "w").write("\n".join(ids) + "\n")


def main():
    cmd = sys.argv[1]
    if cmd == "write-jobs":
        write_jobs(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 8)
    elif cmd == "dump":
        for key, p in read_records(sys.argv[2]):
            v, enc = decode(p)
            print(json.dumps({"key": key.decode() if key else None, "encoding": enc, "value": v}))
    elif cmd == "check-results":
        # exactly one ok result per id; msgpack jobs answered in msgpack
        ids = [l.strip() for l in open(sys.argv[3]) if l.strip()]
        seen = {}
        for key, p in read_records(sys.argv[2]):
            v, enc = decode(p)
            seen.setdefault(v["id"], []).append((v, enc))
            assert key is not None and key.decode() == v["id"], "result key is not the job id"
        bad = []
        for jid in ids:
            rs = seen.get(jid, [])
            if len(rs) != 1 or rs[0][0]["status"] != "ok":
                bad.append((jid, [r[0].get("status") for r in rs]))
                continue
            v, enc = rs[0]
            want = "msgpack" if int(jid.split("-")[1]) % 2 else "json"
            assert enc == want, (jid, enc)
            assert v["metadata"] == {"n": int(jid.split("-")[1])}, v["metadata"]
            for k in ("usage", "kv", "confidence", "timings"):
                assert isinstance(v[k], dict), k
            # repeated prompts reuse their prefix blocks; never the last token
            u = v["usage"]
            assert 0 <= u["cached_tokens"] < u["prompt_tokens"], u
        if bad:
            sys.exit("results wrong for %d ids, e.g. %s" % (len(bad), bad[:5]))
        print("ok: %d ids, one ok result each" % len(ids))
    elif cmd == "coverage":
        # every id has at least one result (duplicates allowed); prints stats
        ids = [l.strip() for l in open(sys.argv[3]) if l.strip()]
        seen = {}
        for key, p in read_records(sys.argv[2]):
            v, _ = decode(p)
            seen.setdefault(v["id"], []).append(v)
        missing = [i for i in ids if i not in seen]
        dups = {i: r for i, r in seen.items() if len(r) > 1}
        marked = sum(1 for r in dups.values() if any(x.get("redelivered") for x in r))
        print(json.dumps({"ids": len(ids), "missing": len(missing), "duplicated": len(dups),
                          "duplicates_marked_redelivered": marked}))
        if missing:
            sys.exit("missing results for %s" % missing[:10])
        if len(sys.argv) > 4 and sys.argv[4] == "--require-marked" and marked != len(dups):
            sys.exit("%d duplicated ids without a redelivered result" % (len(dups) - marked))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
