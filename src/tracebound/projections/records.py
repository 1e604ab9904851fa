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

import sqlite3
from collections.abc import Collection, Container, Iterable, Iterator, Sequence
from typing import Any, Final

import orjson

from tracebound.errors import (
    IntegrityError,
    StoreClosed,
    TraceboundError,
    UnknownEventType,
)
from tracebound.events.envelope import Event, RecordedEvent, format_timestamp
from tracebound.events.record import record_dict
from tracebound.events.registry import EventRegistry, default_registry
from tracebound.projections.base import EventRecord
from tracebound.store.port import LogStore
from tracebound.store.sqlite import SQLiteStore, sqlite_failure

__all__ = ["RecordDecoder", "read_record_pages", "read_records", "records_of"]


_RECORD_KEYS: Final = frozenset(
    (
        "correlation_id",
        "event_id",
        "event_type",
        "payload",
        "position",
        "prev_hash",
        "schema_version",
        "stream_id",
        "stream_version",
        "timestamp",
        "workflow_id",
    )
)
"""The fields of a stored record: :func:`~tracebound.events.record.record_dict`'s keys."""


def _not_a_record(position: object, record: object) -> IntegrityError:
    """The error for a stored body that parsed but is not the record at ``position``."""
    if not isinstance(record, dict):
        what = f"a JSON {type(record).__name__}, not an object"
    elif record.keys() != _RECORD_KEYS:
        missing = sorted(_RECORD_KEYS - record.keys())
        extra = sorted(record.keys() - _RECORD_KEYS)
        what = f"not a ledger record (missing {missing}, unexpected {extra})"
    else:
        what = f"the record of position {record['position']!r}"
    return IntegrityError(f"stored record at position {position} is {what}")


class RecordDecoder:
    """Turns stored records into record dicts, upcasting old payload versions.

    A record whose payload is read is the whole stored body parsed by one ``orjson.loads``:
    the canonical record the chain hashed (``hash`` aside), with exactly the keys of
    :func:`~tracebound.events.record.record_dict`. The body is the same bytes on every
    backend, so the same event reads as the same dict from SQLite, PostgreSQL or JSONL.
    A body that is not such a record (not JSON, not an object, other keys, another
    position) raises :class:`IntegrityError` naming its position.

    The current version of each kind is looked up once and cached, so the common case (a
    current record) costs one orjson parse, a key check and one dict lookup.
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

    def current_versions(self) -> dict[str, int | None]:
        """The cache behind :meth:`current_version` (kind to version), for hot loops."""
        return self._current

    def decode(self, body: bytes) -> dict[str, Any]:
        """A whole record body to its dict (every field); raises IntegrityError if malformed."""
        try:
            record: Any = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise IntegrityError(f"stored record cannot be decoded: {exc}") from exc
        if record.__class__ is not dict or record.keys() != _RECORD_KEYS:
            position = record.get("position") if isinstance(record, dict) else None
            raise _not_a_record(position, record)
        return self._current_form(record, record["event_type"], record["schema_version"])

    def decode_raw(self, row: Sequence[Any]) -> dict[str, Any]:
        """A raw row in :class:`RawRecord` field order to its whole record dict.

        The same dict as the SQLite reader's (:func:`read_record_pages`): the stored body
        parsed whole, checked to be the record of the row's position, upcast if old.
        """
        position = row[0]
        try:
            record: Any = orjson.loads(row[9])
        except orjson.JSONDecodeError as exc:
            raise IntegrityError(
                f"stored record at position {position} cannot be decoded: {exc}"
            ) from exc
        if (
            record.__class__ is not dict
            or record.keys() != _RECORD_KEYS
            or record["position"] != position
        ):
            raise _not_a_record(position, record)
        kind = row[3]
        version = row[6]
        current = self._current.get(kind, -1)
        if current == -1:
            current = self.current_version(kind)
        if current is not None and version != current:
            return self.upcast(record)
        return record

    def envelope_raw(self, row: Sequence[Any]) -> dict[str, Any]:
        """A raw row to a record dict whose ``payload`` is None: nothing parsed at all.

        For a runner none of whose projections reads this kind's payload (the audit trail
        needs only the envelope columns). Its keys are the same on every backend:
        ``event_type``, ``payload`` (None), ``position``, ``schema_version``, ``stream_id``,
        ``stream_version``, ``timestamp`` and ``workflow_id``. ``schema_version`` is the
        stored one: the payload is not upcast because it is not read.
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
        """Bring an old payload up to its current version.

        Through tracebound's own upcasters it is taken as they return it, as a current
        payload is taken as stored (:meth:`EventRegistry.upcast_trusted`: 7.7 µs a record
        validated against ~1 here, and a ledger recorded before a schema change holds many);
        through any other, validated. ``schema_version`` in the result is the payload's
        current version, as for a typed read; the stored bytes keep the version they were
        written at.
        """
        kind, version = record["event_type"], record["schema_version"]
        current = self.current_version(kind)
        raw = self._registry.upcast_trusted(kind, version, record["payload"])
        if raw is not None and current is not None:
            return {**record, "payload": raw, "schema_version": current}
        payload = self._registry.decode_payload(kind, version, record["payload"])
        return {
            **record,
            "payload": payload.model_dump(mode="json"),
            "schema_version": type(payload).SCHEMA_VERSION,
        }


_PAGE: Final = 2_048
"""Records per SQL page of the projection reader: one short read transaction each."""

_SELECT_BODIES: Final = (
    "SELECT position, event_type, schema_version, body FROM events "
    "WHERE position >= ? AND position <= ? ORDER BY position LIMIT ?"
)


def _select_some_bodies(kinds: int) -> str:
    """The read for a runner that parses some kinds' payloads: no body for the others."""
    marks = ", ".join("?" * kinds)
    return (
        "SELECT position, event_type, schema_version, "  # noqa: S608 - placeholders only
        f"CASE WHEN event_type IN ({marks}) THEN body END, "
        "stream_id, stream_version, timestamp, workflow_id FROM events "
        "WHERE position >= ? AND position <= ? ORDER BY position LIMIT ?"
    )


def _sqlite_pages(
    store: SQLiteStore,
    start: int,
    stop: int | None,
    dec: RecordDecoder,
    payload_kinds: Collection[str] | None,
) -> Iterator[list[dict[str, Any]]]:
    """Record dicts read straight from a SQLite ledger's ``events`` table, page by page.

    The generic :meth:`LogStore.read_raw` reads every column (both hashes as well) and the
    decoder then builds the record dict in Python; here SQL returns only what a record
    needs: the hashed body, which orjson turns into the whole record dict in one C call
    (the body *is* the record the chain hashed, without ``hash``; ``verify`` checks it),
    and, for kinds whose payload nobody reads, the envelope columns instead of the body.
    Text columns cost more to fetch than the body they repeat, and this halves the read.
    The dicts are the ones :meth:`RecordDecoder.decode_raw` and
    :meth:`RecordDecoder.envelope_raw` build from the generic rows.

    It opens its own connection (a read never needs the store's writer) and closes it when
    done; each page is its own short read transaction, as in the store. A closed store
    raises :class:`StoreClosed` before any page, as :meth:`SQLiteStore.read_raw` does, and
    a page waits on a writer's lock as long as the store's own reads would.
    """
    upper = stop if stop is not None else (1 << 62)
    kinds = None if payload_kinds is None else sorted(payload_kinds)
    sql = _SELECT_BODIES if kinds is None else _select_some_bodies(len(kinds))
    _check_open(store)
    try:
        conn = sqlite3.connect(store.path, check_same_thread=False, timeout=store.busy_timeout)
    except sqlite3.Error as exc:
        raise sqlite_failure("read", exc, store.path, store.busy_timeout) from exc
    try:
        cursor = start
        while cursor <= upper:
            _check_open(store)  # closed between pages: stop as read_raw would
            args: tuple[Any, ...] = (cursor, upper, _PAGE)
            if kinds is not None:
                args = (*kinds, *args)
            try:
                page = conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise sqlite_failure("read", exc, store.path, store.busy_timeout) from exc
            if not page:
                return
            out: list[dict[str, Any]] = []
            try:
                _decode_page(page, dec, out)
            except TraceboundError:
                if out:
                    yield out  # the good records before the bad one, then the error
                raise
            yield out
            cursor = page[-1][0] + 1
    finally:
        conn.close()


def _check_open(store: SQLiteStore) -> None:
    if store.closed:
        raise StoreClosed(f"{store.url} is closed")


def _decode_page(page: list[Any], dec: RecordDecoder, out: list[dict[str, Any]]) -> None:
    """Rows of :func:`_sqlite_pages`' query to record dicts, appended to ``out`` in order.

    Raises IntegrityError at the first body that is not the record of its row (not JSON,
    not an object, not exactly the record's keys, another position); ``out`` then holds
    the records before it. The key check is one comparison of the dict's keys with a
    frozenset, in C; without it a body such as ``{}`` reached the runner and the
    projections, and failed there with a bare KeyError.
    """
    append = out.append
    loads = orjson.loads
    current = dec.current_versions()
    record_keys = _RECORD_KEYS
    for row in page:
        body = row[3]
        if body is None:  # a kind whose payload nobody reads: the envelope columns
            append(
                {
                    "event_type": row[1],
                    "payload": None,
                    "position": row[0],
                    "schema_version": row[2],
                    "stream_id": row[4],
                    "stream_version": row[5],
                    "timestamp": row[6],
                    "workflow_id": row[7],
                }
            )
            continue
        try:
            record = loads(body)
        except orjson.JSONDecodeError as exc:
            raise IntegrityError(
                f"stored record at position {row[0]} cannot be decoded: {exc}"
            ) from exc
        if (
            record.__class__ is not dict
            or record.keys() != record_keys
            or record["position"] != row[0]
        ):
            raise _not_a_record(row[0], record)
        kind = row[1]
        version = current.get(kind, -1)
        if version == -1:
            version = dec.current_version(kind)
        if version is not None and version != row[2]:
            record = dec.upcast(record)  # validates and upcasts: the rare path
        append(record)


def read_record_pages(
    store: LogStore,
    *,
    start: int = 1,
    stop: int | None = None,
    decoder: RecordDecoder | None = None,
    payload_kinds: Container[str] | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """:func:`read_records` in lists (pages): what the runner extends its batch with.

    On a record that cannot be decoded, the page's records before it are yielded first,
    then the error is raised, so a caller knows exactly where the log went bad.
    """
    dec = decoder or RecordDecoder()
    if (
        isinstance(store, SQLiteStore)
        and type(store).read_raw is SQLiteStore.read_raw
        and (payload_kinds is None or isinstance(payload_kinds, Collection))
    ):
        yield from _sqlite_pages(store, start, stop, dec, payload_kinds)
        return
    decode = dec.decode_raw
    if payload_kinds is not None:
        envelope = dec.envelope_raw

        def decode(row: Sequence[Any]) -> dict[str, Any]:
            return dec.decode_raw(row) if row[3] in payload_kinds else envelope(row)

    out: list[dict[str, Any]] = []
    try:
        for raw in store.read_raw(start=start, stop=stop):
            out.append(decode(raw))
            if len(out) >= _PAGE:
                yield out
                out = []
    except TraceboundError:
        if out:
            yield out
        raise
    if out:
        yield out


def read_records(
    store: LogStore,
    *,
    start: int = 1,
    stop: int | None = None,
    decoder: RecordDecoder | None = None,
    payload_kinds: Container[str] | None = None,
) -> Iterator[dict[str, Any]]:
    """The log from ``start`` as record dicts, in position order, in constant memory.

    The dicts have the same keys and values for the same event on every backend (SQLite,
    PostgreSQL, JSONL, or any other :class:`LogStore`), because they come from the stored
    body, which is the same canonical bytes everywhere:

    * a record whose payload is read is the whole stored record, exactly the eleven keys
      of :func:`~tracebound.events.record.record_dict`: ``correlation_id``, ``event_id``,
      ``event_type``, ``payload``, ``position``, ``prev_hash``, ``schema_version``,
      ``stream_id``, ``stream_version``, ``timestamp``, ``workflow_id`` (the canonical JSON
      the chain hashed, ``hash`` aside); a payload written at an older schema version is
      upcast, and ``schema_version`` is then the current one;
    * with ``payload_kinds``, records of other kinds are not parsed at all: they have
      exactly eight keys, ``event_type``, ``payload`` (None), ``position``,
      ``schema_version`` (as stored), ``stream_id``, ``stream_version``, ``timestamp`` and
      ``workflow_id``, read from the store's envelope columns. A runner passes the kinds
      its projections read payloads of, so that no event is decoded for nothing.

    Raises:
        IntegrityError: a body that is parsed is not the record of its position (not JSON,
            not an object, other keys, another position). The records before it have been
            yielded. Bodies that are not parsed are not checked (``verify`` checks them).
        StorageError: the store cannot be read (:class:`StoreClosed` once it is closed).
    """
    for page in read_record_pages(
        store, start=start, stop=stop, decoder=decoder, payload_kinds=payload_kinds
    ):
        yield from page


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
