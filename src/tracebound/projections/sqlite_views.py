"""Materialised views in their own SQLite file (default ``.tracebound/views.db``).

The views are derived data, never the source of truth, so they live apart from the ledger:
they can be dropped and rebuilt at any time, their writes never contend with appends for the
ledger's write lock, and a damaged views file loses nothing.

The file holds ``projection_positions(name, version, position, failed_position, error)``,
``views_log(position, hash)`` (the last record applied: which log the views are of, see
:class:`LogAnchor`), the imported ``engine_history`` and every projection's tables. A
projection's rows and its new position are written in ONE transaction
(:meth:`SQLiteViews.commit`), so after a crash either both are there or neither is, and
replaying from the stored position neither skips nor repeats an event.
``synchronous=NORMAL`` is enough for that: a power cut can lose the last commits, but it
loses rows and position together, and the runner replays them.

Column mapping (what a PostgreSQL sink would do differently in brackets): text and json are
TEXT [TEXT, JSONB], integer INTEGER [BIGINT], decimal is a plain decimal string in TEXT
[NUMERIC]; upserts are ``INSERT OR REPLACE`` [``ON CONFLICT (key) DO UPDATE``].
"""

from __future__ import annotations

import operator
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import orjson

from tracebound.errors import ConcurrencyConflict, ConfigError, StorageError
from tracebound.projections.base import Column, Key, Projection, Row, Table
from tracebound.projections.trail import ENGINE_HISTORY
from tracebound.store.files import create_private_file
from tracebound.store.sqlite import rollback_open, sqlite_failure

__all__ = ["VIEWS_FILENAME", "LogAnchor", "PositionRecord", "SQLiteViews", "TableWrite"]

VIEWS_FILENAME: Final = "views.db"

_SQL_TYPES: Final = {"text": "TEXT", "integer": "INTEGER", "decimal": "TEXT", "json": "TEXT"}

_CACHE_KIB: Final = -65_536
"""Page cache of the views connection (negative: KiB), 64 MiB: a catch-up batch rewrites
pages all over the keyed tables, and SQLite's 2 MiB default re-read most of them."""

_LEDGER_TABLES: Final = ("meta", "events", "checkpoints")
"""Tables every SQLite ledger has (tracebound.store.sqlite); views have none of them."""

_POSITIONS = """
CREATE TABLE IF NOT EXISTS projection_positions (
    name            TEXT PRIMARY KEY,
    version         INTEGER NOT NULL,
    position        INTEGER NOT NULL,
    failed_position INTEGER,
    error           TEXT
) WITHOUT ROWID
"""

_LOG = """
CREATE TABLE IF NOT EXISTS views_log (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    position INTEGER NOT NULL,
    hash     TEXT NOT NULL
)
"""
# One row: the last record the views applied, to tell this log from another (LogAnchor).
# Created by the first write that needs it, not on open: a read-only views file written
# before the table existed is still read.

_ANCHOR = (
    "INSERT INTO views_log (id, position, hash) VALUES (1, ?, ?) ON CONFLICT (id) DO UPDATE "
    "SET position = excluded.position, hash = excluded.hash "
    "WHERE excluded.position >= views_log.position"
)
_UNANCHOR = (
    "DELETE FROM views_log WHERE NOT EXISTS (SELECT 1 FROM projection_positions WHERE position > 0)"
)

DEFAULT_BUSY_TIMEOUT: Final = 60.0
"""Seconds a views statement waits for another process's lock: the SQLite ledger's wait, so
a report catching up beside ``project run --follow`` (or a parallel rebuild's other process)
waits as long as the README's busy-store promise says, not sqlite3's 5 s."""


@contextmanager
def _translated(what: str, path: Path, busy_timeout: float) -> Iterator[None]:
    """No sqlite3 error escapes: they become StorageError, like the ledger store's, and a
    lock another process held past ``busy_timeout`` StoreBusy."""
    try:
        yield
    except sqlite3.Error as exc:
        raise sqlite_failure(f"views {what}", exc, path, busy_timeout) from exc


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value, "f")
    to_dict = getattr(value, "to_dict", None)
    if to_dict is not None:
        return to_dict()
    raise TypeError(f"{type(value).__name__} is not JSON data")


_JSON_OPTS: Final = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS


def _encode_json(value: Any) -> str:
    return orjson.dumps(value, default=_json_default, option=_JSON_OPTS).decode()


def _encode_decimal(value: Any) -> str:
    return format(value if type(value) is Decimal else Decimal(value), "f")


def _encode_int(value: Any) -> int:
    return value if type(value) is int else int(value)


_ENCODERS: Final[dict[str, Callable[[Any], Any] | None]] = {
    "text": None,
    "integer": _encode_int,
    "decimal": _encode_decimal,
    "json": _encode_json,
}
_DECODERS: Final[dict[str, Callable[[Any], Any] | None]] = {
    "text": None,
    "integer": None,
    "decimal": Decimal,
    "json": orjson.loads,
}


def _codec(
    columns: Sequence[Column], table: dict[str, Callable[[Any], Any] | None]
) -> list[tuple[str, Callable[[Any], Any] | None]]:
    return [(c.name, table[c.type]) for c in columns]


def _quote(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise StorageError(f"refusing an SQL identifier that is not a plain name: {name!r}")
    return f'"{name}"'


@dataclass(frozen=True)
class PositionRecord:
    """A projection's row in ``projection_positions``."""

    name: str
    version: int
    position: int
    failed_position: int | None
    error: str | None


@dataclass(frozen=True)
class LogAnchor:
    """The furthest record the views applied: its position and chain hash (hex).

    The views' proof of which log they were built from: a log whose record at
    ``position`` has another hash (or that ends before it) is another history, and the
    runner refuses to mix it in. Commits only move it forward (two processes of a parallel
    rebuild commit their own positions); it is forgotten once every projection is back at
    position 0 (a full rebuild).
    """

    position: int
    hash: str


@dataclass(frozen=True)
class TableWrite:
    """One projection's part of a commit: rows by table, and where it now stands."""

    projection: Projection
    expected_position: int
    new_position: int
    rows: Mapping[str, list[Row]]
    failed_position: int | None = None
    error: str | None = None


class SQLiteViews:
    """The views database: positions, engine history and projection tables.

    Safe to share between threads (one connection behind a lock). One runner per file: each
    commit checks that the stored position is the one the runner started from, and raises
    :class:`~tracebound.errors.ConcurrencyConflict` if another runner moved it.

    ``busy_timeout``: seconds a statement waits for a lock another process holds on the
    views file (a runner or report committing) before raising
    :class:`~tracebound.errors.StoreBusy`; 60 s by default, as the SQLite ledger.
    """

    def __init__(self, path: str | Path, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        p = Path(path)
        if p.is_dir():
            p = p / VIEWS_FILENAME
        self.path = p
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._tables: dict[str, Table] = {ENGINE_HISTORY.name: ENGINE_HISTORY}
        self._unindexed: set[str] = set()  # fresh tables whose indexes wait for catch-up
        self._indexed: set[str] = set()
        self._writers: dict[Table, tuple[str, Callable[[Row], Sequence[Any]]]] = {}
        self._log_table = False  # views_log created (or seen) by this connection
        with _translated("open", self.path, self.busy_timeout):
            p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            create_private_file(p)  # what the views hold is the ledger's: owner-only too
            self._conn = sqlite3.connect(
                p, isolation_level=None, check_same_thread=False, timeout=busy_timeout
            )
            self._refuse_a_ledger(p)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(f"PRAGMA cache_size={_CACHE_KIB}")
            self._conn.execute(_POSITIONS)
            self._create(ENGINE_HISTORY)

    def _refuse_a_ledger(self, path: Path) -> None:
        """Views are derived data and live apart from the ledger: a views path that names a
        ledger's SQLite file (``--views`` given the store's ``ledger.db``) is refused before
        anything is written to it, rather than filled with projection tables."""
        found = {
            row[0]
            for row in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)",
                _LEDGER_TABLES,
            )
        }
        if found == set(_LEDGER_TABLES):
            self._conn.close()
            raise ConfigError(
                f"{path} holds a ledger, not views: give the views a file of their own "
                f"(the default is {VIEWS_FILENAME} beside the ledger)"
            )

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SQLiteViews:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema --------------------------------------------------------------------------

    def _create(self, table: Table, *, defer_indexes: bool = False) -> None:
        cols = ", ".join(
            f"{_quote(c.name)} {_SQL_TYPES[c.type]}{'' if c.nullable else ' NOT NULL'}"
            for c in table.columns
        )
        key = ", ".join(_quote(k) for k in table.key)
        name = _quote(table.name)
        # Wide tables stay rowid tables: their rows (a workflow's folded state, a trail
        # block) run to kilobytes, and WITHOUT ROWID b-trees spill rows that size into
        # overflow pages, which made the file 8x larger and the writes slower. Narrow ones
        # are clustered by key: one b-tree to write instead of the table and its key index.
        suffix = " WITHOUT ROWID" if table.narrow else ""
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS {name} ({cols}, PRIMARY KEY ({key})){suffix}"
        )
        self._tables[table.name] = table
        if defer_indexes and table.indexes:
            self._unindexed.add(table.name)
        else:
            self._create_indexes(table)

    def _create_indexes(self, table: Table) -> None:
        name = _quote(table.name)
        for i, index in enumerate(table.indexes):
            cols_ix = ", ".join(_quote(c) for c in index)
            self._conn.execute(
                f"CREATE INDEX IF NOT EXISTS {_quote(f'{table.name}_ix{i}')} ON {name} ({cols_ix})"
            )
        self._unindexed.discard(table.name)
        self._indexed.add(table.name)

    def create_indexes(self, projections: Sequence[Projection]) -> None:
        """Build the secondary indexes a fresh projection's tables were created without.

        A projection replayed from position 0 (a rebuild, a first run) gets its tables
        without secondary indexes, and the runner calls this once it has caught up: one
        sorted build per index instead of maintaining it on every row of the bulk load.
        Until then the views are complete but their secondary lookups unindexed; a run that
        stops half-way gets them when :meth:`prepare` next sees the projection.
        """
        todo = [t for p in projections for t in p.tables if t.name in self._unindexed]
        if not todo:
            return
        with self._lock, _translated("index", self.path, self.busy_timeout):
            for table in todo:
                self._create_indexes(table)

    def prepare(self, projection: Projection) -> PositionRecord:
        """Create the projection's tables and position row; a new version starts over.

        Returns the stored position record (position 0 for a new or rebuilt projection).
        """
        with self._lock, _translated("prepare", self.path, self.busy_timeout):
            stored = self.position_record(projection.name)
            if stored is not None and stored.version != projection.version:
                self.reset(projection)
                stored = None
            if stored is None:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    for table in projection.tables:
                        self._create(table, defer_indexes=True)
                    self._conn.execute(
                        "INSERT OR REPLACE INTO projection_positions "
                        "(name, version, position) VALUES (?, ?, 0)",
                        (projection.name, projection.version),
                    )
                    self._conn.execute("COMMIT")
                except BaseException:
                    rollback_open(self._conn)
                    raise
                return PositionRecord(projection.name, projection.version, 0, None, None)
            for table in projection.tables:
                self._tables[table.name] = table
                if stored.position == 0:
                    if table.indexes:
                        self._unindexed.add(table.name)  # built once it has caught up
                elif table.name not in self._indexed:
                    self._create_indexes(table)  # in case a bulk load stopped half-way
            return stored

    def reset(self, projection: Projection) -> None:
        """Drop the projection's tables and position: the next run replays from position 0."""
        with self._lock, _translated("reset", self.path, self.busy_timeout):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for table in projection.tables:
                    self._conn.execute(f"DROP TABLE IF EXISTS {_quote(table.name)}")
                self._conn.execute(
                    "DELETE FROM projection_positions WHERE name = ?", (projection.name,)
                )
                self._create_log_table()
                self._conn.execute(_UNANCHOR)
                self._conn.execute("COMMIT")
            except BaseException:
                rollback_open(self._conn)
                raise

    # -- positions -----------------------------------------------------------------------

    def position_record(self, name: str) -> PositionRecord | None:
        with self._lock, _translated("read", self.path, self.busy_timeout):
            row = self._conn.execute(
                "SELECT name, version, position, failed_position, error "
                "FROM projection_positions WHERE name = ?",
                (name,),
            ).fetchone()
        return None if row is None else PositionRecord(*row)

    def _create_log_table(self) -> None:
        if not self._log_table:
            self._conn.execute(_LOG)
            self._log_table = True

    def log_anchor(self) -> LogAnchor | None:
        """The last record the views applied (None: none yet, or views written before
        they kept it; see :class:`LogAnchor`)."""
        with self._lock, _translated("read", self.path, self.busy_timeout):
            try:
                row = self._conn.execute("SELECT position, hash FROM views_log").fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return None
                raise
        return None if row is None else LogAnchor(int(row[0]), str(row[1]))

    def positions(self) -> list[PositionRecord]:
        with self._lock, _translated("read", self.path, self.busy_timeout):
            rows = self._conn.execute(
                "SELECT name, version, position, failed_position, error "
                "FROM projection_positions ORDER BY name"
            ).fetchall()
        return [PositionRecord(*r) for r in rows]

    # -- the sink ------------------------------------------------------------------------

    def load(self, table: Table, key: Key) -> Row | None:
        """One row by primary key (the projections' read-through on a cache miss)."""
        where = " AND ".join(f"{_quote(k)} = ?" for k in table.key)
        cols = ", ".join(_quote(c) for c in table.column_names)
        with self._lock, _translated("read", self.path, self.busy_timeout):
            found = self._conn.execute(
                f"SELECT {cols} FROM {_quote(table.name)} WHERE {where}",  # noqa: S608 - quoted names
                key,
            ).fetchone()
        return None if found is None else self._decode(table, found)

    @staticmethod
    def _decode(table: Table, values: Sequence[Any]) -> Row:
        row: Row = {}
        for (name, decode), value in zip(_codec(table.columns, _DECODERS), values, strict=True):
            row[name] = value if decode is None or value is None else decode(value)
        return row

    def _upsert(self, table: Table, rows: Sequence[Row]) -> None:
        sql, encode = self._writer(table)
        self._conn.executemany(sql, map(encode, rows))

    def _writer(self, table: Table) -> tuple[str, Callable[[Row], Sequence[Any]]]:
        """The upsert statement of a table and a row-to-parameters function (cached)."""
        found = self._writers.get(table)
        if found is not None:
            return found
        codec = _codec(table.columns, _ENCODERS)
        cols = ", ".join(_quote(n) for n, _ in codec)
        marks = ", ".join("?" * len(codec))
        sql = f"INSERT OR REPLACE INTO {_quote(table.name)} ({cols}) VALUES ({marks})"  # noqa: S608
        # itemgetter picks the columns in C; only the columns with an encoder are revisited.
        pick = operator.itemgetter(*(n for n, _ in codec)) if len(codec) > 1 else None
        # Integer columns almost always hold ints already: they are checked inline, and
        # only a non-int (a Decimal, say) pays for a call; bool is an int and binds as one.
        ints = tuple(i for i, (_, enc) in enumerate(codec) if enc is _encode_int)
        coded = [(i, enc) for i, (_, enc) in enumerate(codec) if enc is not None and i not in ints]
        encode: Callable[[Row], Sequence[Any]]
        if pick is None:
            name, enc = codec[0]

            def encode(r: Row) -> Sequence[Any]:
                v = r[name]
                return (v if enc is None or v is None else enc(v),)

        elif not coded and not ints:
            encode = pick
        else:

            def encode(r: Row) -> Sequence[Any]:
                values = list(pick(r))
                for i in ints:
                    v = values[i]
                    if v.__class__ is not int and v is not None:
                        values[i] = _encode_int(v)
                for i, enc in coded:
                    v = values[i]
                    if v is not None:
                        values[i] = enc(v)
                return values

        self._writers[table] = found = (sql, encode)
        return found

    def commit(self, writes: Sequence[TableWrite], anchor: LogAnchor | None = None) -> None:
        """Write every projection's rows and position in one transaction: all or nothing;
        with ``anchor``, the last record applied (kept if it is further than the stored).

        Raises:
            ConcurrencyConflict: another runner moved a position since this one read it.
            StorageError: SQLite failed; nothing was written.
        """
        with self._lock, _translated("commit", self.path, self.busy_timeout):
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                for w in writes:
                    self._check_position(w)
                    for name, rows in w.rows.items():
                        if rows:
                            self._upsert(self._tables[name], rows)
                    conn.execute(
                        "UPDATE projection_positions SET position = ?, failed_position = ?, "
                        "error = ? WHERE name = ?",
                        (w.new_position, w.failed_position, w.error, w.projection.name),
                    )
                if anchor is not None:
                    self._create_log_table()
                    conn.execute(_ANCHOR, (anchor.position, anchor.hash))
                conn.execute("COMMIT")
            except BaseException:
                rollback_open(conn)
                raise

    def _check_position(self, w: TableWrite) -> None:
        """Refuse to commit over a position another runner has moved (one runner per file)."""
        found = self._conn.execute(
            "SELECT position FROM projection_positions WHERE name = ?", (w.projection.name,)
        ).fetchone()
        stored = None if found is None else int(found[0])
        if stored != w.expected_position:
            raise ConcurrencyConflict(
                f"projection:{w.projection.name}",
                w.expected_position,
                -1 if stored is None else stored,
            )

    # -- engine history ------------------------------------------------------------------

    def import_engine_history(self, rows: Sequence[Row]) -> int:
        """Store engine-history rows (see :mod:`.trail`); re-importing replaces, by key."""
        with self._lock, _translated("import", self.path, self.busy_timeout):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._upsert(ENGINE_HISTORY, rows)
                self._conn.execute("COMMIT")
            except BaseException:
                rollback_open(self._conn)
                raise
        return len(rows)

    # -- reading views -------------------------------------------------------------------

    def select(
        self,
        table: Table,
        *,
        where: Mapping[str, Any] | None = None,
        order_by: Sequence[str] | None = None,
    ) -> list[Row]:
        """Rows of a view table, decoded; ``where`` is column equality, ``order_by`` columns.

        Ordered by the primary key unless told otherwise, so reads are deterministic.
        """
        cols = ", ".join(_quote(c) for c in table.column_names)
        sql = f"SELECT {cols} FROM {_quote(table.name)}"  # noqa: S608 - quoted names
        params: list[Any] = []
        if where:
            sql += " WHERE " + " AND ".join(f"{_quote(k)} = ?" for k in where)
            params = list(where.values())
        sql += " ORDER BY " + ", ".join(_quote(c) for c in (order_by or table.key))
        with self._lock, _translated("read", self.path, self.busy_timeout):
            try:
                found = self._conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return []  # the projection has not run yet: an empty view
                raise
        return [self._decode(table, r) for r in found]

    def snapshot(self, tables: Sequence[Table]) -> dict[str, list[Row]]:
        """Every row of the given tables, ordered by key: what the idempotency tests compare."""
        return {t.name: self.select(t) for t in tables}
