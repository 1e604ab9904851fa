"""Turning prepared events into chained rows: the one loop every backend runs under its lock.

Each backend (SQLite, JSONL, PostgreSQL) appends the same way once it holds its write lock
and knows the log's last position: for every event, the next position and stream version,
the record's bytes (the canonical prefix made before the lock, plus the suffix formatted
here), the BLAKE3 link onto the stream's previous record, and a row in the stores' common
column order. The events handed back to the caller are built from the same rows, after the
commit. Only where a stream's head comes from differs per backend (``head_of``).

The work that does not need the lock (canonical JSON of the payload, the timestamp) is
done by :class:`Prepared`, in the caller's thread.
"""

from __future__ import annotations

from binascii import hexlify
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, NamedTuple

from blake3 import blake3

from tracebound.canonical import canonical_bytes
from tracebound.errors import ConcurrencyConflict, DamageKind, LedgerDamaged
from tracebound.events.envelope import Event, RecordedEvent
from tracebound.events.record import SUFFIX_FORMAT, LedgerFields, decode_record, event_prefix
from tracebound.ids import ChainHead, Position, StreamId, StreamVersion
from tracebound.integrity import _kernel
from tracebound.store.port import ANY_VERSION, AppendRequest

__all__ = [
    "Chained",
    "ChainedAppends",
    "Prepared",
    "PreparedRequest",
    "Row",
    "chain_rows",
    "prepare_batch",
    "prepare_requests",
    "recorded_events",
    "stream_json",
    "stream_page_events",
]

Row = tuple[int, str, int, str, str | None, str, int, bytes, bytes, bytes]
"""position, stream_id, stream_version, event_type, workflow_id, timestamp (text),
schema_version, prev_hash, hash, body: every store's column order."""


class Prepared:
    """An event's writer-side work, done before any lock: canonical prefix and fields."""

    __slots__ = ("fields", "prefix", "values")

    def __init__(self, event: Event) -> None:
        self.values: dict[str, Any] = event.__dict__  # the validated values, in field order
        self.prefix = event_prefix(event)
        self.fields = LedgerFields(event)


class PreparedRequest(NamedTuple):
    """One stream's part of an all-or-nothing batch, prepared."""

    stream_id: str
    expected_version: int | None
    items: list[Prepared]


_new_tuple = tuple.__new__  # a NamedTuple's own __new__ is Python code; this is the same


def prepare_requests(requests: Sequence[AppendRequest]) -> list[PreparedRequest]:
    """The writer-side work for a batch of requests."""
    return [
        _new_tuple(
            PreparedRequest, (r.stream_id, r.expected_version, [Prepared(e) for e in r.events])
        )
        for r in requests
    ]


def prepare_batch(requests: Sequence[AppendRequest]) -> tuple[list[PreparedRequest], int]:
    """:func:`prepare_requests` and the batch's size in canonical prefix bytes (group commit
    bounds its memory with it): what every backend's ``_prepare_batch`` returns."""
    batch = prepare_requests(requests)
    nbytes = 0
    for request in batch:
        for item in request.items:
            nbytes += len(item.prefix)
    return batch, nbytes


_STREAM_JSON: dict[str, bytes] = {}
"""Canonical bytes of recently appended stream ids (plain ``str`` only); bounded."""
_STREAM_JSON_MAX: Final = 4096


def stream_json(sid: str) -> bytes:
    """The canonical JSON of a stream id (cached for plain ``str`` ids)."""
    cached = _STREAM_JSON.get(sid)
    if cached is None:
        # A caller's own id type may subclass str: its plain value is the id. (Without this
        # the answer hung on whether the plain id happened to be cached already.)
        cached = canonical_bytes(sid if type(sid) is str else str.__str__(sid))
        if type(sid) is str:
            if len(_STREAM_JSON) >= _STREAM_JSON_MAX:
                _STREAM_JSON.clear()
            _STREAM_JSON[sid] = cached
    return cached


_chain_request: Callable[..., Any] | None = getattr(_kernel.KERNEL, "chain_request", None)
"""The C kernel's loop for one request (same rows, same bytes), or None: the Python loop
below. A test compares both; the kernel answers None for inputs it leaves to Python."""


class Chained(NamedTuple):
    """A batch chained onto the log: its rows, the last position, the streams' new heads."""

    rows: list[Row]
    position: int
    heads: dict[str, tuple[int, bytes]]


def chain_rows(
    batch: Sequence[PreparedRequest],
    position: int,
    head_of: Callable[[str], tuple[int, bytes]],
) -> Chained:
    """Chain ``batch`` after ``position``: positions ``position + 1`` onwards.

    ``head_of(stream_id)`` gives a stream's (version, chain head) before this batch
    (``(0, GENESIS)`` for a new stream); it is asked once per stream. Raises
    :class:`ConcurrencyConflict` if an expected version does not hold; then nothing of the
    batch counts and the caller's heads are untouched (the new ones are only returned).
    """
    # This loop runs under the store's write lock, once per event: everything costly was
    # done in Prepared, and what is left is kept to local names and one `%` per suffix.
    heads: dict[str, tuple[int, bytes]] = {}
    rows: list[Row] = []
    add_row = rows.append
    suffix = SUFFIX_FORMAT
    b3 = blake3
    in_c = _chain_request
    for request in batch:
        sid = request.stream_id
        head = heads.get(sid)
        if head is None:
            head = head_of(sid)
        version, prev = head
        expected = request.expected_version
        if expected is not None and expected != version:
            raise ConcurrencyConflict(sid, expected, version)
        sid_json = stream_json(sid)
        items = request.items
        if in_c is not None and type(items) is list and type(sid) is str:
            done = in_c(items, sid, sid_json, position, version, prev)
            if done is not None:
                c_rows, position, version, prev = done
                rows += c_rows
                heads[sid] = (version, prev)
                continue
        for item in items:
            position += 1
            version += 1
            fields = item.fields
            body = item.prefix + suffix % (
                position,
                hexlify(prev),
                fields.schema_version,
                sid_json,
                version,
                fields.timestamp,
                fields.workflow_id,
            )
            digest = b3(prev).update(body).digest()  # chain_hash, without the call
            values = item.values
            add_row(
                (
                    position,
                    sid,
                    version,
                    values["event_type"],
                    values["workflow_id"],
                    fields.timestamp_text,
                    fields.schema_version,
                    prev,
                    digest,
                    body,
                )
            )
            prev = digest
        heads[sid] = (version, prev)
    return _new_tuple(Chained, (rows, position, heads))


_RECORDED_FIELDS: Final = tuple(RecordedEvent.model_fields)
_RECORDED_FIELD_SET: Final = frozenset(_RECORDED_FIELDS)
_PLAIN_RECORDED: Final = (
    RecordedEvent.__pydantic_post_init__ is None
    and not RecordedEvent.__private_attributes__
    and not RecordedEvent.__pydantic_root_model__
    and RecordedEvent.model_config.get("extra") != "allow"
)
"""Whether ``model_construct`` of a RecordedEvent comes down to the four assignments that
:func:`recorded_events` makes (no post-init hook, no private attributes, no extras)."""
_new_object = object.__new__
_set = object.__setattr__
_recorded: Callable[..., Any] | None = getattr(_kernel.KERNEL, "recorded", None)
"""The loop below in C (the same assignments), or None. A test compares both."""


def recorded_events(batch: Sequence[PreparedRequest], rows: Sequence[Row]) -> list[RecordedEvent]:
    """The events as stored: ``batch``'s events, paired in order with their ``rows``.

    ``RecordedEvent.model_construct`` walks every field looking for aliases and defaults,
    which costs more than the chain hash; every field is given here, so what it does comes
    down to four assignments, made directly while the model is plain (checked at import,
    otherwise ``model_construct`` itself runs). Same type, equal values.
    """
    if len(batch) == 1:
        items = batch[0].items
    else:
        items = [item for request in batch for item in request.items]
    if len(items) != len(rows):
        raise ValueError(f"{len(rows)} rows for {len(items)} events")
    out: list[RecordedEvent] = []
    add = out.append
    if not _PLAIN_RECORDED:
        for item, row in zip(items, rows, strict=True):
            add(
                RecordedEvent.model_construct(
                    **item.values,
                    stream_id=StreamId(row[1]),
                    stream_version=StreamVersion(row[2]),
                    position=Position(row[0]),
                    prev_hash=ChainHead(row[7]),
                    hash=ChainHead(row[8]),
                )
            )
        return out
    fields_set = _RECORDED_FIELD_SET
    if _recorded is not None and type(rows) is list and type(items) is list:
        built: list[RecordedEvent] = _recorded(RecordedEvent, items, rows, fields_set)
        return built
    for item, (position, sid, version, _, _, _, _, prev, digest, _) in zip(
        items, rows, strict=True
    ):
        values = item.values.copy()  # same keys, same order as {**item.values, ...}
        values["stream_id"] = sid
        values["stream_version"] = version
        values["position"] = position
        values["prev_hash"] = prev
        values["hash"] = digest
        obj = _new_object(RecordedEvent)
        _set(obj, "__dict__", values)
        _set(obj, "__pydantic_fields_set__", set(fields_set))
        _set(obj, "__pydantic_extra__", None)
        _set(obj, "__pydantic_private__", None)
        add(obj)
    return out


class ChainedAppends:
    """The append methods every backend shares, on top of its ``_append_prepared``.

    ``append`` is ``append_batch`` of one request; ``append_batch`` runs one prepared batch
    through ``_append_prepared`` (the group-commit seam, see ``store/group_commit.py``), so
    a single append and a group take the same path; ``_prepare_batch`` is the caller-side
    half of group commit. A backend with a faster single-batch path overrides
    ``append_batch``.
    """

    __slots__ = ()

    def _append_prepared(
        self, batches: Sequence[Sequence[PreparedRequest]]
    ) -> list[list[RecordedEvent] | ConcurrencyConflict]:
        raise NotImplementedError

    def append(
        self,
        stream_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = ANY_VERSION,
    ) -> list[RecordedEvent]:
        return self.append_batch([AppendRequest(StreamId(stream_id), events, expected_version)])

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[RecordedEvent]:
        (result,) = self._append_prepared([prepare_requests(requests)])
        if isinstance(result, ConcurrencyConflict):
            raise result
        return result

    def _prepare_batch(
        self, requests: Sequence[AppendRequest]
    ) -> tuple[list[PreparedRequest], int]:
        """The writer-side work for ``_append_prepared``, done before any lock, and the
        batch's size in canonical bytes (group commit bounds its memory with it)."""
        return prepare_batch(requests)


def stream_page_events(
    stream_id: str, page: Iterable[tuple[int, int, bytes, bytes]]
) -> Iterator[RecordedEvent]:
    """Decode a page of ``(position, version, hash, body)`` rows read by stream, checking each
    record names the stream and version the index filed it under: a row moved between
    streams by someone holding the store is tamper, not a different event."""
    for position, version, digest, body in page:
        event = decode_record(body, digest)
        if event.stream_id != stream_id or event.stream_version != version:
            raise LedgerDamaged(
                DamageKind.TAMPER,
                position,
                f"indexed as {stream_id!r} v{version}, but the record says "
                f"{event.stream_id!r} v{event.stream_version}",
            )
        yield event
