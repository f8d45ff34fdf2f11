#!/usr/bin/env python3
"""Renders chat templates with Jinja2 set up as Hugging Face transformers sets it up.

The golden test of router/prompt/template compares its renders with this one,
byte for byte:

    python3 hack/chat-template-oracle.py < cases.json

The input is a JSON array of cases, each {"template": str, "variables": {...},
"now": epoch seconds}; the variables are passed to the template as they are,
with JSON objects keeping their key order. The output is a JSON array holding,
per case, {"text": rendered} or {"error": message}.

The environment follows transformers' chat-template code: an immutable sandbox
with trim_blocks, lstrip_blocks and the loopcontrols extension, a tojson filter
that is json.dumps with ensure_ascii=False, and the raise_exception and
strftime_now globals. strftime_now reads the case's fixed "now" (UTC) so that
renders are reproducible.
"""
import datetime
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise TemplateError(message)


def render(case):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    now = datetime.datetime.fromtimestamp(case.get("now", 0), tz=datetime.timezone.utc)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: now.strftime(fmt)
    try:
        return {"text": env.from_string(case["template"]).render(**case["variables"])}
    except Exception as err:  # the test compares only that both sides fail
        return {"error": f"{type(err).__name__}: {err}"}


def main():
    cases = json.load(sys.stdin)
    json.dump([render(case) for case in cases], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
