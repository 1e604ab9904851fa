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
        self._trusted: set[tuple[str, int]] = set()

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

    def register_upcaster(
        self, kind: str, from_version: int, upcaster: Upcaster, *, trusted: bool = False
    ) -> None:
        """Register how to bring ``kind`` payloads from ``from_version`` to ``from_version+1``.

        ``trusted``: the upcaster only adds or sets fields to values valid as they are (in
        JSON form), so what it returns from a valid payload needs no validation. A
        projection's read path then takes its output as it takes a current record's stored
        payload (:meth:`upcast_trusted`); any other upcaster's output is validated.
        """
        if (kind, from_version) in self._upcasters:
            raise EventTypeError(f"an upcaster for {kind!r} v{from_version} already exists")
        self._upcasters[(kind, from_version)] = upcaster
        if trusted:
            self._trusted.add((kind, from_version))

    def upcast_trusted(
        self, kind: str, schema_version: int, data: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """``data``, an older version's payload in JSON form, brought to the current
        version by trusted upcasters alone, unvalidated, each field it lacks at its default.

        None when that cannot be done without validating (a step not trusted, a version not
        older than the current one, an upcaster that fails, a missing field that is required
        or whose default is not plain JSON): the caller then uses :meth:`decode_payload`,
        which validates and reports. The ledger's hash chain vouches for the stored payload,
        as it does for a current record's, which the read path never re-validates.
        """
        cls = self._types.get(kind)
        if cls is None or not isinstance(data, Mapping) or not schema_version < cls.SCHEMA_VERSION:
            return None
        raw = dict(data)
        for version in range(schema_version, cls.SCHEMA_VERSION):
            if (kind, version) not in self._trusted:
                return None
            try:
                raw = self._upcasters[(kind, version)](raw)
            except Exception:  # noqa: BLE001 - decode_payload reports it, typed
                return None
        return _with_defaults(cls, raw)

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


def _with_defaults(cls: type[Payload], raw: object) -> dict[str, Any] | None:
    """``raw`` with each field of ``cls`` it lacks at its default, or None when validation
    must say what is wrong with it (a key ``cls`` has no field for, a required field
    missing) or a default is not plain JSON."""
    fields = cls.model_fields
    if not isinstance(raw, dict) or not raw.keys() <= fields.keys():
        return None
    for name, field in fields.items():
        if name not in raw:
            if field.is_required():
                return None
            default = field.get_default(call_default_factory=True)
            if default is not None and type(default) not in (str, int, bool):
                return None
            raw[name] = default
    return raw


_DEFAULT = EventRegistry()


def default_registry() -> EventRegistry:
    """The process-wide registry that the built-in catalog and `register_event` fill."""
    return _DEFAULT


def register_event(cls: P) -> P:
    """Class decorator: register a user payload type in the default registry."""
    return _DEFAULT.register(cls)
