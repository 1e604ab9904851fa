"""Which payload model belongs to which ``event_type``, and how old versions are upcast.

The built-in catalog registers itself into :func:`default_registry`; user code adds its own
types with :func:`register_event`. A payload whose serialised schema admits a JSON number
that is not an integer is refused at registration: floats in hashed data would make a
writer and a verifier disagree on bytes (ARCHITECTURE.md, contract 3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, TypeVar

from pydantic import ValidationError

from tracebound.errors import EventTypeError, UnknownEventType, UpcastError, ValidationFailed
from tracebound.events.envelope import Payload

__all__ = ["EventRegistry", "Upcaster", "default_registry", "register_event"]

P = TypeVar("P", bound=type[Payload])
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


def _kind_of(cls: type[Payload]) -> str:
    field = cls.model_fields.get("kind")
    if field is None or not isinstance(field.default, str) or not field.default:
        raise EventTypeError(
            f"{cls.__name__} must declare `kind: Literal['name'] = 'name'` to be registered"
        )
    return field.default


def _floats_in_schema(node: Any, path: str = "$") -> Iterator[str]:
    """Yield the paths of a JSON schema where a non-integer number may appear."""
    if isinstance(node, dict):
        if node.get("type") == "number" or (
            isinstance(node.get("type"), list) and "number" in node["type"]
        ):
            yield path
        for key, value in node.items():
            yield from _floats_in_schema(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _floats_in_schema(value, f"{path}[{i}]")


def _upgrade_advice(cls: type[Payload]) -> str:
    """What to upgrade to read a newer version of ``cls``: tracebound for its own types,
    else the code that defines the type (an older deploy reading what a newer one wrote)."""
    if cls.__module__.split(".")[0] == "tracebound":
        return "upgrade tracebound to read it"
    return (
        f"deploy the newer {cls.__module__}.{cls.__qualname__} (the code that wrote it) to read it"
    )


class EventRegistry:
    """Maps ``kind`` to payload model, and (kind, old version) to an upcaster."""

    def __init__(self) -> None:
        self._types: dict[str, type[Payload]] = {}
        self._upcasters: dict[tuple[str, int], Upcaster] = {}

    def register(self, cls: P) -> P:
        """Register a payload model; usable as a class decorator."""
        kind = _kind_of(cls)
        existing = self._types.get(kind)
        if existing is not None and existing is not cls:
            raise EventTypeError(
                f"event type {kind!r} is already registered to {existing.__qualname__}"
            )
        floats = list(_floats_in_schema(cls.model_json_schema(mode="serialization")))
        if floats:
            raise EventTypeError(
                f"{cls.__name__} admits floats at {', '.join(floats)}; hashed data must use "
                "integers (micro-units, basis points) or decimal strings"
            )
        self._types[kind] = cls
        return cls

    def register_upcaster(self, kind: str, from_version: int, upcaster: Upcaster) -> None:
        """Register how to bring ``kind`` payloads from ``from_version`` to ``from_version+1``."""
        if (kind, from_version) in self._upcasters:
            raise EventTypeError(f"an upcaster for {kind!r} v{from_version} already exists")
        self._upcasters[(kind, from_version)] = upcaster

    def get(self, kind: str) -> type[Payload]:
        try:
            return self._types[kind]
        except (KeyError, TypeError):  # TypeError: a kind read from JSON may be a list
            if kind is None:
                raise UnknownEventType("the payload has no `kind`") from None
            raise UnknownEventType(f"no payload model is registered for {kind!r}") from None

    def kinds(self) -> list[str]:
        return sorted(self._types)

    def __contains__(self, kind: object) -> bool:
        return kind in self._types

    def decode_payload(self, kind: str, schema_version: int, data: Mapping[str, Any]) -> Payload:
        """Upcast ``data`` from ``schema_version`` to the current version and validate it."""
        cls = self.get(kind)
        current = cls.SCHEMA_VERSION
        if schema_version > current:
            raise UpcastError(
                f"{kind!r} payload has schema_version {schema_version}, newer than this "
                f"reader's {current}; {_upgrade_advice(cls)}"
            )
        raw = dict(data)
        for version in range(schema_version, current):
            upcaster = self._upcasters.get((kind, version))
            if upcaster is None:
                raise UpcastError(
                    f"no upcaster registered for {kind!r} v{version} -> v{version + 1}"
                )
            try:
                raw = upcaster(raw)
            except Exception as exc:  # an upcaster is user code: report it, typed
                raise UpcastError(f"upcaster for {kind!r} v{version} failed: {exc}") from exc
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            # `field` and `reason` name the first problem; the reason lists the others too,
            # so a caller fixing a payload sees them all at once.
            errors = exc.errors()
            first, *others = [
                (".".join(str(p) for p in err["loc"]) or "payload", err["msg"]) for err in errors
            ]
            reason = first[1]
            if others:
                shown = "; ".join(f"{kind}.{f}: {msg}" for f, msg in others[:_MORE_SHOWN])
                rest = len(others) - _MORE_SHOWN
                reason += f"; also {shown}" + (f" (and {rest} more)" if rest > 0 else "")
            raise ValidationFailed(f"{kind}.{first[0]}", reason) from exc


_MORE_SHOWN: Final = 11  # problems listed after the first

_DEFAULT = EventRegistry()


def default_registry() -> EventRegistry:
    """The process-wide registry that the built-in catalog and `register_event` fill."""
    return _DEFAULT


def register_event(cls: P) -> P:
    """Class decorator: register a user payload type in the default registry."""
    return _DEFAULT.register(cls)
