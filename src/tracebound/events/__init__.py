"""Typed events: the envelope, the registry of payload types, and the built-in catalog."""

from tracebound.events import catalog as catalog  # registers the built-in payload types
from tracebound.events.anchor import (
    ANCHOR_ADAPTER,
    AnyAttemptAnchor,
    AttemptAnchor,
    BasisPoints,
    Money,
    SignedMoney,
    UtcDateTime,
)
from tracebound.events.catalog import BUILTIN_PAYLOAD_TYPES, BuiltinPayload
from tracebound.events.envelope import Event, Payload, RecordedEvent, format_timestamp
from tracebound.events.registry import EventRegistry, default_registry, register_event

__all__ = [
    "ANCHOR_ADAPTER",
    "BUILTIN_PAYLOAD_TYPES",
    "AnyAttemptAnchor",
    "AttemptAnchor",
    "BasisPoints",
    "BuiltinPayload",
    "Event",
    "EventRegistry",
    "Money",
    "Payload",
    "RecordedEvent",
    "SignedMoney",
    "UtcDateTime",
    "catalog",
    "default_registry",
    "format_timestamp",
    "register_event",
]
