"""Validate TPC artifacts, handoff envelopes and ARL entries against both forms of the contract.

Each ``validate_*`` runs the hand-written JSON Schema first (the contract other languages
read) and then the pydantic model (which adds the rules JSON Schema cannot state, such as
``p50_ms <= p95_ms``, and refuses what Python's ``re`` lets through, such as a newline before
``$``). Either failure becomes one :class:`~tracebound.errors.ValidationFailed` whose
``field`` is a dotted path (``handoff_envelope.required_validations``,
``outputs.artifacts[0]``; ``$`` is the document itself) and whose ``reason`` is plain words.

Schemas are read from package data with :mod:`importlib.resources` and compiled once.
Format checking is on, with tracebound's own ``date-time`` checker: jsonschema checks
``date-time`` only when an optional package is installed, and a contract must not depend on
what else happens to be installed.

The JSON Schema pass has two validators (ADR 0008). ``jsonschema`` is the reference: it
decides what is invalid and explains it (``best_match``). Two of its keywords are replaced:
``pattern`` reads ``$`` as the end of the text, as ECMA 262 does (Python's also matches
before a final newline), and ``uniqueItems`` is linear (jsonschema compares every pair of
items that do not sort). A ``$ref`` is only ever looked up in the two packaged schemas;
nothing is fetched. A compiled ``jsonschema-rs``
validator is asked "valid?" first, and is trusted only when it says yes; on no, on an
error, or for a value that is not plain JSON, the reference runs exactly as before. The
fast path is built to be at least as strict as the reference (its schema copy spells
``\\s`` and ``\\S`` as Python's ``re`` reads them, its format checks are the reference's own
functions), and ``test_contract_fast_path.py`` checks that it accepts nothing the
reference refuses. Every error is still the reference's, field and reason alike; a valid
artifact is checked about 30 times faster.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any, Final, Literal, TypeVar

import jsonschema_rs
from jsonschema import Draft202012Validator, FormatChecker  # type: ignore[import-untyped]  # jsonschema has no py.typed
from jsonschema import validators as jsonschema_validators
from jsonschema.exceptions import SchemaError as BadSchema  # type: ignore[import-untyped]  # jsonschema has no py.typed
from jsonschema.exceptions import ValidationError as SchemaError
from jsonschema.exceptions import best_match
from pydantic import BaseModel
from pydantic import ValidationError as ModelError
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable

from tracebound.contract._types import INVARIANT_ERROR, PATTERN_REASONS
from tracebound.contract.arl import ARLEntry
from tracebound.contract.tpc import HandoffEnvelope, TPCArtifact
from tracebound.errors import ContractError, ValidationFailed

__all__ = [
    "ARL_SCHEMA_ID",
    "TPC_SCHEMA_ID",
    "load_schema",
    "validate_arl",
    "validate_envelope",
    "validate_tpc",
]

TPC_SCHEMA_ID: Final = "https://tracebound.dev/schemas/agent/tpc.schema.json"
ARL_SCHEMA_ID: Final = "https://tracebound.dev/schemas/agent/arl.schema.json"
_SCHEMA_FILES: Final[dict[str, str]] = {"tpc": "tpc.schema.json", "arl": "arl.schema.json"}
_ENVELOPE_REF: Final = f"{TPC_SCHEMA_ID}#/$defs/HandoffEnvelope"

_M = TypeVar("_M", bound=BaseModel)

# --- schemas ---------------------------------------------------------------------------------


@cache
def _schema_text(name: str) -> str:
    return (
        resources.files("tracebound.contract")
        .joinpath("schemas", _SCHEMA_FILES[name])
        .read_text(encoding="utf-8")
    )


def load_schema(name: Literal["tpc", "arl"]) -> dict[str, Any]:
    """A fresh copy of the packaged JSON Schema ``"tpc"`` or ``"arl"`` (safe to mutate)."""
    if name not in _SCHEMA_FILES:
        raise ContractError(f"no contract schema named {name!r}; choose 'tpc' or 'arl'")
    schema: dict[str, Any] = json.loads(_schema_text(name))
    return schema


_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def _is_rfc3339(value: object) -> bool:
    if not isinstance(value, str):
        return True  # formats only constrain strings; `type` refuses the rest
    if not _RFC3339.fullmatch(value):
        return False
    try:
        # Range checks (month 13, 25:00, Feb 30); a leap second (:60) is refused too.
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _format_checker() -> Any:
    checker = FormatChecker(formats=("uuid",))
    checker.checks("date-time")(_is_rfc3339)
    return checker


_CLASS_OPENER: Final = re.compile(r"\[\^?\]?")
"""``[`` or ``[^``, with a ``]`` right after it, which is a member, not the class's end."""


def _pattern_tokens(pattern: str) -> Iterator[tuple[str, bool]]:
    """``pattern``'s tokens (an escape pair, a class opener, or one character), each with
    whether it lies inside a character class: the two rewriters below read it alike."""
    in_class = False
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\":
            piece = pattern[i : i + 2]
        elif pattern[i] == "[" and not in_class:
            match = _CLASS_OPENER.match(pattern, i)
            assert match is not None  # pattern[i] is "["
            piece = match.group()
        else:
            piece = pattern[i]
        yield piece, in_class
        if piece[0] == "[" and not in_class:
            in_class = True
        elif piece == "]":
            in_class = False
        i += len(piece)


@cache
def _reference_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled with every ``$`` (outside a class, unescaped) read as ``\\Z``.

    Python's ``$`` also matches before a final newline; ECMA 262's, which JSON Schema
    names, and jsonschema-rs's do not. So ``"0.02\\n"`` would pass the money pattern in
    the reference, and the model (a Decimal) would quietly drop the newline.
    """
    tokens = _pattern_tokens(pattern)
    return re.compile("".join("\\Z" if t == "$" and not inside else t for t, inside in tokens))


def _pattern_keyword(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not _reference_pattern(pattern).search(instance):
        yield SchemaError(f"does not match {pattern!r}")


_JSON_KEY_SCALARS: Final = {str: "s", int: "n", float: "n", bool: "b", type(None): "z"}


def _json_key(value: object) -> object:
    """A hashable stand-in for plain JSON ``value``, equal exactly when jsonschema's
    ``equal`` says the values are (``1 == 1.0``, ``True != 1``, key order ignored).

    Raises:
        TypeError: ``value`` is not plain JSON, or is a NaN (equal only to itself there).
    """
    kind = type(value)
    if kind is dict:
        assert isinstance(value, dict)
        if not all(type(key) is str for key in value):
            raise TypeError("a key that is not a string")
        return ("d", frozenset((key, _json_key(item)) for key, item in value.items()))
    if kind is list:
        assert isinstance(value, list)
        return ("l", tuple(_json_key(item) for item in value))
    if kind not in _JSON_KEY_SCALARS or (isinstance(value, float) and math.isnan(value)):
        raise TypeError("not plain JSON")
    return (_JSON_KEY_SCALARS[kind], value)


_UNIQUE_ITEMS: Final = Draft202012Validator.VALIDATORS["uniqueItems"]


def _unique_items(validator: Any, unique: bool, instance: Any, schema: Any) -> Any:
    """``uniqueItems`` in linear time for plain JSON.

    jsonschema sorts the items, and when they do not sort (objects, or a string and a
    number) compares every pair: 20 000 small objects took over a minute. Anything that is
    not plain JSON still gets jsonschema's own check.
    """
    if not (unique and validator.is_type(instance, "array")):
        return
    try:
        keys = [_json_key(item) for item in instance]
    except TypeError:
        yield from _UNIQUE_ITEMS(validator, unique, instance, schema)
        return
    if len(set(keys)) != len(keys):
        yield SchemaError("has non-unique elements")


_Reference: Final = jsonschema_validators.extend(
    Draft202012Validator, {"pattern": _pattern_keyword, "uniqueItems": _unique_items}
)
"""Draft 2020-12 as jsonschema implements it, but for ``$`` and the speed of ``uniqueItems``."""


@cache
def _validator(name: str) -> Any:
    """The reference validator: it alone decides that a document is invalid, and why."""
    tpc, arl = load_schema("tpc"), load_schema("arl")
    registry: Registry[Any] = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema)) for schema in (tpc, arl)
    )
    schema = {"tpc": tpc, "arl": arl, "envelope": {"$ref": _ENVELOPE_REF}}[name]
    try:
        Draft202012Validator.check_schema(schema)
    except BadSchema as exc:
        raise ContractError(f"the {name!r} contract schema is not valid: {exc.message}") from exc
    return _Reference(schema, registry=registry, format_checker=_format_checker())


# --- the fast path ---------------------------------------------------------------------------

# Every character Python's ``re`` matches with ``\s`` in a str pattern (exactly those for which
# ``str.isspace()`` is true). jsonschema-rs reads ``\s`` the ECMA-262 way, which leaves out
# U+001C..U+001F and U+0085 and adds U+FEFF: ``"\x1c"`` would pass ``\S`` there and fail it
# here. A test compares this class with ``re`` over every code point.
_PYTHON_WHITESPACE: Final = (
    r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _rust_pattern(pattern: str) -> str:
    """``pattern`` rewritten so that jsonschema-rs matches what Python's ``re`` matches.

    ``\\s`` and ``\\S`` become explicit classes; escaped punctuation and every other character
    mean the same in both engines (``$`` too: the reference reads it as the end of the text,
    see :func:`_reference_pattern`).
    Any other escape (``\\d``, ``\\w``, ``\\b``, ...) differs between the engines somewhere,
    so it is refused rather than guessed at: whoever adds one to a schema must teach this
    function (and its test) what it means.

    Raises:
        ContractError: the pattern uses a construct whose meaning is not checked here.
    """
    out: list[str] = []
    at = 0
    for piece, in_class in _pattern_tokens(pattern):
        at += len(piece)
        if piece in {"[]", "[^]"}:
            raise ContractError(f"schema pattern {pattern!r}: a class starting with ']'")
        if piece[0] != "\\":
            out.append(piece)
            continue
        escaped = piece[1:]
        if escaped in {"s", "S"} and not in_class:
            out.append(f"[{'^' if escaped == 'S' else ''}{_PYTHON_WHITESPACE}]")
        elif escaped and not escaped.isalnum() and escaped.isascii():
            out.append(piece)
        else:
            raise ContractError(
                f"schema pattern {pattern!r} uses \\{escaped} at {at - len(piece)}, which Python's "
                "re and jsonschema-rs may read differently; teach _rust_pattern() about it"
            )
    return "".join(out)


def _rust_schema(node: Any) -> Any:
    """A copy of a schema with every ``pattern`` keyword rewritten by :func:`_rust_pattern`."""
    if isinstance(node, dict):
        return {
            key: _rust_pattern(value)
            if key == "pattern" and isinstance(value, str)
            else _rust_schema(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_rust_schema(item) for item in node]
    return node


@cache
def _fast_validator(name: str) -> jsonschema_rs.Validator:
    tpc, arl = (_rust_schema(load_schema(n)) for n in ("tpc", "arl"))
    try:
        registry = jsonschema_rs.Registry([(tpc["$id"], tpc), (arl["$id"], arl)])
    except (ValueError, jsonschema_rs.ReferencingError) as exc:
        raise ContractError(f"the contract schemas cannot be registered: {exc}") from exc
    schema = {"tpc": tpc, "arl": arl, "envelope": {"$ref": _ENVELOPE_REF}}[name]
    checker = _format_checker()
    # The reference's own format functions (``conforms`` also turns their exceptions into
    # False), so a format means the same to both; a format only jsonschema-rs knows is
    # stricter there, never looser.
    formats = {
        fmt: (lambda value, fmt=fmt: bool(checker.conforms(value, fmt))) for fmt in checker.checkers
    }
    try:
        return jsonschema_rs.Draft202012Validator(
            schema, registry=registry, formats=formats, validate_formats=True, offline=True
        )
    except (ValueError, jsonschema_rs.ReferencingError) as exc:
        # Our own packaged schema (rewritten by _rust_schema) does not compile: a defect of
        # the contract, not of the document, and loud rather than a silent slow path.
        raise ContractError(f"the {name!r} contract schema does not compile: {exc}") from exc


_JSON_SCALARS: Final = frozenset({str, int, float, bool, type(None)})
_CONTAINERS_UNCHECKED: Final = 100_000
"""Dicts and lists walked before :func:`_plain_json` looks for a cycle: far more than any
contract document holds, so that a real document never pays for the check."""
_LEAVE: Final = object()
"""Pushed after a container's children: popping it takes the container off the path."""


def _plain_json(document: object) -> bool:
    """Whether ``document`` is built only of exactly dict (str keys), list, str, int, float,
    bool and None.

    jsonschema-rs reads a tuple as an array and an ``Enum`` member as its value, where the
    reference refuses both (``type: array`` means ``list`` to it); anything else, subclasses
    included, goes to the reference too. Iterative: no recursion limit to hit.

    A dict or list that contains itself would be walked for ever; after
    ``_CONTAINERS_UNCHECKED`` containers, :func:`_refuse_cycles` walks the document once
    more and refuses a cycle (a long walk is otherwise just a big document).

    Raises:
        ValidationFailed: a dict or list contains itself (no JSON text can say that).
    """
    stack = [document]
    budget = _CONTAINERS_UNCHECKED
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is dict:
            assert isinstance(value, dict)
            if not all(type(key) is str for key in value):
                return False
            stack.extend(value.values())
        elif kind is list:
            assert isinstance(value, list)
            stack.extend(value)
        elif kind not in _JSON_SCALARS:
            return False
        else:
            continue
        budget -= 1
        if budget == 0:
            _refuse_cycles(document)  # raises on a cycle; then the walk is finite
    return True


def _refuse_cycles(document: object) -> None:
    """Raise if a dict or list in ``document`` contains itself; shared values are fine.

    The walk keeps the ids of the containers on the path from the root: meeting one of
    them again is a cycle, meeting a container seen elsewhere is only sharing.
    """
    stack = [document]
    path: set[int] = set()
    open_ids: list[int] = []  # the ids in path, in order, for _LEAVE to pop
    while stack:
        value = stack.pop()
        if value is _LEAVE:
            path.discard(open_ids.pop())
            continue
        kind = type(value)
        if kind is not dict and kind is not list:
            continue  # scalars, and values that are not JSON: _plain_json stops at those
        ident = id(value)
        if ident in path:
            raise ValidationFailed(
                "$", "must not contain itself: a list or object holds a reference to itself"
            )
        path.add(ident)
        open_ids.append(ident)
        stack.append(_LEAVE)
        assert isinstance(value, dict | list)
        stack.extend(value.values() if isinstance(value, dict) else value)


def _fast_accepts(name: Literal["tpc", "envelope", "arl"], document: object) -> bool:
    """True only if the compiled validator accepts ``document`` as plain JSON.

    False means "ask the reference", not "invalid": the reference alone refuses documents.
    """
    if not _plain_json(document):
        return False
    validator = _fast_validator(
        name
    )  # outside the try: a schema it cannot compile must fail loudly
    try:
        return validator.is_valid(document)
    except Exception:  # noqa: BLE001 - any doubt (e.g. a lone surrogate) goes to the reference
        return False


# --- turning errors into (field, reason) -----------------------------------------------------


def _path(parts: tuple[Any, ...] | list[Any]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "$"


_TYPE_WORDS: Final = {
    "string": "a string",
    "array": "an array",
    "object": "a JSON object",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}
_FORMAT_WORDS: Final = {
    "date-time": "must be an RFC 3339 date-time with a time zone, e.g. 2026-01-01T00:00:00Z",
    "uuid": "must be a UUID",
}


def _type_words(types: str | list[str]) -> str:
    return " or ".join(
        _TYPE_WORDS.get(t, t) for t in ([types] if isinstance(types, str) else types)
    )


def _pattern_reason(pattern: str) -> str:
    return PATTERN_REASONS.get(pattern, f"must match the pattern {pattern}")


def _items_reason(minimum: int, noun: str) -> str:
    return "must not be empty" if minimum == 1 else f"must have at least {minimum} {noun}"


def _schema_reason(error: SchemaError) -> tuple[list[Any], str]:
    path = list(error.absolute_path)
    kind: str = error.validator
    value: Any = error.validator_value
    instance: Any = error.instance
    if kind == "required":
        missing = next(name for name in value if name not in instance)
        return [*path, missing], "is required"
    if kind == "additionalProperties":
        allowed = set(error.schema.get("properties", {}))
        odd = [name for name in instance if not isinstance(name, str)]
        if odd:  # only a Python caller can build one; sorted() would raise on it
            return path, f"has a key that is not a string ({type(odd[0]).__name__})"
        extra = next(name for name in sorted(instance) if name not in allowed)
        return [*path, extra], "is not an allowed field"
    simple: dict[str, Callable[[], str]] = {
        "type": lambda: "must be " + _type_words(value),
        "enum": lambda: "must be one of: " + ", ".join(str(v) for v in value),
        "const": lambda: f"must be {value!r}",
        "minItems": lambda: _items_reason(value, "items"),
        "minLength": lambda: _items_reason(value, "characters"),
        "pattern": lambda: _pattern_reason(value),
        "format": lambda: _FORMAT_WORDS.get(value, f"must be a valid {value}"),
        "minimum": lambda: f"must be at least {value}",
        "maximum": lambda: f"must be at most {value}",
        "uniqueItems": lambda: "must not contain duplicates",
    }
    reason = simple[kind]() if kind in simple else str(error.message)
    return path, reason


def _model_reason(error: Mapping[str, Any]) -> tuple[list[Any], str]:
    path = list(error["loc"])
    kind: str = error["type"]
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    if kind == INVARIANT_ERROR:
        return [*path, *str(ctx["field"]).split(".")], str(ctx["reason"])
    words: dict[str, Callable[[], str]] = {
        "missing": lambda: "is required",
        "extra_forbidden": lambda: "is not an allowed field",
        "too_short": lambda: _items_reason(ctx.get("min_length", 1), "items"),
        "string_too_short": lambda: _items_reason(ctx.get("min_length", 1), "characters"),
        "string_pattern_mismatch": lambda: _pattern_reason(str(ctx.get("pattern"))),
        "literal_error": lambda: f"must be one of: {ctx.get('expected')}",
        "int_type": lambda: "must be an integer, not a float or a string",
        "int_from_float": lambda: "must be an integer, not a float",
        "greater_than_equal": lambda: f"must be at least {ctx.get('ge')}",
        "less_than_equal": lambda: f"must be at most {ctx.get('le')}",
    }
    if kind in words:
        return path, words[kind]()
    message = str(error["msg"]).removeprefix("Value error, ")
    return path, message[:1].lower() + message[1:]


def _check(name: Literal["tpc", "envelope", "arl"], model: type[_M], data: Mapping[str, Any]) -> _M:
    if not isinstance(data, Mapping):
        raise ValidationFailed("$", f"must be a JSON object, not {type(data).__name__}")
    document = dict(data)
    if not _fast_accepts(name, document):
        try:
            error = best_match(_validator(name).iter_errors(document))
        except RecursionError:
            # Nested past the interpreter's limit, or a cycle through a value that is not
            # plain JSON (a tuple inside a list inside the tuple): no contract document is.
            raise ValidationFailed("$", "is nested too deeply, or contains itself") from None
        except (ArithmeticError, TypeError, ValueError):
            # A value that is not plain JSON and that the reference cannot even compare,
            # e.g. Decimal("NaN") in an array it checks for duplicates (uniqueItems sorts).
            raise ValidationFailed("$", "holds a value that is not plain JSON") from None
        except Unresolvable as exc:
            # A $ref in our own packaged schema names nothing the registry holds (nothing is
            # ever fetched): the contract is broken, not the document.
            raise ContractError(
                f"the {name!r} contract schema has a $ref that cannot be resolved: {exc}"
            ) from exc
        if error is not None:
            parts, reason = _schema_reason(error)
            raise ValidationFailed(_path(parts), reason)
    try:
        return model.model_validate(document)
    except ModelError as exc:
        first = exc.errors(include_url=False)[0]
        parts, reason = _model_reason(first)
        raise ValidationFailed(_path(parts), reason) from None


# --- the API ---------------------------------------------------------------------------------


def validate_tpc(data: Mapping[str, Any]) -> TPCArtifact:
    """Check a step's TPC artifact (envelope included) and return it as a frozen model.

    Raises:
        ValidationFailed: the artifact breaks the contract; ``field`` says where.
    """
    return _check("tpc", TPCArtifact, data)


def validate_envelope(data: Mapping[str, Any]) -> HandoffEnvelope:
    """Check a handoff envelope on its own, as the receiving role does before it starts.

    Raises:
        ValidationFailed: a field is missing, a set is empty, or a value is malformed.
    """
    return _check("envelope", HandoffEnvelope, data)


def validate_arl(data: Mapping[str, Any]) -> ARLEntry:
    """Check one Agent Run Ledger entry and return it as a frozen model.

    Raises:
        ValidationFailed: the entry breaks the contract; ``field`` says where.
    """
    return _check("arl", ARLEntry, data)
