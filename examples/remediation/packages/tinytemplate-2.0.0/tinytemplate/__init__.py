"""tinytemplate 2.0.0: `{{ expr }}` templates. Fixes TBDEMO-2026-0001 by refusing any
attribute that starts with an underscore. BREAKING: ``render(template, **ctx)`` was
replaced by ``render_string(template, context)``."""

import re

__version__ = "2.0.0"
_EXPR = re.compile(r"{{\s*([A-Za-z_][\w.]*)\s*}}")


class UnsafeExpression(ValueError):
    """A template tried to reach a private or dunder attribute."""


def _lookup(context, expr):
    name, *attrs = expr.split(".")
    value = context[name]
    for attr in attrs:
        if attr.startswith("_"):
            raise UnsafeExpression(f"attribute {attr!r} is not allowed in templates")
        value = getattr(value, attr)
    return value


def render_string(template, context):
    """Render ``template`` with the mapping ``context``."""
    return _EXPR.sub(lambda m: str(_lookup(context, m.group(1))), template)
