"""Encoded forms the fence reads through: HTML character references, percent-encoding and
``\\u`` escapes.

A model reads ``&#x60;&#x60;&#x60;`` as a code fence, ``%3C%3C%3C`` as a boundary and
``&#116;bc-…`` as a canary as readily as the plain forms, which the fence's rules and
``FenceWrapper.leaked`` would otherwise not see. :func:`decode_once` decodes one layer;
the fence repeats it (a few rounds: ``&amp;lt;`` is ``&lt;`` is ``<``) and neutralises with
:func:`neutralise_encoded` whatever is encoded deeper than that.

Decoding is strict so that ordinary text reads as it did: a named reference needs its
``;`` and a name HTML defines (``AT&T``, ``?a=1&notify=1`` stay), a percent sign two hex
digits that make valid UTF-8 (``100%``, ``%FF`` stay), a ``\\u`` four hex digits.
"""

from __future__ import annotations

import html
import re
from html.entities import html5
from typing import Final

__all__ = ["ENCODED_MARKER", "decode_once", "neutralise_encoded"]

ENCODED_MARKER: Final = "[neutralised:encoded]"

_ENCODED = re.compile(
    r"&(?:#[0-9]{1,7};?|#[xX][0-9a-fA-F]{1,6};?|[A-Za-z][A-Za-z0-9]{1,31};)"
    r"|(?:%[0-9A-Fa-f]{2})+"
    r"|(?:\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})+"
)
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8}))")


def _reference(text: str) -> str:
    if text[1] == "#":
        return html.unescape(text)  # numeric, with or without ";", as a browser reads it
    return html5.get(text[1:], text)  # named: only a whole name HTML defines


def _percent(text: str) -> str:
    """A run of ``%XX``, decoded as UTF-8; a byte that is not part of valid UTF-8 is left
    as it was written."""
    chunks = _PERCENT.findall(text)
    decoded = bytes(int(chunk[1:], 16) for chunk in chunks).decode("utf-8", "surrogateescape")
    out: list[str] = []
    at = 0  # the chunk (byte) the next character starts at
    for ch in decoded:
        if 0xDC80 <= ord(ch) <= 0xDCFF:  # an undecodable byte, escaped by surrogateescape
            out.append(chunks[at])
            at += 1
        else:
            out.append(ch)
            at += len(ch.encode("utf-8"))
    return "".join(out)


def _escape(match: re.Match[str]) -> str:
    point = int(match.group(1) or match.group(2), 16)
    return chr(point) if point <= 0x10FFFF else match.group(0)


def _escapes(text: str) -> str:
    """A run of ``\\u`` escapes; a surrogate pair (``\\ud83d\\ude00``) is one character, a
    lone surrogate stays one (the fence drops it as invisible)."""
    decoded = _ESCAPE.sub(_escape, text)
    return decoded.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _decode(text: str) -> str:
    if text[0] == "&":
        return _reference(text)
    if text[0] == "%":
        return _percent(text)
    return _escapes(text)


def decode_once(text: str) -> tuple[str, int]:
    """``text`` with one layer of encoding decoded, and how many encoded runs changed."""
    changed = 0

    def one(match: re.Match[str]) -> str:
        nonlocal changed
        decoded = _decode(match.group(0))
        changed += decoded != match.group(0)
        return decoded

    return _ENCODED.sub(one, text), changed


def neutralise_encoded(text: str) -> tuple[str, int]:
    """``text`` with every run that would still decode replaced by :data:`ENCODED_MARKER`."""
    changed = 0

    def one(match: re.Match[str]) -> str:
        nonlocal changed
        if _decode(match.group(0)) == match.group(0):
            return match.group(0)
        changed += 1
        return ENCODED_MARKER

    return _ENCODED.sub(one, text), changed
