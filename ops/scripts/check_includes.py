#!/usr/bin/env python3
"""The include rules of engine/, service/ and kernels/, checked.

The rules are the fenced block after "## Include rules" in engine/README.md
(one place: the page a newcomer reads is the table this script enforces):

    FOLDER: WHAT IT MAY INCLUDE

where FOLDER is a folder under engine/ ("." the engine's own top), or
service, service/cli or kernels, and each entry on the right is an engine
folder ("model") or one header in one ("kv/kv.h"). A file may always
include the headers of its own folder. Every quoted include is resolved
the way the compiler resolves it (the including file's folder first, then
the engine's folders, whose header names are unique) and must be allowed;
an engine file may include no network or service library (its only way
to Redis is kv/cold.h); a folder missing from the rules is an error too.

Usage: ops/scripts/check_includes.py [--root DIR]   (exit 0 clean, 1 not)
"""
import argparse
import os
import re
import sys

# System headers the engine must not include: it is plain C11 with no
# network library; the service owns Kafka, Redis, the loop and HTTP.
ENGINE_FORBIDDEN_SYSTEM = re.compile(
    r"^(uv\.h|uv/|librdkafka/|rdkafka|hiredis/|hiredis\.h|msgpack|cjson/|cJSON|curl/|http_parser)")
SOURCE = re.compile(r"\.(c|h|cu)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def read_rules(readme):
    """{folder: [entries]} from the block after '## Include rules'."""
    text = open(readme, encoding="utf-8").read()
    m = re.search(r"^## Include rules\b.*?^```[a-z]*\n(.*?)^```", text, re.S | re.M)
    if not m:
        sys.exit(f"check_includes: {readme}: no fenced block after '## Include rules'")
    rules = {}
    for n, line in enumerate(m.group(1).splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        folder, _, rest = line.partition(":")
        folder = folder.strip()
        if not _ or folder in rules:
            sys.exit(f"check_includes: {readme}: rules line {n}: want 'FOLDER: ENTRIES', once per folder")
        rules[folder] = rest.split()
    return rules


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    root = os.path.abspath(ap.parse_args().root)
    engine = os.path.join(root, "engine")
    rules = read_rules(os.path.join(engine, "README.md"))
    errors = []

    # Every engine header by name, and the folder that owns it.
    owner = {}
    engine_files = []
    for d, _, files in os.walk(engine):
        rel = os.path.relpath(d, engine)
        for f in sorted(files):
            if not SOURCE.search(f):
                continue
            engine_files.append((rel, os.path.join(d, f)))
            if f.endswith(".h"):
                if f in owner:
                    errors.append(f"engine/{rel}/{f}: header name also in engine/{owner[f]}/ "
                                  "(names must be unique: headers are included by name)")
                owner[f] = rel
    folders = {rel for rel, _ in engine_files}
    for rel in sorted(folders - set(rules)):
        errors.append(f"engine/{rel}/: folder has no line in engine/README.md's include rules")

    def files_of(top):
        out = []
        for d, _, files in os.walk(os.path.join(root, top)):
            rel = os.path.relpath(d, root)
            out += [(rel, os.path.join(d, f)) for f in sorted(files) if SOURCE.search(f)]
        return out

    checked = [(rel, p, True) for rel, p in engine_files]
    checked += [(rel, p, False) for rel, p in files_of("service") + files_of("kernels")]
    for rel, path, in_engine in checked:
        if rel not in rules:
            if not in_engine:
                errors.append(f"{rel}/: folder has no line in engine/README.md's include rules")
            continue
        allowed = set(rules[rel])
        here = os.path.dirname(path)
        show = os.path.relpath(path, root)
        for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            kind, name = m.groups()
            if kind == "<":
                if in_engine and ENGINE_FORBIDDEN_SYSTEM.match(name):
                    errors.append(f"{show}:{n}: <{name}>: the engine uses no network or service library")
                continue
            if os.path.exists(os.path.join(here, name)):
                continue  # its own folder
            base = os.path.basename(name)
            if base not in owner:
                if in_engine:
                    errors.append(f"{show}:{n}: \"{name}\" is no engine header (the engine includes "
                                  "nothing of service/ or kernels/)")
                continue  # a header of the service's or the kernels' own
            folder = owner[base]
            if folder != rel and folder not in allowed and f"{folder}/{base}" not in allowed:
                errors.append(f"{show}:{n}: \"{name}\" is in engine/{folder}/, which {rel}/ may not "
                              f"include (engine/README.md, include rules: {rel}: {' '.join(rules[rel])})")
    for e in errors:
        print(e, file=sys.stderr)
    print(f"check_includes: {len(checked)} files, {len(errors)} forbidden include(s)"
          if errors else f"check_includes: {len(checked)} files clean")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
