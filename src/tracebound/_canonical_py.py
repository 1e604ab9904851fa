"""Reference RFC 8785 encoder in plain Python.

This is the implementation the C accelerator (``tracebound._canonical``) is checked against, and
the one that runs when the accelerator is not built or ``TRACEBOUND_PURE_PYTHON=1`` is set. It is
written to be read: each RFC 8785 rule is one small function, and no third-party encoder is used,
so that agreement with the accelerator and with the ``rfc8785`` package is evidence, not an echo.

It is also the only place error messages are written. The accelerator only detects that a value
is unacceptable; :mod:`tracebound.canonical` then runs this module on the same value to obtain a
message that names the JSON path of the offending value.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from uuid import UUID

from tracebound.errors import CanonicalizationError

__all__ = [
    "MAX_DEPTH",
    "MAX_SAFE_INTEGER",
    "canonical_bytes",
    "canonicalize",
    "format_float",
    "record_prefix",
    "utf16_sort_key",
]

MAX_SAFE_INTEGER = 2**53 - 1
"""Largest integer an IEEE 754 double holds exactly; I-JSON (RFC 7493) limits numbers to it."""

MAX_DEPTH = 256
"""Deepest nesting of arrays and objects accepted.

A limit keeps both implementations far from Python's recursion limit and the C stack, turns a
self-referencing container into a typed error, and is generous for event records, which are a
handful of levels deep. The C accelerator enforces the same number.
"""

# RFC 8785 §3.2.2.2: only the quote, the backslash and U+0000..U+001F are escaped; the five
# controls with a short JSON form use it, the rest use \u00xx with lowercase hex digits.
_SHORT_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
_ESCAPES: dict[int, str] = {cp: _SHORT_ESCAPES.get(cp, f"\\u{cp:04x}") for cp in range(0x20)}
_ESCAPES[ord('"')] = '\\"'
_ESCAPES[ord("\\")] = "\\\\"

_SURROGATE = re.compile("[\ud800-\udfff]")
_NEEDS_ATTENTION = re.compile('[\x00-\x1f"\\\\\ud800-\udfff]')  # escapes or surrogates
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_FloatFormatter = Callable[[float], str]


class _Rejected(Exception):
    """Carries a rejection up the recursion so each level can add its step of the JSON path.

    Building the path only on failure keeps the success path free of per-level bookkeeping.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.steps: list[str | int] = []  # innermost first


def canonical_bytes(value: object) -> bytes:
    """Hash-safe RFC 8785 bytes: no floats, integers within ±(2**53-1), no lone surrogates.

    Raises:
        CanonicalizationError: the value holds something that must not be hashed; the message
            starts with the JSON path of the offending value (``$.payload.items[3]: ...``).
    """
    return _encode_top(value, None)


def canonicalize(value: object) -> bytes:
    """Full RFC 8785 bytes: like :func:`canonical_bytes` but finite floats are allowed.

    Raises:
        CanonicalizationError: NaN, infinities, out-of-range integers, lone surrogates,
            non-str keys, unsupported types or too deep nesting.
    """
    return _encode_top(value, format_float)


def record_prefix(
    correlation_id: object, event_id: int, event_type: object, payload: object
) -> bytes:
    """The canonical record up to and including the payload, without the closing brace.

    ``{"correlation_id":C,"event_id":"U","event_type":T,"payload":P``: C, T and P are
    :func:`canonical_bytes` of the values, U is the text of ``UUID(int=event_id)``. This is
    the reference for the accelerator's ``record_prefix``; ``events/record.py`` relies on
    RFC 8785's key order putting these four keys first.

    Raises:
        CanonicalizationError: a value must not be hashed (as :func:`canonical_bytes`).
        TypeError, ValueError: ``event_id`` is not an int in ``[0, 2**128)``.
    """
    if type(event_id) is not int:
        raise TypeError(f"event id must be an int, not {type(event_id).__name__}")
    return b'{"correlation_id":%s,"event_id":"%s","event_type":%s,"payload":%s' % (
        canonical_bytes(correlation_id),
        str(UUID(int=event_id)).encode(),
        canonical_bytes(event_type),
        canonical_bytes(payload),
    )


def _encode_top(value: object, float_formatter: _FloatFormatter | None) -> bytes:
    out: list[str] = []
    try:
        _encode(value, out, 0, float_formatter)
    except _Rejected as rejected:
        raise CanonicalizationError(
            f"{_render_path(reversed(rejected.steps))}: {rejected.reason}"
        ) from None
    except RecursionError:
        # Only reachable when the caller is already close to the recursion limit: MAX_DEPTH
        # itself fits comfortably. Still a typed error, never a leaked RecursionError.
        raise CanonicalizationError("$: nesting too deep for the remaining Python stack") from None
    # Every piece is checked to be free of surrogates, so strict UTF-8 encoding cannot fail.
    return "".join(out).encode("utf-8")


def _encode(
    value: object, out: list[str], depth: int, float_formatter: _FloatFormatter | None
) -> None:
    # Exact type checks, not isinstance: a subclass can override __str__, __iter__ or items(),
    # and hashed bytes must not depend on which of those an encoder happens to call. bool is
    # tested by identity because it is an int subclass with a JSON type of its own.
    kind = type(value)
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is str:
        assert isinstance(value, str)
        out.append(_string(value, "string"))
    elif kind is int:
        assert isinstance(value, int)
        out.append(_integer(value))
    elif kind is float:
        assert isinstance(value, float)
        out.append(_float(value, float_formatter))
    elif kind is dict:
        assert isinstance(value, dict)
        _object(value, out, depth + 1, float_formatter)
    elif kind is list or kind is tuple:
        assert isinstance(value, list | tuple)
        _array(value, out, depth + 1, float_formatter)
    else:
        raise _Rejected(_unsupported(value))


def _object(
    obj: dict[object, object],
    out: list[str],
    depth: int,
    float_formatter: _FloatFormatter | None,
) -> None:
    if depth > MAX_DEPTH:
        raise _Rejected(f"nesting deeper than {MAX_DEPTH} levels")
    # Keys are checked first, in insertion order, so a bad key is reported before bad values.
    members: list[tuple[bytes, str, str, object]] = []
    for key, member in obj.items():
        if type(key) is not str:
            raise _Rejected(
                f"object key {key!r} of type {_type_name(key)} is not allowed; keys must be str"
            )
        assert isinstance(key, str)
        encoded_key = _string(key, "object key")  # first: it rejects surrogates
        members.append((utf16_sort_key(key), key, encoded_key, member))
    # RFC 8785 §3.2.3: members sorted by their names as arrays of UTF-16 code units.
    members.sort(key=lambda item: item[0])
    out.append("{")
    for index, (_, key, encoded_key, member) in enumerate(members):
        if index:
            out.append(",")
        out.append(encoded_key)
        out.append(":")
        try:
            _encode(member, out, depth, float_formatter)
        except _Rejected as rejected:
            rejected.steps.append(key)
            raise
    out.append("}")


def _array(
    items: list[object] | tuple[object, ...],
    out: list[str],
    depth: int,
    float_formatter: _FloatFormatter | None,
) -> None:
    if depth > MAX_DEPTH:
        raise _Rejected(f"nesting deeper than {MAX_DEPTH} levels")
    out.append("[")
    for index, item in enumerate(items):
        if index:
            out.append(",")
        try:
            _encode(item, out, depth, float_formatter)
        except _Rejected as rejected:
            rejected.steps.append(index)
            raise
    out.append("]")


def utf16_sort_key(key: str) -> bytes:
    """The key's UTF-16 code units as big-endian bytes.

    Comparing these bytes compares the code-unit sequences, which is RFC 8785's order: it differs
    from code-point order when U+E000..U+FFFF meets a non-BMP character, whose first unit is a
    surrogate (U+D800..U+DBFF) and therefore sorts lower. The key must be free of surrogates.
    """
    return key.encode("utf-16-be")


def _string(text: str, what: str) -> str:
    if _NEEDS_ATTENTION.search(text) is None:
        return '"' + text + '"'  # the common case; str.translate is slow per character
    match = _SURROGATE.search(text)
    if match is not None:
        raise _Rejected(
            f"{what} {_quote(text)} contains a lone surrogate "
            f"U+{ord(match.group()):04X} at index {match.start()}; it has no UTF-8 form"
        )
    return '"' + text.translate(_ESCAPES) + '"'


def _integer(number: int) -> str:
    if -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER:
        return str(number)
    raise _Rejected(
        f"integer {number} is outside ±(2**53-1), which JSON numbers cannot hold exactly; "
        "use a decimal string"
    )


def _float(number: float, float_formatter: _FloatFormatter | None) -> str:
    if float_formatter is None:
        raise _Rejected(
            f"float {number!r} is not allowed in hashed data; use an integer or a decimal string"
        )
    try:
        return float_formatter(number)
    except CanonicalizationError as exc:
        raise _Rejected(str(exc)) from None


def format_float(number: float) -> str:
    """Format a finite float exactly as ECMAScript's Number.prototype.toString (RFC 8785 §3.2.2.3).

    ECMAScript and Python's ``repr`` both choose the shortest digit string that reads back as the
    same double (and the nearest such string on ties), so the digits come from ``repr`` and only
    the layout (plain decimal versus exponent, the ``e+``/``e-`` form) follows ECMAScript's rules.

    Raises:
        CanonicalizationError: for NaN and the infinities, which JSON cannot express.
    """
    if math.isnan(number) or math.isinf(number):
        raise CanonicalizationError(
            f"float {number!r} is not allowed; RFC 8785 (like JSON) has no NaN or Infinity"
        )
    if number == 0:
        return "0"  # ECMAScript prints -0 as "0" too.
    if number < 0:
        return "-" + format_float(-number)
    digits, point = _shortest_digits(number)
    # The value is 0.<digits> * 10**point, i.e. digits * 10**(point - len(digits)); in the
    # specification's terms k = len(digits) and n = point.
    k = len(digits)
    if k <= point <= 21:
        return digits + "0" * (point - k)
    if 0 < point <= 21:
        return digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return "0." + "0" * -point + digits
    exponent = point - 1
    sign = "+" if exponent >= 0 else "-"
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{mantissa}e{sign}{abs(exponent)}"


def _shortest_digits(number: float) -> tuple[str, int]:
    """Split a positive finite float into shortest round-trip digits and a decimal point position.

    Returns ``(digits, point)`` with no leading or trailing zeros in ``digits`` such that the
    value equals ``0.<digits> * 10**point``.
    """
    text = repr(number)  # e.g. "333333333.3333333", "0.002", "1e+30", "1.5e-07", "56.0"
    mantissa, _, exponent_text = text.partition("e")
    exponent = int(exponent_text) if exponent_text else 0
    integer_part, _, fraction_part = mantissa.partition(".")
    all_digits = integer_part + fraction_part
    point = len(integer_part) + exponent
    stripped = all_digits.lstrip("0")
    point -= len(all_digits) - len(stripped)
    return stripped.rstrip("0"), point


def _unsupported(value: object) -> str:
    kind = type(value)
    for base in (bool, int, float, str, dict, list, tuple):
        if isinstance(value, base):
            return (
                f"type {_type_name(value)} (a subclass of {base.__name__}) is not allowed; "
                f"convert it to a plain {base.__name__} first"
            )
    if kind in (bytes, bytearray, memoryview):
        hint = "encode it, e.g. as a hex or base64 string, or hash it and store the digest"
    elif kind.__name__ in ("datetime", "date", "time"):
        hint = "use an RFC 3339 string"
    elif kind.__name__ == "Decimal":
        hint = "use a decimal string or an integer of minor units"
    else:
        hint = "use dict, list, tuple, str, int, bool or None"
    return f"type {_type_name(value)} is not JSON; {hint}"


def _type_name(value: object) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _quote(text: str) -> str:
    """A printable, ASCII-only rendering of a string for messages (lone surrogates included)."""
    shown = text if len(text) <= 40 else text[:37] + "..."
    return json.dumps(shown)


def _render_path(steps: Iterable[str | int]) -> str:
    """JSONPath-style location: ``$.payload.items[3]``, or ``$["odd key"]`` for other keys."""
    parts = ["$"]
    for step in steps:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif _IDENTIFIER.fullmatch(step):
            parts.append(f".{step}")
        else:
            parts.append(f"[{_quote(step)}]")
    return "".join(parts)
