"""A payload's JSON-mode values, without pydantic's serializer where that is provably the same.

Every append canonicalises its payload's ``model_dump(mode="json")``. For the flat payloads
most of the catalog is made of (text, integers, flags, literals, ids, money), pydantic's
serializer only copies each value, calls a field's plain serializer (money's
``_plain_decimal``) and builds a dict, yet it costs ~1.6 µs per 1 KB event.

So each payload class gets a *plan* once, read from its compiled core schema: for every
field, the exact Python types whose JSON-mode value is the value itself, and the plain
serializer function pydantic would call on any other value (a UUID's is ``str``). A class
whose schema holds anything else (nested models, lists, unions, aliases, excluded or
computed fields, model, wrap or method serializers, extra fields) gets no plan and keeps
pydantic's serializer. At run time a value of any other type (a ``str`` subclass, an enum,
a model built with ``model_construct``), or a serializer that fails, sends that payload
back to pydantic too: the plan never guesses. Tests compare both paths over the whole
catalog; the loop runs in C (``tracebound._canonical.plain_values``) when built, ~0.9 µs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final
from uuid import UUID

from pydantic import BaseModel

from tracebound.canonical import plain_values

__all__ = ["payload_json"]

_NONE: Final = type(None)
_MISSING: Final = object()
_SCALARS: Final[Mapping[str, type]] = {"str": str, "int": int, "bool": bool}
# Validators only: pydantic serializes these with their inner schema's serializer.
_VALIDATOR_WRAPPERS: Final = frozenset({"function-after", "function-before", "function-wrap"})
# Field keys that change nothing in a JSON-mode dump by default arguments.
_FIELD_KEYS: Final = frozenset({"type", "schema", "metadata", "validation_alias", "frozen"})

_PLAIN_SERIALIZER_KEYS: Final = frozenset(
    {"type", "function", "info_arg", "return_schema", "when_used"}
)

FieldPlan = tuple[str, tuple[type, ...], Callable[[Any], Any] | None]
"""A field's name, the exact types it passes through as they are, and the plain serializer
(or None) that pydantic would call on any other value (never on None)."""

_plain_values = plain_values  # the loop below, in C when built (tests swap it)

_PLANS: dict[type[BaseModel], tuple[FieldPlan, ...] | None] = {}


def payload_json(payload: BaseModel) -> Any:
    """``payload.model_dump(mode="json")``: the same dict, through a plan when one applies."""
    cls = type(payload)
    try:
        plan = _PLANS[cls]
    except KeyError:
        plan = _PLANS[cls] = _plan(cls)
    if plan is not None and payload.__pydantic_extra__ is None:
        if _plain_values is not None:
            fast = _plain_values(payload.__dict__, plan)
            if fast is not None:
                return fast
            return _pydantic_json(payload)
        values = payload.__dict__
        out: dict[str, Any] = {}
        for name, passed, serializer in plan:
            value = values.get(name, _MISSING)  # model_construct may leave a field out
            kind = type(value)
            if kind in passed:
                out[name] = value
            elif serializer is None or value is None or value is _MISSING:
                break
            else:
                try:
                    text = serializer(value)
                except Exception:  # noqa: BLE001 - pydantic raises its own error for it
                    break
                if type(text) is not str:
                    break
                out[name] = text
        else:
            return out
    return _pydantic_json(payload)


def _pydantic_json(payload: BaseModel) -> Any:
    """pydantic's own JSON-mode dump; its compiled serializer directly when ``model_dump``
    is pydantic's (only ``mode`` is given, so every other argument is the default)."""
    cls = type(payload)
    if cls.model_dump is BaseModel.model_dump:
        return cls.__pydantic_serializer__.to_python(payload, mode="json")
    return payload.model_dump(mode="json")


def _plan(cls: type[BaseModel]) -> tuple[FieldPlan, ...] | None:
    """The class's plan, or None when its dump is anything but field-by-field copies."""
    if cls.model_dump is not BaseModel.model_dump or cls.__pydantic_computed_fields__:
        return None
    schema: Mapping[str, Any] = cls.__pydantic_core_schema__
    while schema.get("type") in _VALIDATOR_WRAPPERS and "serialization" not in schema:
        schema = schema["schema"]  # a model validator: no effect on the dump
    if (
        schema.get("type") != "model"
        or schema.get("cls") is not cls
        or "serialization" in schema
        or schema.get("root_model")
        or schema.get("config", {}).get("extra_fields_behavior") == "allow"
    ):
        return None
    fields = schema["schema"]
    if fields.get("type") != "model-fields" or fields.get("computed_fields"):
        return None
    plan: list[FieldPlan] = []
    for name, field in fields["fields"].items():
        if not set(field) <= _FIELD_KEYS:
            return None
        found = _field_plan(field["schema"])
        if found is None:
            return None
        plan.append((name, *found))
    return tuple(plan)


def _field_plan(
    schema: Mapping[str, Any],
) -> tuple[tuple[type, ...], Callable[[Any], Any] | None] | None:
    """What a field's value schema passes through unchanged, and its plain serializer."""
    nullable = False
    while schema["type"] in {"default", "nullable"} and "serialization" not in schema:
        nullable = nullable or schema["type"] == "nullable"
        schema = schema["schema"]
    passed = {_NONE} if nullable else set()
    serialization = schema.get("serialization")
    if serialization is not None:
        # A plain function serializer without info: pydantic calls it on every non-None
        # value in JSON mode, whatever its when_used, and keeps a str result as it is.
        # (A field_serializer method is called with the model too: not this.)
        if (
            serialization.get("type") != "function-plain"
            or not set(serialization) <= _PLAIN_SERIALIZER_KEYS
            or serialization.get("info_arg")
            or serialization.get("return_schema", {}).get("type") != "str"
        ):
            return None
        return tuple(passed), serialization["function"]
    while schema["type"] in _VALIDATOR_WRAPPERS and "serialization" not in schema:
        schema = schema["schema"]
    if "serialization" in schema:
        return None
    if schema["type"] == "uuid":
        return tuple(passed), _uuid_text
    scalar = _scalar_types(schema)
    if scalar is None:
        return None
    return tuple(passed | scalar), None


def _uuid_text(value: UUID) -> str:
    """A UUID field's JSON-mode value, as pydantic writes it; an error (so pydantic decides)
    for anything but an exact ``UUID``."""
    if type(value) is not UUID:
        raise TypeError(type(value).__name__)
    return str(value)


def _scalar_types(schema: Mapping[str, Any]) -> set[type] | None:
    """The exact types a scalar schema's JSON-mode serializer returns unchanged."""
    kind = schema["type"]
    if kind in _SCALARS:
        return {_SCALARS[kind]}
    if kind == "none":
        return {_NONE}
    if kind == "literal":
        types = {type(value) for value in schema["expected"]}
        return types if types <= {str, int, bool, _NONE} else None
    return None
