"""The read path: ledger records as plain dicts, decoded once with orjson, never re-validated.

Every payload was validated by its model before the ledger hashed it, and the chain makes
the stored bytes tamper-evident (``verify`` checks them). Validating them again on every
read would only repeat that work: pydantic's ``model_validate_json`` runs at about a
quarter-million records a second here, which alone is below the projections' throughput
target. So the runner reads the raw canonical bodies (:meth:`LogStore.read_raw`), decodes
them with orjson, and hands projections the dicts.

The one exception is schema evolution. A record written at an older ``schema_version`` of
its payload type is brought up to date through the registry's upcasters, which validates
it (:meth:`EventRegistry.decode_payload`); such records are rare, live only during a
migration window, and must read exactly like current ones. Records of a type this process
has not registered pass through untouched: projections that do not know the type ignore it.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Sequence
from typing import Any, Final

import orjson

from tracebound.errors import IntegrityError, UnknownEventType
from tracebound.events.envelope import Event, RecordedEvent, format_timestamp
from tracebound.events.record import record_dict
from tracebound.events.registry import EventRegistry, default_registry
from tracebound.projections.base import EventRecord
from tracebound.store.port import LogStore

__all__ = ["RecordDecoder", "read_records", "records_of"]


_PAYLOAD_KEY: Final = b',"payload":'
_AFTER_PAYLOAD: Final = b',"position":'


class RecordDecoder:
    """Turns stored records into record dicts, upcasting old payload versions.

    From a raw row (:meth:`decode_raw`) only the payload is parsed: the envelope fields a
    projection needs (position, stream, version, type, workflow, time, schema version) are
    the store's columns, which ``verify`` checks against the hashed body. The payload is cut
    out of the body by the record layout that :mod:`tracebound.events.record` fixes
    (RFC 8785 sorts keys, so ``payload`` is followed by ``position`` and the other ledger
    fields, none of which can contain that byte sequence outside a string); a body that does
    not have that shape is parsed whole.

    The current version of each kind is looked up once and cached, so the common case (a
    current record) costs one orjson parse of the payload and one dict lookup.
    """

    __slots__ = ("_current", "_registry")

    def __init__(self, registry: EventRegistry | None = None) -> None:
        self._registry = registry or default_registry()
        self._current: dict[str, int | None] = {}

    def current_version(self, kind: str) -> int | None:
        """The registered schema version of ``kind``, or None if it is not registered."""
        try:
            return self._current[kind]
        except KeyError:
            pass
        try:
            version: int | None = self._registry.get(kind).SCHEMA_VERSION
        except UnknownEventType:
            version = None
        self._current[kind] = version
        return version

    def decode(self, body: bytes) -> dict[str, Any]:
        """A whole record body to its dict (every field); raises IntegrityError if malformed."""
        try:
            record: dict[str, Any] = orjson.loads(body)
            kind = record["event_type"]
            version = record["schema_version"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise IntegrityError(f"stored record cannot be decoded: {exc}") from exc
        return self._current_form(record, kind, version)

    def decode_raw(self, row: Sequence[Any]) -> dict[str, Any]:
        """A raw row in :class:`RawRecord` field order to a record dict (payload parsed only)."""
        body: bytes = row[9]
        begin = body.find(_PAYLOAD_KEY)
        end = body.rfind(_AFTER_PAYLOAD)
        if begin < 0 or end < begin:
            return self.decode(body)
        try:
            payload = orjson.loads(body[begin + 11 : end])
        except orjson.JSONDecodeError:
            return self.decode(body)
        kind = row[3]
        version = row[6]
        record = {
            "event_type": kind,
            "payload": payload,
            "position": row[0],
            "schema_version": version,
            "stream_id": row[1],
            "stream_version": row[2],
            "timestamp": row[5],
            "workflow_id": row[4],
        }
        current = self._current.get(kind, -1)
        if current == -1:
            current = self.current_version(kind)
        if current is not None and version != current:
            return self.upcast(record)
        return record

    def envelope_raw(self, row: Sequence[Any]) -> dict[str, Any]:
        """A raw row to a record dict whose ``payload`` is None: nothing parsed at all.

        For a runner none of whose projections reads this kind's payload (the audit trail
        needs only the envelope columns). ``schema_version`` is the stored one: the payload
        is not upcast because it is not read.
        """
        return {
            "event_type": row[3],
            "payload": None,
            "position": row[0],
            "schema_version": row[6],
            "stream_id": row[1],
            "stream_version": row[2],
            "timestamp": row[5],
            "workflow_id": row[4],
        }

    def _current_form(self, record: dict[str, Any], kind: str, version: int) -> dict[str, Any]:
        current = self._current.get(kind, -1)
        if current == -1:
            current = self.current_version(kind)
        if current is not None and version != current:
            return self.upcast(record)
        return record

    def upcast(self, record: dict[str, Any]) -> dict[str, Any]:
        """Bring an old payload up to its current version (validated: the slow, rare path).

        ``schema_version`` in the result is the payload's current version, as for a typed
        read; the stored bytes keep the version they were written at.
        """
        kind = record["event_type"]
        payload = self._registry.decode_payload(kind, record["schema_version"], record["payload"])
        return {
            **record,
            "payload": payload.model_dump(mode="json"),
            "schema_version": type(payload).SCHEMA_VERSION,
        }


def read_records(
    store: LogStore,
    *,
    start: int = 1,
    stop: int | None = None,
    decoder: RecordDecoder | None = None,
    payload_kinds: Container[str] | None = None,
) -> Iterator[dict[str, Any]]:
    """The log from ``start`` as record dicts, in position order, in constant memory.

    With ``payload_kinds``, only records of those kinds have their payload parsed; the
    others come with ``payload`` None (:meth:`RecordDecoder.envelope_raw`). A runner passes
    the kinds its projections read payloads of, so that no event is decoded for nothing.
    """
    dec = decoder or RecordDecoder()
    decode = dec.decode_raw
    if payload_kinds is not None:
        envelope = dec.envelope_raw

        def decode(row: Sequence[Any]) -> dict[str, Any]:
            return dec.decode_raw(row) if row[3] in payload_kinds else envelope(row)

    pages = getattr(store, "read_raw_pages", None)
    if pages is not None:
        # The SQLite store's bulk reader yields plain tuples: no named tuple per record,
        # which costs more than SQLite takes to read it.
        for page in pages(start=start, stop=stop):
            for row in page:
                yield decode(row)
        return
    for raw in store.read_raw(start=start, stop=stop):
        yield decode(raw)


def records_of(events: Iterable[Event | EventRecord]) -> Iterator[EventRecord]:
    """Typed events (or records) as record dicts, for folding a fixture stream in memory.

    A :class:`RecordedEvent` keeps its ledger fields. A plain :class:`Event` has none yet,
    so it is given the position it would have in a fresh log (1, 2, ...) and its own id as
    stream; that keeps fixture streams foldable without a store.
    """
    for index, event in enumerate(events, start=1):
        if isinstance(event, RecordedEvent):
            yield record_dict(event)
        elif isinstance(event, Event):
            yield {
                "correlation_id": event.correlation_id,
                "event_id": str(event.event_id),
                "event_type": event.event_type,
                "payload": event.payload.model_dump(mode="json"),
                "position": index,
                "schema_version": event.schema_version,
                "stream_id": str(event.event_id),
                "stream_version": 1,
                "timestamp": format_timestamp(event.timestamp),
                "workflow_id": event.workflow_id,
            }
        else:
            yield event
