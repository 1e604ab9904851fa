"""The members of an offline proof file, read strictly: one type and one spelling each.

Inclusion and consistency proofs (``tracebound-inclusion/1``, ``tracebound-consistency/1``)
are read by tracebound and by people with other tools. Whatever a file states beyond what
is hashed and signed, a reader could believe; so every member must be of its JSON type, in
range, and in its one spelling (lower-case hex of 32 bytes, padded base64), or the file is
refused with a :class:`ProofError` that names the member. ``what`` names the file's kind
in those messages ("inclusion proof", "consistency proof").
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from tracebound.errors import ProofError, short_repr
from tracebound.integrity.merkle import HASH_SIZE
from tracebound.integrity.note import MAX_TREE_SIZE

__all__ = [
    "check_members",
    "field_base64",
    "field_hash",
    "field_size",
    "field_text",
    "json_kind",
]


def json_kind(value: object) -> str:
    """The JSON type of a parsed value, for messages."""
    kinds = {bool: "boolean", int: "number", float: "number", str: "string", list: "array",
             dict: "object", type(None): "null"}  # fmt: skip
    return kinds.get(type(value), type(value).__name__)


def check_members(d: object, members: frozenset[str], what: str, part: str = "") -> None:
    """``d`` is an object with exactly ``members``: none missing, none unknown.

    Raises:
        ProofError: not an object, or a member missing or unknown (``part`` says where).
    """
    where = f"{part} " if part else ""
    if not isinstance(d, dict):
        raise ProofError(f"malformed {what}: {where}is a JSON {json_kind(d)}, not an object")
    missing = sorted(members - d.keys())
    if missing:
        raise ProofError(f"malformed {what}: {where}no {', '.join(missing)}")
    unknown = sorted(short_repr(k) for k in d.keys() - members)
    if unknown:
        raise ProofError(
            f"malformed {what}: {where}unknown member(s) {', '.join(unknown)} (nothing "
            "outside what is hashed and signed may ride along)"
        )


def field_size(d: Mapping[str, Any], name: str, what: str) -> int:
    """A position or tree size: an integer from 1 to 2**64-1."""
    value = d[name]
    if type(value) is not int or not 1 <= value <= MAX_TREE_SIZE:
        raise ProofError(
            f"malformed {what}: {name} must be an integer from 1 to 2**64-1, "
            f"not {short_repr(value)}"
        )
    return value


def field_text(d: Mapping[str, Any], name: str, what: str) -> str:
    value = d[name]
    if not isinstance(value, str):
        raise ProofError(
            f"malformed {what}: {name} must be a string, not a JSON {json_kind(value)}"
        )
    return value


def field_hash(value: object, name: str, what: str) -> bytes:
    """32 bytes written as 64 lower-case hex digits, and only so (one spelling per hash)."""
    raw = b""
    if isinstance(value, str) and len(value) == 2 * HASH_SIZE:
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raw = b""
    if len(raw) != HASH_SIZE or raw.hex() != value:
        raise ProofError(
            f"malformed {what}: {name} must be {HASH_SIZE} bytes as lower-case hex, "
            f"not {short_repr(value)}"
        )
    return raw


def field_base64(value: object, name: str, what: str) -> bytes:
    """Standard padded base64, only in its canonical spelling."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            pass
        else:
            if base64.b64encode(raw).decode("ascii") == value:
                return raw
    raise ProofError(f"malformed {what}: {name} must be canonical base64 (padded, no spaces)")
