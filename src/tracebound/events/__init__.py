"""Typed events: the envelope, the registry of payload types, and the built-in catalog."""

from tracebound.events import catalog as catalog  # registers the built-in payload types
from tracebound.events.envelope import Event, Payload, RecordedEvent, format_timestamp
from tracebound.events.registry import EventRegistry, default_registry, register_event

__all__ = [
    "Event",
    "EventRegistry",
    "Payload",
    "RecordedEvent",
    "catalog",
    "default_registry",
    "format_timestamp",
    "register_event",
]
