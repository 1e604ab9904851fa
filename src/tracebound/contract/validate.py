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
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any, Final, Literal, TypeVar

from jsonschema import Draft202012Validator, FormatChecker  # type: ignore[import-untyped]  # jsonschema has no py.typed
from jsonschema.exceptions import ValidationError as SchemaError  # type: ignore[import-untyped]  # jsonschema has no py.typed
from jsonschema.exceptions import best_match
from pydantic import BaseModel
from pydantic import ValidationError as ModelError
from referencing import Registry, Resource

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


@cache
def _validator(name: str) -> Any:
    tpc, arl = load_schema("tpc"), load_schema("arl")
    registry: Registry[Any] = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema)) for schema in (tpc, arl)
    )
    schema = {"tpc": tpc, "arl": arl, "envelope": {"$ref": _ENVELOPE_REF}}[name]
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=registry, format_checker=_format_checker())


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


def _check(name: str, model: type[_M], data: Mapping[str, Any]) -> _M:
    if not isinstance(data, Mapping):
        raise ValidationFailed("$", f"must be a JSON object, not {type(data).__name__}")
    document = dict(data)
    error = best_match(_validator(name).iter_errors(document))
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
