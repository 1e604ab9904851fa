"""The one text form of tracebound's signed head notes (run heads, stream heads).

A head note is a C2SP signed note whose text is a format line, then one ``key value``
line per field in a fixed order, each value in exactly one written form: decimals plain
(no sign, no leading zero, 20 digits at most, as the checkpoint module), hashes 64
lower-case hex digits, identifiers JSON strings in ASCII. Parsing accepts only that form,
and the caller re-formats what it parsed and compares (one head, one text), so no two
texts can carry the same head. Each head's module says which fields it has and what they
mean; the rules for writing, reading and checking them are here, once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Final

from tracebound.errors import CheckpointError
from tracebound.integrity.keys import NoteSigner, NoteVerifier
from tracebound.integrity.merkle import HASH_SIZE
from tracebound.integrity.note import MAX_TREE_SIZE, SignedNote

__all__ = [
    "check_head_fields",
    "check_origin",
    "head_id",
    "head_text",
    "head_values",
    "open_head_text",
    "sign_head_text",
]

_DECIMAL: Final = re.compile(r"0|[1-9][0-9]{0,19}")  # 20 digits at most: see the note module
_HEX: Final = re.compile(r"[0-9a-f]{64}")
_DECIMALS: Final = ("stream-version", "tree-size")
_HASHES: Final = ("hash", "root")


def check_head_fields(
    what: str,
    origin: object,
    ident: tuple[str, object],
    ints: Sequence[tuple[str, object, int]],
    hashes: Sequence[tuple[str, object]],
) -> None:
    """Check what every head note carries: a one-line origin, an identifier ``(label,
    value)`` that is a non-empty string, each ``(name, value, lowest)`` an int from
    ``lowest`` to the largest tree size, each ``(name, raw)`` 32 bytes.

    Raises:
        CheckpointError: any of them is not, the message starting with ``what``.
    """
    if not isinstance(origin, str) or not origin or "\n" in origin:
        raise CheckpointError(f"{what} origin must be a non-empty single line")
    label, value = ident
    if not isinstance(value, str) or not value:
        raise CheckpointError(f"{what} {label} must be a non-empty string")
    for name, value, low in ints:
        if isinstance(value, bool) or not isinstance(value, int):
            raise CheckpointError(f"{what} {name} must be an int")
        if not low <= value <= MAX_TREE_SIZE:
            raise CheckpointError(f"{what} {name} {value} is out of range")
    for name, raw in hashes:
        if not isinstance(raw, bytes) or len(raw) != HASH_SIZE:
            raise CheckpointError(f"{what} {name} must be {HASH_SIZE} bytes")


def head_text(form: str, keys: Sequence[str], values: Sequence[str]) -> str:
    """The note text: the format line ``form``, then ``key value`` per field."""
    lines = [form, *(f"{k} {v}" for k, v in zip(keys, values, strict=True))]
    return "".join(f"{line}\n" for line in lines)


def head_values(what: str, form: str, keys: Sequence[str], body: str) -> dict[str, str]:
    """The values of note text ``body`` by key, each line in its place, its decimals
    (``stream-version``, ``tree-size``) and hashes (``hash``, ``root``) in their one form.

    Raises:
        CheckpointError: not this kind of head (another first line), a line missing, out of
            order or extra, or a decimal or hash not in its written form.
    """
    if not isinstance(body, str) or not body.endswith("\n"):
        raise CheckpointError(f"{what} text must end with a newline")
    lines = body[:-1].split("\n")
    if lines[0] != form:
        raise CheckpointError(f"not a {what}: the first line is not {form!r}")
    if len(lines) != 1 + len(keys):
        raise CheckpointError(f"a {what} has exactly {1 + len(keys)} lines")
    values: dict[str, str] = {}
    for key, line in zip(keys, lines[1:], strict=True):
        name, sep, value = line.partition(" ")
        if name != key or not sep or not value:
            raise CheckpointError(f"{what} line {line[:40]!r} is not '{key} <value>'")
        values[key] = value
    for key in _DECIMALS:
        if key in values and not _DECIMAL.fullmatch(values[key]):
            raise CheckpointError(
                f"{what} {key} {values[key]!r:.40} is not plain decimal below 2**64"
            )
    for key in _HASHES:
        if key in values and not _HEX.fullmatch(values[key]):
            raise CheckpointError(f"{what} {key} is not 64 lower-case hex digits")
    return values


def head_id(what: str, label: str, text: str) -> str:
    """An identifier written as a JSON string in ASCII (any id fits on one line), read
    back only from that form.

    Raises:
        CheckpointError: ``text`` is not a JSON string, or not in its written form.
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the stack
        raise CheckpointError(f"{what} {label} is not a JSON string") from exc
    if not isinstance(value, str) or json.dumps(value, ensure_ascii=True) != text:
        raise CheckpointError(f"{what} {label} is not a JSON string in its written form")
    return value


def sign_head_text(text: str, signers: NoteSigner | Iterable[NoteSigner]) -> str:
    """Sign head note text; return the signed note.

    Raises:
        CheckpointError: no signer is given, or the origin holds a forbidden character.
    """
    return SignedNote.sign(text, signers).encode()


def open_head_text(note: str | bytes, verifiers: NoteVerifier | Iterable[NoteVerifier]) -> str:
    """The text of a signed head note whose signatures verify (parse it next).

    Raises:
        CheckpointError: the note is malformed.
        SignatureInvalid: the signatures do not verify.
    """
    return SignedNote.open(note, verifiers).text


def check_origin(what: str, found: str, origin: str | None) -> None:
    """With ``origin`` given, the head must name that log.

    Raises:
        CheckpointError: it names another.
    """
    if origin is not None and found != origin:
        raise CheckpointError(f"{what} is for origin {found!r}, expected {origin!r}")
