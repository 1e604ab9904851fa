"""RFC 8785 (JSON Canonicalization Scheme) bytes: the form every hashed record takes.

Two entry points, one rule set:

* :func:`canonical_bytes` is the **hash-safe** mode used for every hashed record. It refuses
  floats (money is an integer of micro-units or a decimal string; time is an RFC 3339 string),
  so a value's hash never depends on how a float happened to round.
* :func:`canonicalize` is **full** RFC 8785: finite floats are allowed and written as
  ECMAScript's ``Number.prototype.toString`` would. It is what the published vectors test.

Both accept exactly ``dict`` (``str`` keys), ``list``, ``tuple``, ``str``, ``int``, ``bool`` and
``None``, and reject anything else with :class:`~tracebound.errors.CanonicalizationError` whose
message starts with the JSON path of the offending value (``$.payload.items[3]: ...``):

* integers outside ±(2**53-1) (I-JSON, RFC 7493: a JSON number is a double);
* strings or keys holding a surrogate code point (a lone surrogate has no UTF-8 form);
* subclasses of the accepted types (``StrEnum``, ``OrderedDict``, ...): a subclass can override
  ``__str__``, ``__iter__`` or ``items()``, and hashed bytes must not depend on which of those an
  encoder calls. Convert first, e.g. with pydantic's ``model_dump(mode="json")``;
* ``datetime``, ``UUID``, ``Decimal``, ``bytes`` and every other type;
* nesting deeper than 256 arrays/objects (this also turns a cyclic container into an error).

Implementation choice: a C accelerator (``tracebound._canonical``) does the work when it was
built; the pure-Python reference (``tracebound._canonical_py``) runs otherwise, and also writes
every error message, because the accelerator only detects *that* a value is unacceptable. The
environment variable ``TRACEBOUND_PURE_PYTHON=1`` forces the reference; it is read once, at
import time, and is this module's only contact with the environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from tracebound import _canonical_py as _reference
from tracebound.errors import CanonicalizationError

__all__ = ["MAX_SAFE_INTEGER", "canonical_bytes", "canonicalize", "record_prefix"]

MAX_SAFE_INTEGER: Final = _reference.MAX_SAFE_INTEGER
"""2**53 - 1: the largest integer hashed data may hold (larger ones belong in a decimal string)."""


_Encoder = Callable[[object], bytes]
_PrefixBuilder = Callable[[object, int, object, object], bytes]


def _load_accelerator() -> ModuleType | None:
    try:
        from tracebound import _canonical  # type: ignore[attr-defined]  # noqa: PLC0415
    except ImportError:
        return None
    module: ModuleType = _canonical
    if getattr(module, "MAX_DEPTH", None) != _reference.MAX_DEPTH:
        return None  # a stale build from another version: the reference is always right
    return module


def _explain(value: object, reference: _Encoder) -> bytes:
    """Re-run the reference on a value the accelerator refused, to raise its path-bearing error.

    If the reference accepts the value the two implementations disagree, which is a bug; the
    value is refused all the same (fail closed) rather than hashed with uncertain bytes.
    """
    reference(value)
    raise CanonicalizationError(
        "$: the C canonical encoder refused a value the reference accepts; please report this"
    )


def _accelerated(accelerator: ModuleType) -> tuple[_Encoder, _Encoder]:
    """Wrap the C encoder in the public signatures.

    The C module raises its private ``Rejected`` (or, from the float formatter, a path-less
    :class:`CanonicalizationError`); either way the reference is asked to explain the value.
    Closures rather than module globals keep the per-call overhead to a few cell loads.
    """
    encode: Callable[..., bytes] = accelerator.encode
    rejected: type[Exception] = accelerator.Rejected
    format_float = _reference.format_float

    def canonical_bytes(value: object) -> bytes:
        """Hash-safe RFC 8785 bytes: no floats, integers within ±(2**53-1), no lone surrogates.

        Raises:
            CanonicalizationError: the value holds something that must not be hashed; the
                message starts with its JSON path.
        """
        try:
            return encode(value)
        except rejected:
            pass  # leave the except block so the path-bearing error is not chained to this one
        return _explain(value, _reference.canonical_bytes)

    def canonicalize(value: object) -> bytes:
        """Full RFC 8785 bytes: finite floats allowed, in ECMAScript's number form.

        Raises:
            CanonicalizationError: NaN or an infinity, an integer beyond ±(2**53-1), a lone
                surrogate, a non-str key, an unsupported type, or too deep nesting.
        """
        try:
            return encode(value, format_float)
        except (rejected, CanonicalizationError):
            pass
        return _explain(value, _reference.canonicalize)

    for function in (canonical_bytes, canonicalize):
        function.__qualname__ = function.__name__
        function.__module__ = __name__
    return canonical_bytes, canonicalize


_IMPLEMENTATIONS: Final[dict[str, tuple[_Encoder, _Encoder]]] = {
    "python": (_reference.canonical_bytes, _reference.canonicalize),
}
"""Every available implementation by name, for the tests and the benchmark."""

_accelerator = _load_accelerator()
if _accelerator is not None:
    _IMPLEMENTATIONS["c"] = _accelerated(_accelerator)


def _accelerated_prefix(accelerator: ModuleType) -> _PrefixBuilder:
    """Wrap the C ``record_prefix``: on a refusal the reference raises its own error."""
    build: _PrefixBuilder = accelerator.record_prefix
    rejected: type[Exception] = accelerator.Rejected
    reference = _reference.record_prefix

    def record_prefix(
        correlation_id: object, event_id: int, event_type: object, payload: object
    ) -> bytes:
        """``{"correlation_id":…,"event_id":"…","event_type":…,"payload":…`` (no closing
        brace): hash-safe canonical bytes of the three values and ``UUID(int=event_id)``'s
        text, as :func:`tracebound._canonical_py.record_prefix` writes them.

        Raises:
            CanonicalizationError: a value must not be hashed (path-bearing message).
            TypeError, ValueError: ``event_id`` is not an int in ``[0, 2**128)``.
        """
        try:
            return build(correlation_id, event_id, event_type, payload)
        except rejected:
            pass
        reference(correlation_id, event_id, event_type, payload)
        raise CanonicalizationError(
            "$: the C canonical encoder refused a value the reference accepts; please report this"
        )

    record_prefix.__qualname__ = record_prefix.__name__
    record_prefix.__module__ = __name__
    return record_prefix


_PREFIX_BUILDERS: Final[dict[str, _PrefixBuilder]] = {"python": _reference.record_prefix}
"""``record_prefix`` of every available implementation by name, for the tests."""
if _accelerator is not None and hasattr(_accelerator, "record_prefix"):
    _PREFIX_BUILDERS["c"] = _accelerated_prefix(_accelerator)

_IMPLEMENTATION: Final = (
    "c" if "c" in _IMPLEMENTATIONS and os.environ.get("TRACEBOUND_PURE_PYTHON") != "1" else "python"
)
"""The implementation behind the public functions: ``"c"`` unless unbuilt or opted out."""

canonical_bytes: _Encoder
canonicalize: _Encoder
canonical_bytes, canonicalize = _IMPLEMENTATIONS[_IMPLEMENTATION]

record_prefix: _PrefixBuilder = _PREFIX_BUILDERS.get(_IMPLEMENTATION, _reference.record_prefix)
"""The record's canonical prefix up to the payload, from its four leading values."""

utc_timestamp: Callable[[object], str | None] | None = (
    getattr(_accelerator, "utc_timestamp", None) if _IMPLEMENTATION == "c" else None
)
"""The accelerator's ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` of an exact ``datetime`` in
``datetime.UTC`` (None for anything else), or None when the C module is not in use;
``events/record.py`` falls back to Python formatting then."""

plain_values: Callable[[dict[str, Any], tuple[Any, ...]], dict[str, Any] | None] | None = (
    getattr(_accelerator, "plain_values", None) if _IMPLEMENTATION == "c" else None
)
"""The accelerator's loop of ``events/payload_json.py`` (a payload's JSON-mode dict from its
values and its class's plan), or None when the C module is not in use."""
