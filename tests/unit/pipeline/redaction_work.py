"""How much text redaction scans, counted instead of timed: the characters handed to the
detectors and to each decoder (percent, base64, JSON escapes, escaped lines). A count is
the same on every machine and under any load, so a linearity test can compare input sizes
without a clock (timed unit tests are flaky, and we do not write them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tracebound.pipeline import redaction
from tracebound.pipeline.redaction import Redactor

# The names redaction.py calls each scan or decoding through (module globals, so a patch
# of them is seen by every call).
_SCANNERS = ("_detect", "percent_view", "base64_texts", "json_view", "escaped_lines")


def scanned(redactor: Redactor, text: str) -> int:
    """Characters scanned or decoded while redacting ``text``, over all passes and layers."""
    total = 0

    def counting(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(text: str, *args: Any, **kwargs: Any) -> Any:
            nonlocal total
            total += len(text)
            return original(text, *args, **kwargs)

        return wrapper

    with pytest.MonkeyPatch.context() as patch:
        for name in _SCANNERS:
            patch.setattr(redaction, name, counting(getattr(redaction, name)))
        redactor.redact_text(text)
    return total
