"""The exact bytes that the chain hashes, and how they are read back.

The record is the RFC 8785 object of the envelope plus ledger fields, without ``hash``.
RFC 8785 sorts keys, and the sort puts every field the store assigns *after* ``payload``::

    {"correlation_id":…,"event_id":…,"event_type":…,"payload":{…},
     "position":…,"prev_hash":…,"schema_version":…,"stream_id":…,"stream_version":…,
     "timestamp":…,"workflow_id":…}

So the costly part, the payload, is canonicalised by the writer before it takes the store's
lock (:func:`event_prefix`), and the store only appends a short suffix it formats itself
(:func:`record_suffix`). ``prefix + suffix`` is byte-for-byte ``canonical_bytes(record)``;
a test holds that equality.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

import orjson

from tracebound.canonical import canonical_bytes
from tracebound.errors import IntegrityError
from tracebound.events.envelope import Event, RecordedEvent, format_timestamp
from tracebound.events.registry import EventRegistry, default_registry
from tracebound.ids import (
    ChainHead,
    CorrelationId,
    EventId,
    EventType,
    Position,
    StreamId,
    StreamVersion,
    WorkflowId,
)

__all__ = [
    "LedgerFields",
    "RawRecord",
    "decode_record",
    "event_prefix",
    "record_dict",
    "record_suffix",
]


class RawRecord(NamedTuple):
    """A stored record exactly as written: what `verify` re-hashes without decoding.

    ``body`` is the canonical record without ``hash``; the other fields are the store's
    columns, which `verify` checks against ``body`` so that an index cannot lie either.
    """

    position: int
    stream_id: str
    stream_version: int
    event_type: str
    workflow_id: str | None
    timestamp: str
    schema_version: int
    prev_hash: bytes
    hash: bytes
    body: bytes


def _json_str(value: str | None) -> bytes:
    return b"null" if value is None else canonical_bytes(value)


def event_prefix(event: Event) -> bytes:
    """Canonical bytes of the record up to and including the payload (no closing brace)."""
    payload = canonical_bytes(event.payload.model_dump(mode="json"))
    return b"".join(
        (
            b'{"correlation_id":',
            _json_str(event.correlation_id),
            b',"event_id":"',
            str(event.event_id).encode(),
            b'","event_type":',
            canonical_bytes(event.event_type),
            b',"payload":',
            payload,
        )
    )


class LedgerFields:
    """The per-event values a store formats into the suffix; cached per event prefix."""

    __slots__ = ("schema_version", "timestamp", "workflow_id")

    def __init__(self, event: Event) -> None:
        self.timestamp = canonical_bytes(format_timestamp(event.timestamp))
        self.workflow_id = _json_str(event.workflow_id)
        self.schema_version = event.schema_version


def record_suffix(
    fields: LedgerFields,
    *,
    position: int,
    prev_hash: bytes,
    stream_id_json: bytes,
    stream_version: int,
) -> bytes:
    """The rest of the record after the payload. ``stream_id_json`` is already canonical."""
    return b"%s%d%s%s%s%d%s%s%s%d%s%s%s%s}" % (
        b',"position":',
        position,
        b',"prev_hash":"',
        prev_hash.hex().encode(),
        b'","schema_version":',
        fields.schema_version,
        b',"stream_id":',
        stream_id_json,
        b',"stream_version":',
        stream_version,
        b',"timestamp":',
        fields.timestamp,
        b',"workflow_id":',
        fields.workflow_id,
    )


def record_dict(recorded: RecordedEvent) -> dict[str, Any]:
    """The record without ``hash`` as plain JSON data (the slow, obviously-correct path)."""
    return {
        "correlation_id": recorded.correlation_id,
        "event_id": str(recorded.event_id),
        "event_type": recorded.event_type,
        "payload": recorded.payload.model_dump(mode="json"),
        "position": recorded.position,
        "prev_hash": recorded.prev_hash.hex(),
        "schema_version": recorded.schema_version,
        "stream_id": recorded.stream_id,
        "stream_version": recorded.stream_version,
        "timestamp": format_timestamp(recorded.timestamp),
        "workflow_id": recorded.workflow_id,
    }


def decode_record(
    body: bytes, hash_: bytes, registry: EventRegistry | None = None
) -> RecordedEvent:
    """Turn stored record bytes back into a typed event, upcasting old payload versions.

    This does not verify the hash; `verify` does that on the raw bytes, which is the
    point of storing them.
    """
    reg = registry or default_registry()
    try:
        d = orjson.loads(body)
        payload = reg.decode_payload(d["event_type"], d["schema_version"], d["payload"])
        return RecordedEvent.model_construct(
            event_id=EventId(UUID(d["event_id"])),
            event_type=EventType(d["event_type"]),
            workflow_id=None if d["workflow_id"] is None else WorkflowId(d["workflow_id"]),
            timestamp=datetime.fromisoformat(d["timestamp"]),
            payload=payload,
            correlation_id=None
            if d["correlation_id"] is None
            else CorrelationId(d["correlation_id"]),
            schema_version=type(payload).SCHEMA_VERSION,
            stream_id=StreamId(d["stream_id"]),
            stream_version=StreamVersion(d["stream_version"]),
            position=Position(d["position"]),
            prev_hash=ChainHead(bytes.fromhex(d["prev_hash"])),
            hash=ChainHead(hash_),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise IntegrityError(f"stored record cannot be decoded: {exc}") from exc
