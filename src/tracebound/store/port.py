"""The storage port: what every backend provides, split by capability (CONVENTIONS #3).

* :class:`StreamStore`: append to a stream with optimistic concurrency; read a stream.
* :class:`LogStore`: the global, gap-free ordered log, read by position, raw or typed.
* :class:`CheckpointStore`: signed checkpoints of the log kept beside it.
* :class:`MerkleNodeStore`: stored Merkle nodes (derived, checked on use), so proofs and
  checkpoints read O(log n) of the log (``integrity/nodes.py``).
* :class:`LogExtentStore`: the log's positions counted in the store's own index, so that
  a deleted event is found without reading the log (``tracebound replay``).
* :class:`FilteredLogStore`: the log read by event type and workflow inside the store, so
  a reader of a few kinds (``log --type``, the metrics, the SLO check) does not carry every
  record of a big log into Python (:func:`read_matching`).

Every backend (SQLite now; PostgreSQL and JSONL later) passes one conformance suite,
``tests/conformance``. Chaining happens inside the backend's write transaction, because
only there are the position and the stream's previous hash known for certain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, Final, NamedTuple, Protocol, Self, runtime_checkable

from tracebound.canonical import canonical_bytes
from tracebound.errors import ConcurrencyError, ProofError, ValidationFailed, short_repr
from tracebound.events.envelope import Event, RecordedEvent
from tracebound.events.record import RawRecord
from tracebound.ids import ChainHead, StreamId, StreamVersion
from tracebound.integrity.chain import GENESIS
from tracebound.integrity.verify import ChunkVerifier, link_damage

__all__ = [
    "ANY_VERSION",
    "NO_STREAM",
    "AppendRequest",
    "CheckpointStore",
    "FilteredLogStore",
    "ImportStore",
    "LedgerStore",
    "LogExtentStore",
    "LogStore",
    "MerkleNodeStore",
    "MetadataStore",
    "RawRecord",
    "RecordFilter",
    "StreamHead",
    "StreamIndex",
    "StreamStore",
    "Subscription",
    "SubscriptionStore",
    "TrackingStore",
    "TrackingTransaction",
    "check_append",
    "check_import",
    "contiguous_nodes",
    "indexed_positions",
    "node_count",
    "position_runs",
    "read_matching",
    "stream_positions",
    "window_pages",
]

ANY_VERSION: None = None
"""``expected_version`` that skips the optimistic-concurrency check."""

NO_STREAM = 0
"""``expected_version`` meaning "the stream must not exist yet"."""


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Events for one stream, appended only if the stream is at ``expected_version``."""

    stream_id: StreamId
    events: Sequence[Event]
    expected_version: int | None = ANY_VERSION

    def __post_init__(self) -> None:
        check_append(self.stream_id, self.expected_version)


def check_append(stream_id: object, expected_version: object) -> None:
    """What every append asks of its stream id and expected version, checked before any
    work: the store's own code would otherwise fail on them with an untyped error, or, for
    an expected version that is not a count, report a conflict with a writer that is not
    there. Typed as objects: ids come from user code."""
    if not isinstance(stream_id, str) or not stream_id:
        raise ValidationFailed(
            "stream_id", f"must be a non-empty string, not {short_repr(stream_id)}"
        )
    try:
        stream_id.encode("utf-8")  # hashed data: a lone surrogate has no UTF-8 form
    except UnicodeEncodeError as exc:
        raise ValidationFailed("stream_id", f"is not valid Unicode text: {exc.reason}") from None
    if expected_version is not None and (type(expected_version) is not int or expected_version < 0):
        raise ValidationFailed(
            "expected_version",
            "must be the stream's version, an int from 0 (NO_STREAM), or None (ANY_VERSION); "
            f"not {short_repr(expected_version)}",
        )


class StreamHead(NamedTuple):
    """The newest version of a stream and its chain head."""

    version: StreamVersion
    head: ChainHead


@runtime_checkable
class StreamStore(Protocol):
    """Append to and read one stream."""

    def append(
        self,
        stream_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = ANY_VERSION,
    ) -> list[RecordedEvent]:
        """Append durably; return the recorded events once they are on disk.

        Raises:
            ConcurrencyConflict: the stream is not at ``expected_version``.
        """
        ...

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[RecordedEvent]:
        """Append several streams' events in one transaction: all or none."""
        ...

    def read_stream(
        self, stream_id: str, *, from_version: int = 1, to_version: int | None = None
    ) -> Iterator[RecordedEvent]:
        """Yield a stream's events in version order, in constant memory."""
        ...

    def stream_head(self, stream_id: str) -> StreamHead | None:
        """The stream's newest version and chain head, or None if it has no events."""
        ...


@runtime_checkable
class StreamIndex(Protocol):
    """Where a stream's versions are filed, read without decoding the records (they may
    be of types this process has no payload model for)."""

    def stream_positions(
        self, stream_id: str, from_version: int, to_version: int
    ) -> list[tuple[int, int]]:
        """``(version, position)`` of the stream's versions in the range, in version order,
        as the store's index files them: it may lie, so callers check the records."""
        ...


def stream_positions(
    store: StreamStore, stream_id: str, from_version: int, to_version: int
) -> list[tuple[int, int]]:
    """``(version, position)`` of a stream's versions in the range: from the store's index
    where it has one (:class:`StreamIndex`), else from its decoded events."""
    if isinstance(store, StreamIndex):
        return store.stream_positions(stream_id, from_version, to_version)
    events = store.read_stream(stream_id, from_version=from_version, to_version=to_version)
    return [(int(e.stream_version), e.position) for e in events]


def indexed_positions(store: StreamStore, stream_id: str, *, start: int = 1) -> Iterator[int]:
    """The log positions of a stream's events at ``start`` or later, in version order, a
    page of versions at a time from :func:`stream_positions`: the work is the stream's, not
    the log's, and its memory a page's."""
    version = 1
    while page := stream_positions(store, stream_id, version, version + _INDEX_PAGE - 1):
        yield from (position for _, position in page if position >= start)
        version = page[-1][0] + 1


_INDEX_PAGE: Final = 1000
"""Stream versions :func:`indexed_positions` looks up in the stream index at a time."""


def position_runs(positions: Iterable[int]) -> Iterator[tuple[int, int]]:
    """Ascending positions as ``(first, last)`` runs of neighbours: one ``read_raw`` each,
    not one per event."""
    first = last = None
    for position in positions:
        if last is not None and position == last + 1:
            last = position
            continue
        if first is not None and last is not None:
            yield first, last
        first = last = position
    if first is not None and last is not None:
        yield first, last


@runtime_checkable
class LogStore(Protocol):
    """The global ordered log."""

    def read_log(self, *, start: int = 1, stop: int | None = None) -> Iterator[RecordedEvent]:
        """Yield events with ``start <= position <= stop`` in order, in constant memory."""
        ...

    def read_raw(self, *, start: int = 1, stop: int | None = None) -> Iterator[RawRecord]:
        """Like :meth:`read_log` but undecoded: the bytes that were hashed."""
        ...

    def size(self) -> int:
        """The number of events in the log, which is also the last position."""
        ...


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """Which records of the log a filtered read yields (:class:`FilteredLogStore`).

    ``kinds``: records whose ``event_type`` column is one of these (None: any type).
    ``workflows``: records whose ``workflow_id`` column is one of these (None: any).
    ``in_body``: also the records whose hashed body names the type or workflow (its
    canonical ``"event_type":"…"`` / ``"workflow_id":"…"`` bytes), whatever their column
    says. A listing that shows what the body says (``tracebound log``) asks for this, so
    that a column edited behind the chain cannot hide a record from it; the result is then
    a superset the caller narrows by the decoded body (a payload may hold the same bytes).
    """

    kinds: frozenset[str] | None = None
    workflows: frozenset[str] | None = None
    in_body: bool = False

    def kind_needles(self) -> tuple[bytes, ...]:
        """The body bytes that name one of :attr:`kinds` (none unless :attr:`in_body`)."""
        return _needles(b'"event_type":', self.kinds) if self.in_body else ()

    def workflow_needles(self) -> tuple[bytes, ...]:
        """The body bytes that name one of :attr:`workflows` (none unless :attr:`in_body`)."""
        return _needles(b'"workflow_id":', self.workflows) if self.in_body else ()

    def matches(self, raw: RawRecord) -> bool:
        """Whether a filtered read yields ``raw``: what the stores' SQL says, in Python."""
        body = bytes(raw.body) if self.in_body else b""
        for values, column, needles in (
            (self.kinds, raw.event_type, self.kind_needles()),
            (self.workflows, raw.workflow_id, self.workflow_needles()),
        ):
            if values is not None and column not in values and not any(n in body for n in needles):
                return False
        return True


def _needles(key: bytes, values: frozenset[str] | None) -> tuple[bytes, ...]:
    # Sorted: the same filter gives the same statement (and the stores' statement cache hits).
    return tuple(key + canonical_bytes(v) for v in sorted(values or ()))


@runtime_checkable
class FilteredLogStore(Protocol):
    """The log read by a :class:`RecordFilter` inside the store (optional: JSONL has no
    columns to filter by, and :func:`read_matching` filters its records in Python)."""

    def read_raw_matching(
        self, where: RecordFilter, *, start: int = 1, stop: int | None = None
    ) -> Iterator[RawRecord]:
        """The records of :meth:`LogStore.read_raw` (same range, same order) that ``where``
        matches, in constant memory and short reads however few of them match."""
        ...


_MAX_SQL_VALUES: Final = 500
"""More workflows or kinds than this are filtered in Python (after the store's filter by
the other): a statement's bound values are limited (SQLite's default: 32,766)."""


def read_matching(
    store: LogStore, where: RecordFilter, *, start: int = 1, stop: int | None = None
) -> Iterator[RawRecord]:
    """The records of ``store.read_raw(start=start, stop=stop)`` that ``where`` matches,
    filtered by the store where it can (:class:`FilteredLogStore`), else in Python."""
    if not isinstance(store, FilteredLogStore):
        return (raw for raw in store.read_raw(start=start, stop=stop) if where.matches(raw))
    pushed = where
    if where.kinds is not None and len(where.kinds) > _MAX_SQL_VALUES:
        pushed = replace(pushed, kinds=None)
    if where.workflows is not None and len(where.workflows) > _MAX_SQL_VALUES:
        pushed = replace(pushed, workflows=None)
    raws = store.read_raw_matching(pushed, start=start, stop=stop)
    return raws if pushed is where else (raw for raw in raws if where.matches(raw))


SCAN_WINDOW: Final = 1 << 16
"""Positions one statement of a filtered read looks at (:func:`window_pages`): the filtered
columns have no index (each would cost every append a B-tree insert), so a statement is a
scan; 65,536 positions take SQLite ~15 ms with a column filter, ~60 ms when the bodies are
searched too, so each is a short read however few rows match."""


def window_pages(
    page: Callable[[int, int], Sequence[Sequence[Any]]],
    last: Callable[[], int],
    *,
    start: int,
    stop: int | None,
    limit: int,
    window: int = SCAN_WINDOW,
) -> Iterator[Sequence[Any]]:
    """The rows of a filtered keyset read, page by page, in position order.

    ``page(lo, hi)``: at most ``limit`` matching rows with ``lo <= position <= hi`` in
    position order (row[0] the position); ``last()``: the highest position stored. Each
    statement looks at no more than ``window`` positions, so a filter that matches a few
    records of a big log is many short reads (none holding a snapshot for the whole scan),
    not one long one. Reading stops at the log's end as it is when reached: positions
    commit in order, so every position up to ``last()`` is there to be read.
    """
    upper = stop if stop is not None else 1 << 62
    cursor, end = start, last()
    while cursor <= upper:
        if cursor > end:
            end = last()  # appended meanwhile? (one index seek)
            if cursor > end:
                return
        hi = min(upper, end, cursor + window - 1)
        rows = page(cursor, hi)
        if rows:
            yield rows
        cursor = rows[-1][0] + 1 if len(rows) >= limit else hi + 1


@runtime_checkable
class CheckpointStore(Protocol):
    """Signed checkpoints (C2SP signed notes) kept with the log."""

    def save_checkpoint(self, size: int, note: str) -> None:
        """Keep a signed checkpoint for tree size ``size``."""
        ...

    def latest_checkpoint(self) -> str | None:
        """The signed note of the largest checkpoint, or None."""
        ...

    def checkpoints(self) -> list[tuple[int, str]]:
        """All kept checkpoints as (size, note), smallest first."""
        ...


@runtime_checkable
class MerkleNodeStore(Protocol):
    """Roots of perfect aligned subtrees of the log, kept beside it (``integrity/nodes.py``).

    Derived data, never trusted: every use is checked against a signed root. Level ``L``
    holds the roots of the subtrees of ``2**(8*L)`` leaves, node ``i`` covering positions
    ``i * 2**(8*L) + 1 ..``. Nodes are added from the lowest missing index up, by whoever
    checkpoints; adding one that is already there keeps the stored one.
    """

    def read_hashes(self, start: int, stop: int) -> list[bytes]:
        """The chain hashes of the events at positions ``start .. stop``, in order (fewer
        if positions are missing: the caller checks the count)."""
        ...

    def merkle_nodes(self, level: int, start: int, stop: int) -> list[bytes]:
        """Stored nodes of ``level`` with index ``start <= i < stop``: the run present from
        ``start`` (shorter than asked, or empty, where nodes are missing)."""
        ...

    def merkle_node_count(self, level: int) -> int:
        """How many nodes of ``level`` are stored (0 when there is none): nodes ``0 ..
        n - 1``, every one of them, which is also the lowest missing index.

        Raises:
            ProofError: the stored nodes of ``level`` are not exactly ``0 .. n - 1`` (a
                node deleted from the middle, one written far beyond the others, an index
                below 0 or not an integer, a nodes file that is not whole nodes): they
                were written by hand. Nothing is ignored or rounded away; ``checkpoint
                --full`` drops the nodes and stores them again from the verified log.
        """
        ...

    def add_merkle_nodes(self, level: int, start: int, hashes: Sequence[bytes]) -> None:
        """Store nodes ``start, start + 1, ...`` of ``level``; existing ones are kept."""
        ...

    def drop_merkle_nodes(self) -> None:
        """Forget every stored node (they are computed again from the log)."""
        ...


@runtime_checkable
class LogExtentStore(Protocol):
    """The log's positions counted by the store, in its position index: no event is read.

    Optional: a backend whose positions are counted no cheaper than by reading them (or
    cannot be missing, as in JSONL, where the position is the line number) leaves it out,
    and callers read the hashes instead.
    """

    def log_extent(self) -> tuple[int, int, int]:
        """``(count, lowest, highest)`` of the positions the log holds, ``(0, 0, 0)`` when
        it is empty, read in one snapshot. Positions are distinct integers, so every one of
        ``1 .. highest`` is there exactly when ``count == highest`` and ``lowest == 1``
        (or the log is empty); anything else means an event was deleted (or one written
        below position 1), and the caller looks for where."""
        ...


@runtime_checkable
class MetadataStore(Protocol):
    """Small named settings kept with the log (its origin, its format version)."""

    def get_meta(self, key: str) -> str | None:
        """The value stored under ``key``, or None."""
        ...

    def set_meta(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``, replacing any previous value."""
        ...


@runtime_checkable
class LedgerStore(StreamStore, LogStore, CheckpointStore, MetadataStore, Protocol):
    """Everything the ledger needs from one backend."""

    url: str

    def close(self) -> None:
        """Release connections; further use raises StoreClosed."""
        ...


# -- live subscriptions and projection tracking (CONVENTIONS #3: the third capability tier) --


@runtime_checkable
class Subscription(Protocol):
    """A live feed of the global log: the backlog first, then each event as it commits.

    Events arrive in position order, each exactly once, with no gap: a subscriber never
    skips a position that commits later (which is why backends must make commit order and
    position order the same). Iterating blocks until the next event; :meth:`close` ends the
    iteration, also from another thread.
    """

    @property
    def last_position(self) -> int:
        """The position of the last event handed out (``start - 1`` before the first)."""
        ...

    def __iter__(self) -> Iterator[RecordedEvent]:
        """Yield events until :meth:`close` is called."""
        ...

    def __next__(self) -> RecordedEvent:
        """Block until the next event; StopIteration once closed."""
        ...

    def next_event(self, timeout: float | None = None) -> RecordedEvent | None:
        """The next event, or None if none committed within ``timeout`` seconds or closed.

        The timeout bounds a wait; it is never part of the ordering guarantee.
        """
        ...

    def close(self) -> None:
        """Stop the feed and release its connection. Idempotent."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class SubscriptionStore(Protocol):
    """A store whose log can be followed live (catch-up, then notifications or polling)."""

    def subscribe(self, start: int = 1) -> Subscription:
        """Follow the log from ``start`` (inclusive, like :meth:`LogStore.read_log`).

        To resume a projection, subscribe from ``tracked_position(name) + 1``.
        """
        ...


@runtime_checkable
class TrackingTransaction(Protocol):
    """One transaction of a projection: its own writes and its position, committed together.

    This is what makes a projection exactly-once: the position a projection has reached
    moves only in the transaction that also holds the writes for the events up to it. A
    crash or an exception before commit leaves both the writes and the position as they
    were; the events are simply delivered again.
    """

    @property
    def name(self) -> str:
        """The projection's name: one tracked position per name."""
        ...

    @property
    def position(self) -> int:
        """The tracked position inside this transaction (0 before anything was applied).

        Read under a lock, so a second worker of the same projection waits, then sees the
        first one's progress; events at or below it were applied already.
        """
        ...

    def execute(
        self, query: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Run one of the projection's own statements (the backend's placeholder style) in
        this transaction; return its rows, if it returns any."""
        ...

    def advance(self, position: int) -> None:
        """Record that events up to ``position`` are applied, in this transaction.

        Raises:
            ConcurrencyConflict: ``position`` is not beyond :attr:`position`.
        """
        ...


@runtime_checkable
class TrackingStore(Protocol):
    """Positions of projections, kept in the same transactions as their writes."""

    def tracking(
        self, name: str, *, expected: int | None = None
    ) -> AbstractContextManager[TrackingTransaction]:
        """Open a transaction for projection ``name``; it commits when the block ends
        normally and rolls back (writes and position together) when it raises.

        Raises:
            ConcurrencyConflict: ``expected`` is given and the tracked position differs.
        """
        ...

    def tracked_position(self, name: str) -> int:
        """The committed position of projection ``name``; 0 if it never advanced."""
        ...


# -- importing a log verbatim (``tracebound copy``) ----------------------------------------


@runtime_checkable
class ImportStore(Protocol):
    """A store that can take records exactly as another store holds them.

    An append assigns the position, the version and the chain link itself, so a log moved
    from one backend to another by appending would get new bytes, new hashes and a new
    Merkle root, and its signed checkpoints would no longer vouch for it. Importing keeps
    every byte: each record goes in as it was hashed, after the store has checked, inside
    its own write transaction, that the records continue its log (see
    :func:`check_import`).
    """

    def import_raw(self, records: Sequence[RawRecord]) -> None:
        """Insert ``records`` verbatim and durably, all or none.

        Raises:
            ConcurrencyError: the first record is not at ``size() + 1`` (someone else
                appended meanwhile, or the caller resumed from the wrong place).
            LedgerDamaged: a record does not hash to its hash, its columns disagree with
                its bytes, positions skip, or a stream's version/prev_hash does not link to
                the stream's head in this store (the first such position is named).
        """
        ...


def check_import(
    size: int,
    records: Sequence[RawRecord],
    head: Callable[[str], tuple[int, bytes] | None],
) -> None:
    """The checks every backend's :meth:`ImportStore.import_raw` runs under its write lock.

    Reuses verify's own chunk check, so an import accepts exactly what ``verify`` would
    accept: each record re-hashed, its columns against its bytes, positions consecutive from
    ``size + 1`` and streams linked inside the batch. What the chunk cannot see, the link of
    each stream's first record to the store's current head (``head(stream_id)``, None for
    a stream the store has not seen), is checked here.

    Raises:
        ConcurrencyError: ``records[0]`` is not at position ``size + 1``.
        LedgerDamaged: the first record that would not verify in this store.
    """
    if not records:
        return
    first = records[0].position
    if first != size + 1:
        raise ConcurrencyError(
            f"import must continue the log at position {size + 1}, but starts at {first}"
        )
    chunk = ChunkVerifier(first).feed_all(records)
    for sid, span in sorted(chunk.streams.items(), key=lambda kv: kv[1].first_position):
        if chunk.damage is not None and span.first_position >= (chunk.damage.position or 0):
            break
        known = head(sid)
        version, digest = (0, GENESIS) if known is None else known
        probe = RawRecord(
            span.first_position, sid, span.first_version, "", None, "", 0, span.first_prev,
            b"", b"",
        )  # fmt: skip
        damage = link_damage(sid, version, digest, probe)
        if damage is not None:
            raise damage
    if chunk.damage is not None:
        raise chunk.damage


def contiguous_nodes(rows: Iterable[tuple[int, bytes]], start: int) -> list[bytes]:
    """The hashes of ``(index, hash)`` rows, in index order, that run on from ``start``
    without a gap: what :meth:`MerkleNodeStore.merkle_nodes` returns."""
    out: list[bytes] = []
    for index, digest in rows:
        if index != start + len(out):
            break
        out.append(bytes(digest))
    return out


_REBUILD = "`tracebound checkpoint --full` stores the nodes again from the verified log"


def node_count(
    level: int, rows: int, lowest: object, highest: object, first_gap: Callable[[], int]
) -> int:
    """What :meth:`MerkleNodeStore.merkle_node_count` returns, from ``COUNT(*)``,
    ``MIN(idx)`` and ``MAX(idx)`` of a level's stored nodes.

    Distinct integer indexes from 0 whose highest is ``rows - 1`` are exactly ``0 .. rows
    - 1``. Anything else was written by hand and is named, never counted past:
    ``first_gap()`` (asked only then) is the lowest index ``i >= 0`` whose ``i + 1`` is
    not stored.

    Raises:
        ProofError: an index below 0 or not an integer, or a node missing below the
            highest stored one.
    """
    if rows == 0:
        return 0
    for index in (lowest, highest):
        if type(index) is not int:
            raise ProofError(
                f"a stored Merkle node of level {level} has the index {short_repr(index)}, "
                f"not an integer: the nodes were written by hand; {_REBUILD}"
            )
    assert isinstance(lowest, int)  # for mypy: checked above
    assert isinstance(highest, int)
    if lowest < 0:
        raise ProofError(
            f"a stored Merkle node of level {level} has the index {lowest}, below 0: the "
            f"nodes were written by hand; {_REBUILD}"
        )
    if highest != rows - 1:
        missing = 0 if lowest > 0 else first_gap() + 1
        raise ProofError(
            f"node {missing} of level {level} is missing, but the store holds a node of "
            f"that level at index {highest} ({rows} in all): a node was deleted, or one "
            f"written beyond the ones stored; {_REBUILD}"
        )
    return rows
