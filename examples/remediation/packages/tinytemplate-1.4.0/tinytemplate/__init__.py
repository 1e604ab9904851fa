"""tinytemplate 1.4.0: `{{ expr }}` templates. VULNERABLE: expressions may reach dunder
attributes (``{{ user.__class__.__init__.__globals__ }}``), so an untrusted template can read
process secrets (advisory TBDEMO-2026-0001)."""

import re

__version__ = "1.4.0"
_EXPR = re.compile(r"{{\s*([A-Za-z_][\w.]*)\s*}}")


def _lookup(context, expr):
    name, *attrs = expr.split(".")
    value = context[name]
    for attr in attrs:
        value = getattr(value, attr)  # no check: this is the vulnerability
    return value


def render(template, **context):
    """Render ``template`` with ``context`` as keyword arguments."""
    return _EXPR.sub(lambda m: str(_lookup(context, m.group(1))), template)
