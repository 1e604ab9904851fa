"""RFC 8785 (JSON Canonicalization Scheme) bytes.

PLACEHOLDER: a minimal implementation so that other modules can be written against the API;
the real one (exact, fuzzed, fast) replaces it.
"""

from __future__ import annotations

from typing import Any

import orjson

from tracebound.errors import CanonicalizationError

__all__ = ["MAX_SAFE_INTEGER", "canonical_bytes", "canonicalize"]

MAX_SAFE_INTEGER = 2**53 - 1


def canonical_bytes(value: Any) -> bytes:
    """Hash-safe RFC 8785 bytes: rejects floats, ints beyond 2^53-1 and lone surrogates."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER)
    except TypeError as exc:
        raise CanonicalizationError(str(exc)) from exc


def canonicalize(value: Any) -> bytes:
    """Full RFC 8785 bytes, floats included (ECMAScript number formatting)."""
    return canonical_bytes(value)
