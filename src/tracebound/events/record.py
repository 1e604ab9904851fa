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

from collections.abc import Container, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple
from uuid import UUID

import orjson

from tracebound.canonical import canonical_bytes, record_prefix, utc_timestamp
from tracebound.errors import (
    DamageKind,
    IntegrityError,
    LedgerDamaged,
    UnknownEventType,
    UpcastError,
)
from tracebound.events.envelope import Event, RecordedEvent, format_timestamp
from tracebound.events.payload_json import payload_json
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
    "SUFFIX_FORMAT",
    "LedgerFields",
    "RawRecord",
    "decode_at",
    "decode_known",
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


_TYPE_JSON: dict[str, bytes] = {}
"""Canonical bytes of each event type seen: a handful of distinct strings, one per event."""

_WORKFLOW_JSON: dict[str, bytes] = {}
"""Canonical bytes of recent workflow ids (an append's events share theirs); bounded."""
_WORKFLOW_JSON_MAX: Final = 4096


def _workflow_json(value: str | None) -> bytes:
    """Canonical JSON of a workflow id (``null`` for None), remembered for plain ``str``."""
    if value is None:
        return b"null"
    cached = _WORKFLOW_JSON.get(value)
    if cached is None:
        cached = canonical_bytes(value)
        if type(value) is str:  # plain str keys only, as for _TYPE_JSON
            if len(_WORKFLOW_JSON) >= _WORKFLOW_JSON_MAX:
                _WORKFLOW_JSON.clear()
            _WORKFLOW_JSON[value] = cached
    return cached


def event_prefix(event: Event) -> bytes:
    """Canonical bytes of the record up to and including the payload (no closing brace).

    One :func:`~tracebound.canonical.record_prefix` call (in C when built) for an exact
    ``UUID`` id (its text is ``UUID(int=…)``'s); anything else takes
    :func:`_event_prefix_general`. Both write the same bytes; a test compares them.
    """
    event_id = event.event_id
    if type(event_id) is UUID:
        return record_prefix(
            event.correlation_id,
            event_id.int,
            event.event_type,
            payload_json(event.payload),
        )
    return _event_prefix_general(event)


def _event_prefix_general(event: Event) -> bytes:
    """:func:`event_prefix` for any event: one canonical call per value, ``str`` of the id."""
    event_type = event.event_type
    type_json = _TYPE_JSON.get(event_type)
    if type_json is None:
        type_json = canonical_bytes(event_type)
        if type(event_type) is str:  # cache only plain str keys: "1" never meets 1 or 1.0
            _TYPE_JSON[event_type] = type_json
    correlation_id = event.correlation_id
    return b'{"correlation_id":%s,"event_id":"%s","event_type":%s,"payload":%s' % (
        b"null" if correlation_id is None else canonical_bytes(correlation_id),
        str(event.event_id).encode(),
        type_json,
        canonical_bytes(payload_json(event.payload)),
    )


_utc_timestamp: Final = utc_timestamp


def _timestamp_text(value: datetime) -> str:
    """``format_timestamp(value)``, through ``datetime.isoformat`` when that is the same.

    For a datetime in UTC, ``isoformat(timespec="microseconds")`` is
    ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00`` (the year always four digits), which is
    ``format_timestamp``'s text with ``+00:00`` for ``Z``. Anything else (naive, another
    offset, a subclass) takes ``format_timestamp`` itself. With the C accelerator, the
    UTC case is formatted there (the same digits, ~30 ns instead of ~0.8 µs for
    ``isoformat``'s keyword call). Tests compare all of them.
    """
    if _utc_timestamp is not None:
        fast = _utc_timestamp(value)
        if fast is not None:
            return fast
    if type(value) is datetime and value.tzinfo is UTC:
        text = value.isoformat(timespec="microseconds")
        if len(text) == 32 and text.endswith("+00:00"):
            return text[:26] + "Z"
    return format_timestamp(value)


class LedgerFields:
    """The per-event values a store formats into the suffix; cached per event prefix.

    ``timestamp`` is canonical JSON (quoted); ``timestamp_text`` is the same without quotes,
    for a store's timestamp column.
    """

    __slots__ = ("schema_version", "timestamp", "timestamp_text", "workflow_id")

    def __init__(self, event: Event) -> None:
        text = _timestamp_text(event.timestamp)
        self.timestamp_text = text
        self.timestamp = b'"%s"' % text.encode()
        self.workflow_id = _workflow_json(event.workflow_id)
        self.schema_version = event.schema_version


SUFFIX_FORMAT = (
    b',"position":%d,"prev_hash":"%s","schema_version":%d,"stream_id":%s,'
    b'"stream_version":%d,"timestamp":%s,"workflow_id":%s}'
)
"""The record after the payload, as one ``%`` format: position, prev_hash (hex bytes),
schema_version, stream_id (canonical JSON), stream_version, timestamp and workflow_id
(both canonical JSON). Stores that format many suffixes use it directly."""


def record_suffix(
    fields: LedgerFields,
    *,
    position: int,
    prev_hash: bytes,
    stream_id_json: bytes,
    stream_version: int,
) -> bytes:
    """The rest of the record after the payload. ``stream_id_json`` is already canonical."""
    return SUFFIX_FORMAT % (
        position,
        prev_hash.hex().encode(),
        fields.schema_version,
        stream_id_json,
        stream_version,
        fields.timestamp,
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


_INT_FIELDS: Final = ("position", "stream_version")
_STR_FIELDS: Final = ("event_id", "event_type", "prev_hash", "stream_id", "timestamp")
_OPTIONAL_STR_FIELDS: Final = ("correlation_id", "workflow_id")


def _fields_typed(d: Any) -> dict[str, Any]:
    """``d``, if its envelope fields have their JSON types. The event is built without
    validation (``model_construct``), so a rewritten body's list would otherwise become a
    stream id, and UUID() of a number raise AttributeError.

    Raises:
        TypeError: ``d`` is not an object, or a field has another type.
        KeyError: a field is missing.
    """
    if not isinstance(d, dict):
        raise TypeError("the record is not a JSON object")
    for key in _INT_FIELDS:
        if type(d[key]) is not int:
            raise TypeError(f"{key} is not an integer")
    for key in _STR_FIELDS:
        if type(d[key]) is not str:
            raise TypeError(f"{key} is not a string")
    for key in _OPTIONAL_STR_FIELDS:
        if d[key] is not None and type(d[key]) is not str:
            raise TypeError(f"{key} is neither a string nor null")
    return d


def decode_record(
    body: bytes, hash_: bytes, registry: EventRegistry | None = None
) -> RecordedEvent:
    """Turn stored record bytes back into a typed event, upcasting old payload versions.

    This does not verify the hash; `verify` does that on the raw bytes, which is the
    point of storing them.
    """
    reg = registry or default_registry()
    try:
        d = _fields_typed(orjson.loads(body))
        try:
            payload = reg.decode_payload(d["event_type"], d["schema_version"], d["payload"])
        except UpcastError as exc:  # say which record: the chain never lets it be rewritten
            where = f"position {d['position']} (stream {d['stream_id']!r} v{d['stream_version']})"
            raise UpcastError(f"the record at {where}: {exc}") from exc
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


def decode_known(
    raws: Iterable[RawRecord],
    registry: EventRegistry | None = None,
    *,
    kinds: Container[str] | None = None,
) -> Iterator[RecordedEvent]:
    """Decode stored records as ``read_log`` does, skipping those of a type with no model here.

    For readers of tracebound's own events (runs, metrics, anchors): a ledger may also hold
    a team's own event types, registered only in the code that wrote them, and the CLI never
    imports that code. Skipping them is what a reader that does not know a type does with
    it anyway; ``verify`` still checks their bytes.

    ``kinds``: only records of these event types are decoded (by the store's event_type
    column, which ``verify`` checks against the body), the rest skipped undecoded; decoding
    is most of a reader's time, and most of a big log is of types a reader does not fold.

    Raises:
        LedgerDamaged: a record does not sit at the position it states.
    """
    for raw in raws:
        if kinds is not None and raw.event_type not in kinds:
            continue
        try:
            yield decode_at(raw.position, raw.hash, raw.body, registry)
        except UnknownEventType:
            continue


def decode_at(
    position: int, digest: bytes, body: bytes, registry: EventRegistry | None = None
) -> RecordedEvent:
    """:func:`decode_record` for a record read at ``position``, as every ``read_log`` reads.

    Raises:
        LedgerDamaged: the record says it is another position (REORDER).
    """
    event = decode_record(body, digest, registry)
    if event.position != position:
        raise LedgerDamaged(
            DamageKind.REORDER,
            position,
            f"the record stored here says it is position {event.position}",
        )
    return event
