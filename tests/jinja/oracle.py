#!/usr/bin/env python3
"""Render a chat template as Hugging Face's apply_chat_template does
(transformers' _compile_jinja_template), the oracle for engine/jinja/jinja.c.

    oracle.py TEMPLATE VARS.json [YYYY-MM-DD]

Same arguments and output as tests/jinja/jinja_render.c: the rendering on
stdout; "ERROR chat_template_exception: <message>" when the template calls
raise_exception; exit 1 on any other error. Exit 77 without jinja2."""
import datetime
import json
import sys

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("oracle.py: python3 jinja2 is not installed (python3-jinja2)", file=sys.stderr)
    sys.exit(77)


class Raised(jinja2.exceptions.TemplateError):
    pass


def main():
    tpl_path, vars_path = sys.argv[1], sys.argv[2]
    y, m, d = (int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "2024-07-26").split("-"))
    now = datetime.datetime(y, m, d, 12, 0, 0)

    def raise_exception(message):
        raise Raised(message)

    # HF's own tojson: no HTML escaping, ensure_ascii off, an indent option
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    with open(tpl_path, encoding="utf-8") as f:
        source = f.read()
    with open(vars_path, encoding="utf-8") as f:
        variables = json.load(f)
    variables.setdefault("tools", None)
    variables.setdefault("documents", None)
    try:
        out = env.from_string(source).render(**variables)
    except Raised as e:
        out = "ERROR chat_template_exception: %s" % e.message
    sys.stdout.buffer.write(out.encode("utf-8"))


if __name__ == "__main__":
    main()
