#!/usr/bin/env python3
"""Render a chat template as Hugging Face's apply_chat_template does
(transformers' _compile_jinja_template), the oracle for engine/jinja/jinja.c.

    oracle.py TEMPLATE VARS.json [YYYY-MM-DD]
    oracle.py --each OUTDIR YYYY-MM-DD TEMPLATE... -- VARS.json...

Same arguments and output as tests/jinja/jinja_render.c: the rendering on
stdout; "ERROR chat_template_exception: <message>" when the template calls
raise_exception; exit 1 on any other error. Exit 77 without jinja2.

--each renders every TEMPLATE with every VARS.json in one process (for
survey.sh): OUTDIR/<template stem>/<case stem>.out holds the rendering, or
.fail holds "<ExceptionType>: <message>" on one line when jinja2 fails.

The environment is transformers' (chat_template_utils.py): an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, the
loopcontrols extension and the `generation` tag, its own tojson filter,
raise_exception and strftime_now; and from_json, which DeepSeek's
templates call and transformers lacks, as Python's json.loads (the
semantics our filter follows). A VARS.json without tools or documents
leaves them undefined, as llama.cpp's server does (transformers would pass
None)."""
import datetime
import json
import os
import sys

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("oracle.py: python3 jinja2 is not installed (python3-jinja2)", file=sys.stderr)
    sys.exit(77)


class Raised(jinja2.exceptions.TemplateError):
    pass


class Generation(Extension):
    """HF's `{% generation %}...{% endgeneration %}` (its AssistantTracker):
    a call block whose body renders as it is (HF records where it lands)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise Raised(message)

    # HF's own tojson: no HTML escaping, ensure_ascii off, an indent option
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.filters["from_json"] = json.loads
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, variables):
    """The rendering, or the refusal line of a raise_exception."""
    variables = dict(variables)
    try:
        return env.from_string(source).render(**variables)
    except Raised as e:
        return "ERROR chat_template_exception: %s" % e.message


def parse_date(s):
    y, m, d = (int(x) for x in s.split("-"))
    return datetime.datetime(y, m, d, 12, 0, 0)


def stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def each(argv):
    outdir, date = argv[0], argv[1]
    split = argv.index("--")
    templates, cases = argv[2:split], argv[split + 1:]
    env = make_env(parse_date(date))
    variables = {}
    for c in cases:
        with open(c, encoding="utf-8") as f:
            variables[c] = json.load(f)
    for t in templates:
        d = os.path.join(outdir, stem(t))
        os.makedirs(d, exist_ok=True)
        with open(t, encoding="utf-8") as f:
            source = f.read()
        for c in cases:
            try:
                out, ext = render(env, source, variables[c]), ".out"
            except Exception as e:  # the reason is the report: any jinja2 or Python error
                out, ext = ("%s: %s" % (type(e).__name__, e)).replace("\n", " ")[:300] + "\n", ".fail"
            with open(os.path.join(d, stem(c) + ext), "wb") as f:
                f.write(out.encode("utf-8"))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--each":
        each(sys.argv[2:])
        return
    tpl_path, vars_path = sys.argv[1], sys.argv[2]
    env = make_env(parse_date(sys.argv[3] if len(sys.argv) > 3 else "2024-07-26"))
    with open(tpl_path, encoding="utf-8") as f:
        source = f.read()
    with open(vars_path, encoding="utf-8") as f:
        variables = json.load(f)
    sys.stdout.buffer.write(render(env, source, variables).encode("utf-8"))


if __name__ == "__main__":
    main()
