"""How much text redaction scans, counted instead of timed: the characters handed to the
detectors and to each decoder (percent, base64, JSON escapes, escaped lines). A count is
the same on every machine and under any load, so a linearity test can compare input sizes
without a clock (timed unit tests are flaky, and we do not write them)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
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


class CountingPattern:
    """Stands in for a module's compiled pattern and counts the work done through it: one
    per call or match found, plus the characters each match spans. A rule that walks the
    text from each of its matches (a pair's fields, a wrapped block's lines) shows a
    quadratic walk as a quadratic count, without a clock."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.work = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pattern, name)  # ``groups``, ``pattern``, …: as the original

    def _count(self, match: re.Match[str] | None) -> re.Match[str] | None:
        self.work += 1 + (match.end() - match.start() if match is not None else 0)
        return match

    def match(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self._count(self.pattern.match(text, pos, endpos))

    def search(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self._count(self.pattern.search(text, pos, endpos))

    def finditer(
        self, text: str, pos: int = 0, endpos: int = sys.maxsize
    ) -> Iterator[re.Match[str]]:
        self.work += 1
        for match in self.pattern.finditer(text, pos, endpos):
            self._count(match)
            yield match
