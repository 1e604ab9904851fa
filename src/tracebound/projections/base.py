"""The projection contract: pure ``apply`` over event records, rows out through a small sink.

ADR-0034 makes every concern a projection of one log, and asks that each be idempotent and
testable from a fixture stream. So a projection here is split in two:

* **logic**, backend-free: a :class:`Projection` declares its tables (:class:`Table`) and an
  ``apply(record, rows)`` that reads and writes rows through :class:`Rows`, keyed by the
  table's primary key. It never sees SQL, so the same class runs against SQLite today and
  PostgreSQL later, and against a plain in-memory dict in tests.
* **storage**, a :class:`RowSink`: loads a row by key and writes a batch of rows together
  with the projection's new position, in one transaction. That transaction is what makes a
  projection run exactly once: rows and position commit together or not at all.

Rows are plain dicts of Python values. Column types are few on purpose (text, integer, exact
decimal, JSON) so that each maps one-to-one onto both backends; money is a
:class:`~decimal.Decimal` in Python and a decimal string in SQLite (``NUMERIC`` in Postgres),
never a float.

An event record is the decoded canonical record the ledger hashed (see
:mod:`tracebound.projections.records`): a dict with ``event_type``, ``payload``,
``workflow_id``, ``timestamp`` (RFC 3339, microseconds, ``Z``), ``position`` and so on.
Projections work on these dicts rather than on validated models because the ledger already
validated every payload before it was hashed; re-validating a million records would cost
more than everything else on the read path together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

__all__ = [
    "Column",
    "ColumnType",
    "EventRecord",
    "Key",
    "Projection",
    "Row",
    "RowSink",
    "Rows",
    "Table",
]

EventRecord: TypeAlias = Mapping[str, Any]
"""One decoded ledger record: the canonical JSON object the chain hashed, as Python data."""

Row: TypeAlias = dict[str, Any]
"""One view row: column name to Python value (str, int, Decimal, JSON data or None)."""

Key: TypeAlias = tuple[Any, ...]
"""A primary-key value, in the order of :attr:`Table.key`."""

ColumnType: TypeAlias = Literal["text", "integer", "decimal", "json"]
"""The few column types every backend can hold exactly (no floats: money is ``decimal``)."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a view table."""

    name: str
    type: ColumnType = "text"
    nullable: bool = False


@dataclass(frozen=True, slots=True)
class Table:
    """A view table: columns, a primary key, and secondary indexes for the reports' queries.

    Every table is keyed, so a replayed event overwrites the row it wrote the first time
    instead of adding a second one; that is half of what makes projections idempotent (the
    position committed with the rows is the other half).
    """

    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    indexes: tuple[tuple[str, ...], ...] = ()
    narrow: bool = False
    """Rows stay small (a few hundred bytes): a backend may cluster them by key (SQLite
    ``WITHOUT ROWID``), one b-tree instead of a table plus a key index."""
    column_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        names = tuple(c.name for c in self.columns)
        object.__setattr__(self, "column_names", names)
        missing = [k for k in self.key if k not in names]
        if missing or not self.key:
            raise ValueError(f"table {self.name}: key {self.key} names unknown columns {missing}")

    def key_of(self, row: Mapping[str, Any]) -> Key:
        return tuple(row[k] for k in self.key)


@runtime_checkable
class Projection(Protocol):
    """A pure reducer from event records to rows of its own tables.

    ``name`` identifies the projection's position; ``version`` is bumped when its logic or
    tables change, and the runner then rebuilds it (drop, replay from 0). ``kinds`` lists
    the event types it reads, or is ``None`` for "every event"; the runner skips the call
    for other kinds, which is also how a projection ignores event types it does not know.

    Optionally, a projection may set ``reads_payload = False`` (a class attribute, not part
    of the protocol): it then reads only the envelope (position, type, workflow, time...)
    and is handed records whose ``payload`` is None unless another projection of the same
    runner reads that kind's payload. The runner then skips parsing payloads nobody reads.

    It may also define ``apply_many(records, rows)`` (not part of the protocol either): the
    batch form of ``apply``, handed a list of records of its kinds in log order, which must
    leave the rows exactly as calling ``apply`` on each would. The runner prefers it, and
    when it raises, drops the projection's cache and re-applies the batch with ``apply`` to
    find the failing event (see :meth:`ProjectionRunner._dispatch`).
    """

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def tables(self) -> tuple[Table, ...]: ...

    @property
    def kinds(self) -> frozenset[str] | None: ...

    def apply(self, record: EventRecord, rows: Rows) -> None:
        """Fold one event into the rows. Must depend only on ``record`` and ``rows``."""
        ...


class RowSink(Protocol):
    """What a storage backend does for projections; one implementation per backend."""

    def load(self, table: Table, key: Key) -> Row | None:
        """The stored row with this key, or None."""
        ...


class Rows:
    """A write-behind cache of one projection's rows: what ``apply`` reads and writes.

    ``get`` returns the cached row (loading it from the sink on a miss) and ``put`` marks it
    to be written; ``insert`` queues an append-only row that is never read back (the audit
    trail writes one per event and must not pay for caching them). :meth:`drain` hands the
    batch to the sink's transaction.

    ``fresh`` names tables known to be empty when the run began (a rebuild, a first run):
    a key that this cache never wrote cannot be in them, so a miss costs no query.
    """

    __slots__ = ("_cache", "_dirty", "_fresh", "_inserts", "_limit", "_sink", "_written")

    def __init__(
        self, sink: RowSink, *, fresh: Iterable[str] = (), cache_limit: int = 200_000
    ) -> None:
        self._sink = sink
        self._cache: dict[str, dict[Key, Row | None]] = {}
        self._dirty: dict[str, set[Key]] = {}
        self._inserts: dict[str, list[Row]] = {}
        self._fresh = set(fresh)
        self._written: dict[str, set[Key]] = {name: set() for name in self._fresh}
        self._limit = cache_limit

    def get(self, table: Table, key: Key) -> Row | None:
        """The current row for ``key`` (as last put, or as stored), or None.

        Mutating the returned dict changes the cached row; call :meth:`put` to write it.
        """
        cache = self._cache.get(table.name)
        if cache is None:
            cache = self._cache[table.name] = {}
        try:
            return cache[key]
        except KeyError:
            pass
        written = self._written.get(table.name)
        row = None if written is not None and key not in written else self._sink.load(table, key)
        cache[key] = row
        return row

    def put(self, table: Table, key: Key, row: Row) -> None:
        """Set the row for ``key`` (its primary-key values, in order); written at commit."""
        name = table.name
        cache = self._cache.get(name)
        if cache is None:
            cache = self._cache[name] = {}
        cache[key] = row
        dirty = self._dirty.get(name)
        if dirty is None:
            dirty = self._dirty[name] = set()
        dirty.add(key)

    def insert(self, table: Table, row: Row) -> None:
        """Queue an append-only row (replaced by key if it exists); never read back."""
        rows = self._inserts.get(table.name)
        if rows is None:
            rows = self._inserts[table.name] = []
        rows.append(row)

    def drain(self) -> dict[str, list[Row]]:
        """Take every row written since the last drain, by table name, and mark them clean.

        Clean rows stay cached for the next batch unless the cache has grown past its limit,
        so memory stays bounded on a long catch-up.
        """
        out: dict[str, list[Row]] = {}
        for name, keys in self._dirty.items():
            cache = self._cache[name]
            rows = out.setdefault(name, [])
            rows.extend(r for k in keys if (r := cache[k]) is not None)
            written = self._written.get(name)
            if written is not None:
                written.update(keys)
        for name, rows in self._inserts.items():
            out.setdefault(name, []).extend(rows)
        self._dirty = {}
        self._inserts = {}
        if sum(len(c) for c in self._cache.values()) > self._limit:
            self._cache = {}
        if sum(len(w) for w in self._written.values()) > 10 * self._limit:
            self._written = {}  # past this, remembering every key costs more than a query
        return out

    @property
    def cached(self) -> int:
        """Rows cached and keys remembered as written: what :meth:`release` would free."""
        return sum(map(len, self._cache.values())) + sum(map(len, self._written.values()))

    def release(self) -> None:
        """Forget the cached rows and the keys written so far; nothing may be undrained.

        After a long catch-up (a rebuild) the cache holds hundreds of thousands of rows and
        keys that the cyclic collector, paused during the run, would then walk once per
        generation as they age (1.3 s for the first pass after a 1M-event rebuild); a
        follower's next batches touch few of them, and a miss costs one query.
        """
        assert not self._dirty, "release() with put rows not yet drained"
        assert not self._inserts, "release() with inserted rows not yet drained"
        self._cache = {}
        self._written = {}

    def discard(self) -> None:
        """Forget everything not yet drained, and the cache (it may hold half-applied rows)."""
        self._cache = {}
        self._dirty = {}
        self._inserts = {}
