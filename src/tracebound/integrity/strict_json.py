"""JSON as an offline verifier must read it: one meaning per file, or a refusal.

A proof or evidence file is read by tracebound and, often, by a person with another tool
(``jq``, a browser, a Go or JavaScript program). Where JSON parsers disagree, a forger can
show the verifier one value and the reader another. So the files are parsed strictly:

* UTF-8 only (no byte order mark), no lone surrogates, no ``NaN``/``Infinity``;
* no object with the same key twice (parsers keep the first or the last, or refuse);
* nesting at most as deep as orjson allows;
* no integer beyond 64 bits (orjson would read it as a float: another value than the
  exact integer another reader sees).

Every refusal is a :class:`ValueError` whose message says what is wrong; callers turn it
into their own typed error (``ProofError``, ``EvidenceInvalid``).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from tracebound.canonical import canonical_bytes
from tracebound.errors import CanonicalizationError

__all__ = ["loads_canonical_record", "loads_strict"]


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class _BigInteger(Exception):
    pass


# orjson holds integers in [-2**63, 2**64 - 1] exactly; any other integer it reads as a float.
_MIN_INT, _MAX_INT = -(2**63), 2**64 - 1


def _exact_int(text: str) -> int:
    value = int(text)
    if not _MIN_INT <= value <= _MAX_INT:
        raise _BigInteger
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def loads_strict(data: bytes | str) -> Any:
    """Parse ``data`` as strict JSON (see the module docstring).

    Raises:
        ValueError: not UTF-8, not JSON, or ambiguous JSON; the message says which.
    """
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"
            ) from None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    try:
        # orjson keeps the last of two equal keys without a word; the standard parser
        # can say so. It only runs on what orjson accepted, so its laxer parts never apply.
        json.loads(data, object_pairs_hook=_no_duplicates, parse_int=_exact_int)
    except _BigInteger:
        raise ValueError("not JSON this tool reads: an integer beyond 64 bits") from None
    except _DuplicateKey as exc:
        key = exc.key if len(exc.key) <= 80 else exc.key[:77] + "..."
        raise ValueError(f"ambiguous JSON: the key {key!r} appears twice in one object") from None
    except RecursionError:
        raise ValueError("not JSON this tool reads: nested too deeply") from None
    except ValueError as exc:  # orjson accepted it; be safe all the same
        raise ValueError(f"not JSON: {exc}") from exc
    return value


def loads_canonical_record(data: bytes) -> dict[str, Any]:
    """A hashed ledger record as only the ledger writes it: strict JSON (above), an object,
    and exactly its RFC 8785 bytes. Any other spelling of the same bytes' hash (a key twice,
    spaces, escapes, members out of order) could read one way to a verifier and another to
    a reader, and whoever holds a store can write such a row before its next checkpoint.

    Raises:
        ValueError: the message completes "the record is ...".
    """
    try:
        record = loads_strict(data)
    except ValueError as exc:
        raise ValueError(f"not plain JSON: {exc}") from exc
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")  # noqa: TRY004 - one error type for callers to wrap
    try:
        canonical = canonical_bytes(record) == data
    except CanonicalizationError:
        canonical = False
    if not canonical:
        raise ValueError("not in the canonical form the ledger writes")
    return record
