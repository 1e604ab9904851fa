"""The embedded SQLite backend: one file, WAL, every append durable before it returns.

Positions are ``max(position) + 1`` inside a ``BEGIN IMMEDIATE`` transaction, which takes
SQLite's single write lock; so positions are gap-free and writers in several processes
serialise instead of corrupting each other. (A single event onto a head this connection
knows is one autocommit INSERT instead: the primary key on the position refuses it if
anyone else wrote since, see ``_append_solo``.) ``synchronous=FULL`` makes COMMIT wait for
the WAL's fsync, so an acknowledged append survives power loss. Appends write through the
C kernel's ``Writer`` connection when it is built (ADR 0010), else through pysqlite.

The costly work, canonicalising payloads, happens before the lock is taken; under the lock
the store only formats a short suffix, hashes and inserts (see `events/record.py`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import Any, Final

from tracebound.errors import (
    ConcurrencyConflict,
    ConfigError,
    DamageKind,
    LedgerDamaged,
    StorageError,
    StoreBusy,
    StoreClosed,
    StoreNotFound,
)
from tracebound.events.envelope import RecordedEvent
from tracebound.events.record import decode_at
from tracebound.ids import ChainHead, StreamVersion
from tracebound.integrity import _kernel
from tracebound.integrity.chain import GENESIS
from tracebound.integrity.verify import PAGE
from tracebound.store._chaining import (
    Chained,
    ChainedAppends,
    Prepared,
    PreparedRequest,
    Row,
    chain_rows,
    recorded_events,
    stream_json,
    stream_page_events,
)
from tracebound.store.collector import paused_collector
from tracebound.store.files import create_private_file, why_unwritable
from tracebound.store.port import (
    AppendRequest,
    RawRecord,
    RecordFilter,
    StreamHead,
    check_import,
    contiguous_nodes,
    node_count,
    window_pages,
)

__all__ = ["DB_FILENAME", "SCHEMA_VERSION", "SQLiteStore"]

DB_FILENAME: Final = "ledger.db"
SCHEMA_VERSION: Final = 1
_PAGE = 1000  # rows per keyset page: bounded memory, short read transactions
# WAL pages after which a commit checkpoints: SQLite's default, set explicitly because the
# blob store and the bench's bare-SQLite floor share it. A durable (FULL) commit that
# extends the WAL file costs ~1.5-2x one that overwrites it in place: fdatasync must then
# also commit the file's new size to the filesystem journal. The WAL is rewritten in place
# from its start after each checkpoint, so a short WAL reaches that steady state sooner:
# with 10,000 pages every fresh store (and every process, since SQLite deletes the WAL
# when the last connection closes) spent its first ~40 MB of appends growing the file.
# Measured alternately, WAL + FULL (BENCHMARKS.md, round 7): 1 event per append
# 11.3-14.5k -> 22.9-24.1k/s; 16 threads with group commit 40-43k -> 46k/s; batches of
# 1000 unchanged. (Round 5 picked 10,000 from commits measured with synchronous=NORMAL,
# where no commit fsyncs and only the checkpoint's two fsyncs showed.)
_WAL_AUTOCHECKPOINT: Final = 1000
# A batch of at least this many events is appended in chunks of _PIPELINE_CHUNK whose
# SQLite inserts (in the C writer, without the GIL) run beside the next chunk's Python work
# (prepare, chain, the returned events): see SQLiteStore._append_pipelined.
_PIPELINE_MIN: Final = 512
_PIPELINE_CHUNK: Final = 128  # 64-256 measured alike; 512 slower (less overlap)
_VERIFY_PAGE = PAGE  # verify's pages: a power of two, so each page is one Merkle subtree

# No index on workflow_id: nothing reads events by workflow (projections read by position),
# and each index is one more B-tree insert per append. Stores created before this change
# keep their events_by_workflow index, which is harmless there. (Statements below are split
# on semicolons, so the schema text itself holds none in comments.)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    position       INTEGER PRIMARY KEY,
    stream_id      TEXT    NOT NULL,
    stream_version INTEGER NOT NULL,
    event_type     TEXT    NOT NULL,
    workflow_id    TEXT,
    timestamp      TEXT    NOT NULL,
    schema_version INTEGER NOT NULL,
    prev_hash      BLOB    NOT NULL,
    hash           BLOB    NOT NULL,
    body           BLOB    NOT NULL,
    UNIQUE (stream_id, stream_version)
);
CREATE TABLE IF NOT EXISTS checkpoints (
    size INTEGER PRIMARY KEY,
    note TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS merkle_nodes (
    level INTEGER NOT NULL,
    idx   INTEGER NOT NULL,
    hash  BLOB    NOT NULL,
    PRIMARY KEY (level, idx)
) WITHOUT ROWID;
"""

_COLUMNS = (
    "position, stream_id, stream_version, event_type, workflow_id, timestamp, "
    "schema_version, prev_hash, hash, body"
)
# Reads CAST the hashed columns: if someone rewrote a BLOB as TEXT, verify must see the
# bytes (and judge them), not crash on a str.
_RAW_SELECT = (
    "position, stream_id, stream_version, event_type, workflow_id, timestamp, "
    "schema_version, CAST(prev_hash AS BLOB), CAST(hash AS BLOB), CAST(body AS BLOB)"
)
# Built from the constant column lists above, never from input; values are always bound.
_INSERT: Final = f"INSERT INTO events ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)"  # noqa: S608
_SELECT_RAW: Final = (
    f"SELECT {_RAW_SELECT} FROM events "  # noqa: S608 - constant columns, bound values
    "WHERE position >= ? AND position <= ? ORDER BY position LIMIT ?"
)


def _matching_sql(where: RecordFilter) -> tuple[str, tuple[Any, ...]]:
    """The statement of :meth:`SQLiteStore.read_raw_matching` and its bound values after the
    window's two: ``column IN (...)``, or'ed with a search of the body for each needle."""
    terms: list[str] = []
    params: list[Any] = []
    for column, values, needles in (
        ("event_type", where.kinds, where.kind_needles()),
        ("workflow_id", where.workflows, where.workflow_needles()),
    ):
        if values is None:
            continue
        ors = [f"{column} IN ({','.join('?' * len(values))})"] if values else ["0"]
        ors += ["instr(CAST(body AS BLOB), ?) > 0"] * len(needles)
        terms.append(f"({' OR '.join(ors)})")
        params += [*sorted(values), *needles]
    where_sql = "".join(f" AND {term}" for term in terms)
    sql = (
        f"SELECT {_RAW_SELECT} FROM events "  # noqa: S608 - constant columns, bound values
        f"WHERE position >= ? AND position <= ?{where_sql} ORDER BY position LIMIT ?"
    )
    return sql, tuple(params)


def _foreign(path: Path, why: str) -> ConfigError:
    return ConfigError(
        f"{path} is another application's SQLite database ({why}); a ledger needs a file of its own"
    )


def _table_columns(conn: sqlite3.Connection) -> dict[str, frozenset[str]]:
    """Each table of a database and its columns, in one query."""
    found: dict[str, set[str]] = {}
    for table, column in conn.execute(
        "SELECT m.name, c.name FROM sqlite_master AS m, pragma_table_info(m.name) AS c "
        "WHERE m.type = 'table'"
    ):
        found.setdefault(table, set()).add(column)
    return {table: frozenset(columns) for table, columns in found.items()}


@functools.cache
def _ledger_columns() -> dict[str, frozenset[str]]:
    """Each table of the ledger's schema and its columns, read from the schema itself."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        conn.executescript(_SCHEMA)
        return _table_columns(conn)


def _bind_kernel_reader() -> type[Any] | None:
    """The C kernel's SQLite page reader, bound to the SQLite library Python itself loaded.

    The kernel does not link SQLite: it looks the functions up in the library behind
    Python's ``_sqlite3`` module, so that this process never runs two copies of SQLite (two
    copies would not see each other's POSIX locks on the same file). None if unavailable.
    """
    kernel = _kernel.KERNEL
    if kernel is None:
        return None
    module_path = getattr(importlib.import_module("_sqlite3"), "__file__", None)
    if module_path is None or not kernel.bind_sqlite(module_path):
        return None
    reader: type[Any] = kernel.Reader
    return reader


_KernelReader: type[Any] | None = _bind_kernel_reader()
"""``Reader(path, busy_timeout_ms)`` of the C kernel, or None: verify reads through Python."""
_KernelError: type[Exception] = (
    _kernel.KERNEL.SQLiteError if _kernel.KERNEL is not None else sqlite3.Error
)
_KernelWriter: type[Any] | None = (
    getattr(_kernel.KERNEL, "Writer", None) if _KernelReader is not None else None
)
"""``Writer(path, busy_timeout_ms, setup)`` of the C kernel (bound with the reader), or
None: appends go through :class:`_PyWriter`. Tests set it to None to run that path."""
_WRITE_ERRORS: Final = (sqlite3.Error, _KernelError)
"""What a writer raises for a failed statement (either implementation)."""
_CONSTRAINT_ERRORS: Final = (
    sqlite3.IntegrityError,
    getattr(_kernel.KERNEL, "ConstraintError", sqlite3.IntegrityError),
)
"""...and for a statement that broke a constraint (a position or stream version taken)."""
_HEAD_SQL: Final = (
    "SELECT stream_version, hash FROM events WHERE stream_id = ? "
    "ORDER BY stream_version DESC LIMIT 1"
)
_LAST_SQL: Final = "SELECT COALESCE(MAX(position), 0) FROM events"
# One statement, one snapshot. A bare COUNT(*) is SQLite's page count of its smallest index
# (no row is decoded: ~5 ms for 1M events); MIN and MAX are one seek each.
_EXTENT_SQL: Final = (
    "SELECT (SELECT COUNT(*) FROM events), (SELECT COALESCE(MIN(position), 0) FROM events), "
    "(SELECT COALESCE(MAX(position), 0) FROM events)"
)
_FIRST_NODE_GAP_SQL: Final = (
    # The lowest stored index whose successor is not stored (``next - 1``: no overflow).
    "SELECT idx FROM (SELECT idx, LEAD(idx) OVER (ORDER BY idx) AS next FROM merkle_nodes "
    "WHERE level = ? AND idx >= 0) AS t WHERE next IS NULL OR next - 1 <> idx "
    "ORDER BY idx LIMIT 1"
)


class _PyWriter:
    """The append connection through pysqlite: the statements the C kernel's ``Writer``
    runs (same SQL, same errors' meaning), for builds without it.

    One cursor for all of them: ``conn.execute`` makes a new cursor object per statement,
    and a single append runs three or four.
    """

    __slots__ = ("conn", "cursor")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.cursor = conn.cursor()

    def exec(self, sql: str) -> None:
        self.cursor.execute(sql)

    def data_version(self) -> int:
        (version,) = self.cursor.execute("PRAGMA data_version").fetchone()
        return int(version)

    def last_position(self) -> int:
        (last,) = self.cursor.execute(_LAST_SQL).fetchone()
        return int(last)

    def head(self, stream_id: str) -> tuple[int, bytes] | None:
        row = self.cursor.execute(_HEAD_SQL, (stream_id,)).fetchone()
        return None if row is None else (row[0], row[1])

    def insert(self, rows: list[Row]) -> None:
        if len(rows) == 1:
            self.cursor.execute(_INSERT, rows[0])
        else:
            self.cursor.executemany(_INSERT, rows)

    # The kernel Writer runs these on its own thread; pysqlite holds the GIL through its
    # binding anyway, so here they run at once and ``wait`` has nothing to wait for.
    def insert_async(self, rows: list[Row]) -> None:
        self.insert(rows)

    def chain_async(self, *args: Any) -> None:
        return None  # the kernel's: here ``chain_rows`` chains, then ``insert_async``

    def exec_async(self, sql: str) -> None:
        self.exec(sql)

    def wait(self) -> None:
        return None

    def checkpointing(self) -> bool:
        return False  # SQLite checkpoints inside the COMMIT here

    def int_query(self, sql: str) -> int:
        (value,) = self.cursor.execute(sql).fetchone()
        return int(value)

    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def close(self) -> None:
        self.conn.close()


_CORRUPT_CODES: Final = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB (primary codes)
_CORRUPT_TEXTS: Final = ("database disk image is malformed", "file is not a database")


def _is_corruption(exc: BaseException) -> bool:
    """Whether SQLite found the file itself damaged (not locked, missing or unwritable)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _CORRUPT_CODES:
        return True
    return any(text in str(exc) for text in _CORRUPT_TEXTS)  # the kernel's errors: text only


_BUSY_CODES: Final = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED (primary codes)
_BUSY_TEXTS: Final = ("database is locked", "table is locked", "schema is locked")


def _is_busy(exc: BaseException) -> bool:
    """Whether SQLite gave up waiting for a lock another connection held (busy_timeout)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _BUSY_CODES:
        return True
    return any(text in str(exc) for text in _BUSY_TEXTS)  # the kernel's errors: text only


def sqlite_failure(
    what: str, exc: BaseException, path: Path | None, busy_timeout: float | None = None
) -> StorageError:
    """The error of a statement that failed: :class:`StoreBusy` if another connection held
    the lock all through ``busy_timeout``, else a StorageError with what can be seen of why.

    Shared with the views database and the projections' reader, so a locked file is the
    same StoreBusy wherever SQLite met it."""
    if path is not None and _is_busy(exc):
        return StoreBusy(
            str(path),
            busy_timeout,
            f"if it is stopped or hung, find it among the processes `fuser -v {path}` lists, "
            "then let it go on (kill -CONT PID) or end it (SQLite rolls back what it had not "
            f"committed). SQLite said: {exc}",
        )
    return StorageError(f"sqlite {what} failed: {exc}{io_cause(exc, path)}")


@contextmanager
def _translated(
    what: str, path: Path | None = None, busy_timeout: float | None = None
) -> Iterator[None]:
    """Turn sqlite3 (and kernel) errors into StorageError, no backend exception escapes;
    a file SQLite finds damaged is :class:`LedgerDamaged` (``malformed``), not a storage
    failure: damage is reported as damage, whichever command met it first; a lock another
    connection held too long is :class:`StoreBusy`."""
    try:
        yield
    except _WRITE_ERRORS as exc:
        if _is_corruption(exc):
            where = f"{path}: " if path is not None else ""
            raise LedgerDamaged(
                DamageKind.MALFORMED,
                None,
                f"{where}SQLite cannot read the ledger file ({exc}); it is damaged, not "
                "repaired (restore it from a copy; `tracebound copy` makes verified copies)",
            ) from exc
        raise sqlite_failure(what, exc, path, busy_timeout) from exc


_IO_CODES: Final = frozenset({3, 8, 10, 13, 14})  # PERM, READONLY, IOERR, FULL, CANTOPEN
_IO_TEXTS: Final = ("disk I/O error", "readonly database", "unable to open", "disk is full")


def io_cause(exc: BaseException, path: Path | None) -> str:
    """For an error of writing or opening the file, what can be seen of why (see
    :func:`why_unwritable`): ``"; <why>"``, or nothing."""
    code = getattr(exc, "sqlite_errorcode", None)
    if path is None or not (
        (isinstance(code, int) and code & 0xFF in _IO_CODES)
        or any(text in str(exc) for text in _IO_TEXTS)  # the kernel's errors: text only
    ):
        return ""
    why = why_unwritable(path, ("-wal", "-shm"))
    return f"; {why}" if why else f" ({path})"


def _chunked(requests: Sequence[AppendRequest]) -> Iterator[PreparedRequest]:
    """The requests prepared in chunks of ``_PIPELINE_CHUNK`` events of one stream each (an
    empty request as one empty chunk, whose expected version still counts). Needs no lock
    and no connection."""
    for request in requests:
        sid, events, expected = request.stream_id, request.events, request.expected_version
        if not events:
            yield PreparedRequest(sid, expected, [])
        for start in range(0, len(events), _PIPELINE_CHUNK):
            items = [Prepared(e) for e in events[start : start + _PIPELINE_CHUNK]]
            yield PreparedRequest(sid, expected if start == 0 else None, items)


def _resumed(
    ahead: list[PreparedRequest], failed: Exception | None, rest: Iterator[PreparedRequest]
) -> Iterator[PreparedRequest]:
    """The chunks prepared ahead of the BEGIN, then the error that stopped that (if any),
    then the rest: an error in preparing is raised after the checks of the chunks before
    it, as when nothing is prepared ahead."""
    yield from ahead
    if failed is not None:
        raise failed
    yield from rest


def _check_expected(chunk: PreparedRequest, known: dict[str, tuple[int, bytes]]) -> None:
    """:class:`ConcurrencyConflict` if the chunk's expected version does not hold."""
    sid, expected = chunk.stream_id, chunk.expected_version
    version = known[sid][0]
    if expected is not None and expected != version:
        raise ConcurrencyConflict(sid, expected, version)


def _chain_and_insert(
    db: Any, chunk: PreparedRequest, position: int, known: dict[str, tuple[int, bytes]]
) -> Chained:
    """Chain ``chunk`` after ``position`` (its expected version checked by the caller) and
    start inserting it on the writer's thread (which must be idle). The kernel's
    ``chain_async`` chains there too, so the rows' bodies and digests (and the stream's new
    head) are not to be read before ``db.wait()``; where it declines, ``chain_rows`` chains
    here first."""
    sid, _, items = chunk
    version, prev = known[sid]
    done = (
        db.chain_async(items, sid, stream_json(sid), position, version, prev)
        if type(sid) is str
        else None
    )
    if done is None:
        chained = chain_rows([chunk], position, known.__getitem__)
        db.insert_async(chained.rows)
        return chained
    rows, last, version, prev = done
    return Chained(rows, last, {sid: (version, prev)})


class _WriterState:
    """What one connection knows about the log's head, valid while nobody else writes.

    ``PRAGMA data_version`` changes when *another* connection (in this process or any
    other) commits to the file, and stays put for this connection's own commits. So while
    it is unchanged, the last position and the stream heads this connection wrote are still
    the file's, and the two queries that would fetch them can be skipped.
    """

    __slots__ = ("data_version", "db", "heads", "position", "solo_off")

    MAX_HEADS: Final = 4096  # streams remembered; more are looked up again
    # After a single-row append found its cache stale (another connection wrote), the next
    # this many single-row appends take the transaction: a busy multi-process ledger would
    # otherwise pay a failed INSERT on nearly every append.
    SOLO_BACKOFF: Final = 64

    def __init__(self, db: Any) -> None:
        self.db = db  # a kernel Writer or a _PyWriter: the same methods
        self.data_version: int | None = None
        self.position: int | None = None
        self.heads: dict[str, tuple[int, bytes]] = {}
        self.solo_off = 0

    def forget(self) -> None:
        """Drop everything cached: the next transaction reads the head again."""
        self.data_version = self.position = None
        self.heads.clear()

    def sync(self, data_version: int) -> None:
        if data_version != self.data_version:
            self.forget()
            self.data_version = data_version

    def abort(self) -> None:
        """After a failed append: drop the cache and roll back what SQLite has not."""
        self.forget()
        if self.db.in_transaction():  # SQLite rolls back by itself after some I/O errors
            self.db.exec("ROLLBACK")


def rollback_open(conn: sqlite3.Connection) -> None:
    """Roll back the connection's transaction, if SQLite has not already.

    After some errors (an I/O error, a full disk) SQLite rolls back by itself; a ROLLBACK
    then raises "no transaction is active", and that error would replace the one that
    says what went wrong.
    """
    if conn.in_transaction:
        conn.execute("ROLLBACK")


class SQLiteStore(ChainedAppends):
    """A ledger in one SQLite file. Safe to share between threads and processes.

    Args:
        path: the database file, or a directory that holds ``ledger.db``.
        create: create the file (and directory, mode 0700) if it does not exist.
        synchronous: SQLite's ``synchronous`` setting. ``FULL`` (the default) is what
            makes an acknowledged append durable; ``NORMAL`` is faster and may lose the
            last commits on power loss (never on a process crash).
        busy_timeout: seconds a writer waits for another process's write lock.
    """

    # Group commit may run a group's commit in any appending thread: appends write through
    # one connection (``_writer``), whichever thread makes them.
    _commit_in_any_thread: Final = True

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = True,
        synchronous: str = "FULL",
        busy_timeout: float = 60.0,
    ) -> None:
        p = Path(path)
        if p.is_dir() or (not p.suffix and not p.exists()):
            p = p / DB_FILENAME
        if synchronous.upper() not in {"FULL", "EXTRA", "NORMAL"}:
            raise ConfigError(f"synchronous must be FULL, EXTRA or NORMAL, not {synchronous!r}")
        if not p.exists():
            if not create:
                raise StoreNotFound(
                    f"no ledger at {p}; run `tracebound init` first", place=("sqlite", str(p))
                )
            p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            create_private_file(p)
        self.path = p
        self.url = f"sqlite:///{p}"
        self._synchronous = synchronous.upper()
        self._busy_timeout = busy_timeout
        self._write_lock = threading.Lock()
        self._local = threading.local()
        # The connection appends write through, whichever thread appends (see _writer).
        self._writer_conn: _WriterState | None = None
        self._closed = False
        # Each with the thread it serves (None: the store's own, a _PyWriter's, kept to close)
        # and the lock its thread holds through each statement (see _using).
        self._connections: list[
            tuple[threading.Thread | None, sqlite3.Connection, threading.Lock]
        ] = []
        self._connections_lock = threading.Lock()
        try:
            self._open(create=create)
        except BaseException:
            self.close()  # a refused open keeps no connection until the collector runs
            raise

    def _open(self, *, create: bool) -> None:
        """Check the file is a ledger (or may become one), then set it up."""
        with self._io("open"):
            conn = self._conn()
            # Before anything writes: a read command must not turn a file into a ledger.
            if self._check_is_ledger(conn, create=create):
                # Complete already: write nothing, so that opening (every read command)
                # never waits for the write lock of a writer that is stopped mid-append.
                return
            # WAL lets readers run beside the one writer and makes commits a single append.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("BEGIN IMMEDIATE")
            for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                conn.execute(statement)
            conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            conn.execute("COMMIT")

    def _check_is_ledger(self, conn: sqlite3.Connection, *, create: bool) -> bool:
        """Refuse a file that holds no ledger, or another application's database; whether
        the ledger is complete (in WAL mode, every table and the schema version row there).

        The schema below is created ``IF NOT EXISTS`` on every open that finds it
        incomplete (a ledger made by an older version gains the tables it lacks), so
        without this check any command would add a ledger's tables to an empty file, or to
        an application's database.

        Raises:
            StoreNotFound: an empty database and not ``create``.
            ConfigError: tables of another application (naming the first that differs).
        """
        tables = _table_columns(conn)
        if not tables:
            if not create:
                raise StoreNotFound(
                    f"no ledger at {self.path} (the file holds no tables); run "
                    "`tracebound init` first",
                    place=("sqlite", str(self.path)),
                )
            return False
        ours = _ledger_columns()
        for table in sorted(ours.keys() & tables.keys()):
            if missing := ours[table] - tables[table]:
                raise _foreign(self.path, f"its {table} table lacks {', '.join(sorted(missing))}")
        # A ledger has its events table, or at least the meta row every open writes (an
        # events table dropped is damage, which verify reports against the checkpoints).
        versioned = "meta" in tables and bool(
            conn.execute("SELECT 1 FROM meta WHERE key = 'schema_version'").fetchone()
        )
        if "events" not in tables and not versioned:
            raise _foreign(self.path, f"tables {', '.join(sorted(tables)[:5])}")
        return (
            versioned
            and ours.keys() <= tables.keys()
            and conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        )

    # -- connections ---------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (use it through :meth:`_using`)."""
        if self._closed:
            raise StoreClosed(f"{self.url} is closed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn, self._local.lock = self._connect(threading.current_thread())
            self._local.conn = conn
        return conn

    @contextmanager
    def _using(self, what: str) -> Iterator[sqlite3.Connection]:
        """This thread's connection, held for the statements of the ``with`` block, with
        sqlite3 errors translated (:meth:`_io`).

        :meth:`close` from another thread closes this connection too; closing a connection
        while one of its statements runs frees what the statement is using (a stray
        MemoryError, or a segmentation fault), so close() takes this lock first. A ``with``
        block never spans a ``yield``: a reader that stops iterating never holds it.
        """
        with self._io(what):
            conn = self._conn()
            with self._local.lock:
                if self._closed:  # close() began while this thread waited for the lock
                    raise StoreClosed(f"{self.url} is closed")
                yield conn

    def _connect(self, owner: threading.Thread | None) -> tuple[sqlite3.Connection, threading.Lock]:
        """A new connection for ``owner``'s reads (None: the store's, for every thread),
        and its lock (see :meth:`_using`)."""
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            check_same_thread=False,
            timeout=self._busy_timeout,
        )
        conn.executescript(self._setup_sql())
        lock = threading.Lock()
        with self._connections_lock:
            if self._closed:  # close() has taken the list already: this one would stay open
                conn.close()
                raise StoreClosed(f"{self.url} is closed")
            # Threads come and go (a server's thread per request): the connections of those
            # that ended are closed here, not kept open (two descriptors each) until close().
            kept = []
            for thread, c, held in self._connections:
                if thread is None or thread.is_alive():
                    kept.append((thread, c, held))
                else:
                    c.close()
            kept.append((owner, conn, lock))
            self._connections = kept
        return conn, lock

    def _setup_sql(self) -> str:
        """The settings every connection of this store runs with (one statement each)."""
        return (
            f"PRAGMA synchronous={self._synchronous};"
            f"PRAGMA wal_autocheckpoint={_WAL_AUTOCHECKPOINT};"
            "PRAGMA foreign_keys=ON;"
        )

    def _io(self, what: str) -> AbstractContextManager[None]:
        """:func:`_translated` for this store's file and lock wait."""
        return _translated(what, self.path, self._busy_timeout)

    def _failed(self, what: str, exc: BaseException) -> StorageError:
        """The error of a statement that failed, with what can be seen of why."""
        return sqlite_failure(what, exc, self.path, self._busy_timeout)

    def _writer(self) -> _WriterState:
        """The connection every append writes through and what it knows of the log's head
        (caller holds the write lock): the C kernel's ``Writer`` when built, which binds
        rows and runs the inserts and the COMMIT without the GIL, else :class:`_PyWriter`.

        One per store, not one per thread: appends are serialised by the write lock anyway,
        and group commit's leader is whichever thread arrived last. Writing through each
        thread's own connection in turn made every commit find its connection's page cache
        and cached heads stale (another connection had written since), so it re-read the
        index pages and looked every stream's head up again.
        """
        if self._closed:
            raise StoreClosed(f"{self.url} is closed")
        writer = self._writer_conn
        if writer is None:
            if _KernelWriter is not None:
                with self._io("open"):
                    db = _KernelWriter(
                        str(self.path), int(self._busy_timeout * 1000), self._setup_sql()
                    )
                    # The WAL is checkpointed at the same size, but on the writer's own
                    # thread once the append that filled it has returned (ADR 0010).
                    db.defer_checkpoints(_WAL_AUTOCHECKPOINT)
            else:
                db = _PyWriter(self._connect(None)[0])
            writer = self._writer_conn = _WriterState(db)
        return writer

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran: every later call raises :class:`StoreClosed`."""
        return self._closed

    @property
    def busy_timeout(self) -> float:
        """Seconds a connection of this store waits for another's lock."""
        return self._busy_timeout

    def close(self) -> None:
        with self._write_lock:  # not while an append is using the writer
            writer, self._writer_conn = self._writer_conn, None
            self._closed = True
            if writer is not None and not isinstance(writer.db, _PyWriter):
                writer.db.close()  # a _PyWriter's connection is among the ones below
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for _, conn, lock in connections:
            with lock:  # another thread's statement on it runs to its end first
                conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- appends -------------------------------------------------------------------------

    def _append_prepared(
        self, batches: Sequence[Sequence[PreparedRequest]]
    ) -> list[list[RecordedEvent] | ConcurrencyConflict]:
        """Append independent all-or-nothing batches in one transaction: one fsync.

        The seam for group commit (and what :meth:`append_batch` runs with one batch). A
        batch whose expected version does not hold gets its ConcurrencyConflict back and
        writes nothing; the batches after it see the heads as if it had never been asked
        for. An error fails them all (ROLLBACK).
        """
        chained: list[Chained | ConcurrencyConflict] = []
        # try/except rather than the _translated context manager: on a single append its
        # generator costs about a microsecond, and this is the hot path.
        with self._write_lock:
            try:
                if not self._append_solo(batches, chained):
                    self._append_locked(batches, chained)
            except _WRITE_ERRORS as exc:
                raise self._failed("append", exc) from exc
        # Built after the commit: nothing here needs the lock.
        return [
            done if isinstance(done, ConcurrencyConflict) else recorded_events(batch, done.rows)
            for batch, done in zip(batches, chained, strict=True)
        ]

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[RecordedEvent]:
        if _KernelWriter is not None:
            count = 0
            for request in requests:
                count += len(request.events)
            if count >= _PIPELINE_MIN:
                return self._append_pipelined(requests)
        return super().append_batch(requests)

    def _append_pipelined(self, requests: Sequence[AppendRequest]) -> list[RecordedEvent]:
        """A large batch, all or nothing, with its SQLite work beside its Python work.

        One transaction, as ever; but the batch is prepared, chained and inserted in chunks:
        while the C writer chains and inserts one chunk on its own thread (no GIL), this
        thread prepares the next, and it builds the returned events while the COMMIT fsyncs.
        Chunks are prepared before ``BEGIN IMMEDIATE`` for as long as the writer's thread is
        still checkpointing the WAL after an earlier append (which the BEGIN would wait
        for: ~10 ms every few batches of 1000). Every stream head is read right after the
        BEGIN, before the first insert (the writer does one thing at a time).
        """
        prepared = _chunked(requests)
        with self._write_lock, paused_collector():  # its objects form no cycles
            state = self._writer()
            db = state.db
            ahead: list[PreparedRequest] = []
            failed: Exception | None = None
            try:
                for chunk in prepared:
                    ahead.append(chunk)
                    if not db.checkpointing():
                        break
            except Exception as exc:  # noqa: BLE001 - raised in turn (_resumed)
                failed = exc
            out: list[RecordedEvent] = []
            try:
                try:
                    db.exec("BEGIN IMMEDIATE")  # inside: an interrupt just after it rolls back
                    position = self._sync_head(state)
                    known = state.heads
                    for sid in {r.stream_id for r in requests} - known.keys():
                        known[sid] = db.head(sid) or (0, GENESIS)
                    chunks: list[tuple[list[PreparedRequest], list[Row]]] = []
                    for chunk in _resumed(ahead, failed, prepared):
                        # Checked before the wait for the chunk before, as chain_rows did: a
                        # conflict is reported even if that chunk's insert failed.
                        _check_expected(chunk, known)
                        if not chunk.items:  # an empty request: its expected version only
                            continue
                        db.wait()  # for the chunk before (none: returns at once)
                        done = _chain_and_insert(db, chunk, position, known)
                        chunks.append(([chunk], done.rows))
                        # The cache moves on (dropped below if this fails); the heads' digests
                        # are the worker's to write until the wait.
                        position = state.position = done.position
                        known.update(done.heads)
                    db.wait()
                    db.exec_async("COMMIT")
                    for batch, rows in chunks:
                        out += recorded_events(batch, rows)
                    db.wait()
                except BaseException:
                    # The writer must be idle before it rolls back, whatever was under way
                    # (wait() with nothing under way returns at once).
                    with suppress(*_WRITE_ERRORS):  # the first error is the one raised
                        db.wait()
                    state.abort()
                    raise
            except _WRITE_ERRORS as exc:
                raise self._failed("append", exc) from exc
            return out

    @staticmethod
    def _sync_head(state: _WriterState) -> int:
        """Bring the cached log head up to date, inside the append transaction (drop it if
        another connection committed since, read the last position if unknown); the last
        position."""
        db = state.db
        state.sync(db.data_version())
        if len(state.heads) > state.MAX_HEADS:
            state.heads.clear()
        if state.position is None:
            state.position = db.last_position()
        return state.position

    def _append_solo(
        self,
        batches: Sequence[Sequence[PreparedRequest]],
        chained: list[Chained | ConcurrencyConflict],
    ) -> bool:
        """Append one event to a stream whose head is cached as a single autocommit INSERT,
        skipping BEGIN IMMEDIATE, the data_version check and COMMIT (~2 us of a ~20 us
        append); False, having written nothing, when that does not apply.

        Sound because positions are gap-free: any commit by another connection since this
        cache was last valid took position ``state.position + 1``, so the INSERT fails on
        the primary key (or, for the same stream, on ``UNIQUE (stream_id, stream_version)``)
        instead of chaining onto a stale head. Then the cache is dropped and the caller takes
        the transaction, which reads the head again. A conflict on the expected version may
        come from a stale cache too, so it is left to that path to judge.
        """
        if len(batches) != 1 or len(batches[0]) != 1 or len(batches[0][0].items) != 1:
            return False
        batch = batches[0]
        state = self._writer()
        known = state.heads
        if state.solo_off:
            state.solo_off -= 1
            return False
        db = state.db
        if state.position is None or batch[0].stream_id not in known or db.in_transaction():
            return False
        try:
            done = chain_rows(batch, state.position, known.__getitem__)
        except ConcurrencyConflict:
            return False
        try:
            db.insert(done.rows)  # one row, autocommit: durable on return
        except _CONSTRAINT_ERRORS:
            state.forget()  # another connection wrote: its event holds our position
            state.solo_off = state.SOLO_BACKOFF
            return False
        except BaseException:
            state.forget()
            raise
        state.position = done.position
        known.update(done.heads)
        chained.append(done)
        return True

    def _append_locked(
        self,
        batches: Sequence[Sequence[PreparedRequest]],
        chained: list[Chained | ConcurrencyConflict],
    ) -> None:
        """The transaction of :meth:`_append_prepared` (caller holds the write lock)."""
        state = self._writer()
        db = state.db
        try:
            db.exec("BEGIN IMMEDIATE")  # inside: an interrupt just after it rolls back
            position = self._sync_head(state)
            known = state.heads

            def head_of(sid: str) -> tuple[int, bytes]:
                cached = known.get(sid)
                if cached is None:
                    cached = db.head(sid) or (0, GENESIS)
                return cached

            rows: list[Row] = []
            for batch in batches:
                try:
                    done = chain_rows(batch, position, head_of)
                except ConcurrencyConflict as conflict:
                    chained.append(conflict)
                    continue
                # The cache moves ahead inside the transaction, so the next batch chains
                # onto this one; it is dropped below if the transaction does not commit.
                position = state.position = done.position
                known.update(done.heads)
                rows += done.rows
                chained.append(done)
            if rows:
                db.insert(rows)
            db.exec("COMMIT")
        except BaseException:
            state.abort()
            raise

    @staticmethod
    def _head(conn: sqlite3.Connection, stream_id: str) -> StreamHead | None:
        row = conn.execute(_HEAD_SQL, (stream_id,)).fetchone()
        return None if row is None else StreamHead(StreamVersion(row[0]), ChainHead(row[1]))

    # -- reads ---------------------------------------------------------------------------

    def stream_head(self, stream_id: str) -> StreamHead | None:
        with self._using("read") as conn:
            return self._head(conn, stream_id)

    def size(self) -> int:
        with self._using("read") as conn:
            (last,) = conn.execute(_LAST_SQL).fetchone()
            return int(last)

    def log_extent(self) -> tuple[int, int, int]:
        with self._using("read") as conn:
            count, lowest, highest = conn.execute(_EXTENT_SQL).fetchone()
            return int(count), int(lowest), int(highest)

    def read_raw(self, *, start: int = 1, stop: int | None = None) -> Iterator[RawRecord]:
        # Keyset pages: each page is one short read transaction, so a long reader neither
        # holds the WAL back nor grows in memory.
        upper = stop if stop is not None else (1 << 62)
        cursor = start
        while cursor <= upper:
            with self._using("read") as conn:
                page = conn.execute(
                    _SELECT_RAW,
                    (cursor, upper, _PAGE),
                ).fetchall()
            if not page:
                return
            for row in page:
                yield RawRecord(*row)
            cursor = page[-1][0] + 1

    def read_raw_matching(
        self, where: RecordFilter, *, start: int = 1, stop: int | None = None
    ) -> Iterator[RawRecord]:
        # No index on the filtered columns (each would cost every append a B-tree insert):
        # a scan, but in SQLite's C, in windows of positions, each its own short read.
        sql, params = _matching_sql(where)

        def page(lo: int, hi: int) -> list[Any]:
            with self._using("read") as conn:
                return conn.execute(sql, (lo, hi, *params, _PAGE)).fetchall()

        for rows in window_pages(page, self.size, start=start, stop=stop, limit=_PAGE):
            for row in rows:
                yield RawRecord(*row)

    def read_raw_pages(
        self, *, start: int = 1, stop: int | None = None, page_size: int = _VERIFY_PAGE
    ) -> Iterator[list[tuple[Any, ...]]]:
        """:meth:`read_raw` as pages of plain tuples in :class:`RawRecord` field order.

        The bulk reader behind ``verify``: building a named tuple per record costs more than
        SQLite takes to read it. Each page is its own short read transaction, as above.
        """
        upper = stop if stop is not None else (1 << 62)
        cursor = start
        while cursor <= upper:
            with self._using("read") as conn:
                page = conn.execute(_SELECT_RAW, (cursor, upper, page_size)).fetchall()
            if not page:
                return
            yield page
            cursor = page[-1][0] + 1

    @property
    def verify_in_threads(self) -> bool:
        """Whether :meth:`verify_pages` and the C kernel do a page's work without the GIL.

        Then ``Ledger.verify`` runs its helpers as threads of this process: they need no
        interpreter of their own, start at once and share this process's memory.
        """
        return _KernelReader is not None and _kernel.KERNEL is not None

    def verify_pages(
        self, *, start: int = 1, stop: int | None = None
    ) -> Iterator[Sequence[Sequence[Any]]]:
        """The pages ``verify`` checks: :meth:`read_raw_pages`, read in C when possible.

        With the C kernel built, each page is read by its own SQLite connection straight into
        a kernel page, which the kernel checks without a Python object per record; a page that
        holds anything but plain records is read by :meth:`read_raw_pages`'s query instead.
        Either way a page is its own short read transaction, and its rows index like the
        tuples :meth:`read_raw_pages` yields.
        """
        reader_type = _KernelReader
        if reader_type is None:
            yield from self.read_raw_pages(start=start, stop=stop)
            return
        upper = stop if stop is not None else (1 << 62)
        cursor = start
        with self._io("read"):
            self._conn()  # raises StoreClosed once closed
        try:
            busy_ms = int(min(self._busy_timeout * 1000, 2**31 - 1))
            reader = reader_type(str(self.path), busy_ms)
        except _KernelError as exc:
            raise self._failed("read", exc) from exc
        try:
            while cursor <= upper:
                try:
                    page: Sequence[Sequence[Any]] | None = reader.page(cursor, upper, _VERIFY_PAGE)
                except _KernelError as exc:
                    raise self._failed("read", exc) from exc
                if page is None:  # something unusual in this page: read it the usual way
                    with self._using("read") as conn:
                        page = conn.execute(_SELECT_RAW, (cursor, upper, _VERIFY_PAGE)).fetchall()
                if not page:
                    return
                yield page
                cursor = page[-1][0] + 1
        finally:
            reader.close()

    def read_log(self, *, start: int = 1, stop: int | None = None) -> Iterator[RecordedEvent]:
        for raw in self.read_raw(start=start, stop=stop):
            yield decode_at(raw.position, raw.hash, raw.body)

    def read_stream(
        self, stream_id: str, *, from_version: int = 1, to_version: int | None = None
    ) -> Iterator[RecordedEvent]:
        upper = to_version if to_version is not None else (1 << 62)
        cursor = from_version
        while cursor <= upper:
            with self._using("read") as conn:
                page = conn.execute(
                    "SELECT position, stream_version, CAST(hash AS BLOB), CAST(body AS BLOB) "
                    "FROM events "
                    "WHERE stream_id = ? AND stream_version >= ? AND stream_version <= ? "
                    "ORDER BY stream_version LIMIT ?",
                    (stream_id, cursor, upper, _PAGE),
                ).fetchall()
            if not page:
                return
            yield from stream_page_events(stream_id, page)
            cursor = page[-1][1] + 1

    def stream_positions(
        self, stream_id: str, from_version: int, to_version: int
    ) -> list[tuple[int, int]]:
        with self._using("read") as conn:
            rows = conn.execute(
                "SELECT stream_version, position FROM events WHERE stream_id = ? "
                "AND stream_version >= ? AND stream_version <= ? ORDER BY stream_version",
                (stream_id, from_version, to_version),
            ).fetchall()
        return [(int(v), int(p)) for v, p in rows]

    # -- checkpoints ---------------------------------------------------------------------

    def save_checkpoint(self, size: int, note: str) -> None:
        with self._write_lock, self._using("checkpoint") as conn:
            conn.execute(
                "INSERT OR REPLACE INTO checkpoints (size, note) VALUES (?, ?)", (size, note)
            )

    def latest_checkpoint(self) -> str | None:
        with self._using("read") as conn:
            row = conn.execute("SELECT note FROM checkpoints ORDER BY size DESC LIMIT 1").fetchone()
        return None if row is None else str(row[0])

    def checkpoints(self) -> list[tuple[int, str]]:
        with self._using("read") as conn:
            rows = conn.execute("SELECT size, note FROM checkpoints ORDER BY size").fetchall()
        return [(int(s), str(n)) for s, n in rows]

    # -- Merkle nodes (MerkleNodeStore) -------------------------------------------------

    def read_hashes(self, start: int, stop: int) -> list[bytes]:
        with self._using("read") as conn:
            rows = conn.execute(
                "SELECT CAST(hash AS BLOB) FROM events WHERE position BETWEEN ? AND ? "
                "ORDER BY position",
                (start, stop),
            ).fetchall()
        return [h for (h,) in rows]

    def merkle_nodes(self, level: int, start: int, stop: int) -> list[bytes]:
        with self._using("read") as conn:
            rows = conn.execute(
                "SELECT idx, CAST(hash AS BLOB) FROM merkle_nodes "
                "WHERE level = ? AND idx >= ? AND idx < ? ORDER BY idx",
                (level, start, stop),
            ).fetchall()
        return contiguous_nodes(rows, start)

    def merkle_node_count(self, level: int) -> int:
        # Not MAX(idx) + 1 alone: one forged row at 2**40 made that the count. The column
        # is not STRICT, so an index edited by hand may be text or real: it is named.
        with self._using("read") as conn:
            rows, lowest, highest, odd = conn.execute(
                "SELECT COUNT(*), MIN(idx), MAX(idx), "
                "MIN(CASE typeof(idx) WHEN 'integer' THEN NULL ELSE quote(idx) END) "
                "FROM merkle_nodes WHERE level = ?",
                (level,),
            ).fetchone()

            def first_gap() -> int:
                (gap,) = conn.execute(_FIRST_NODE_GAP_SQL, (level,)).fetchone()
                return int(gap)

            if odd is not None:  # quote(): the stored value as SQL writes it
                lowest = highest = odd
            return node_count(level, int(rows), lowest, highest, first_gap)

    def add_merkle_nodes(self, level: int, start: int, hashes: Sequence[bytes]) -> None:
        with self._write_lock, self._using("write") as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR IGNORE INTO merkle_nodes (level, idx, hash) VALUES (?, ?, ?)",
                    [(level, start + i, h) for i, h in enumerate(hashes)],
                )
                conn.execute("COMMIT")
            except BaseException:
                rollback_open(conn)
                raise

    def drop_merkle_nodes(self) -> None:
        with self._write_lock, self._using("write") as conn:
            conn.execute("DELETE FROM merkle_nodes")

    # -- metadata ------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        with self._using("read") as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._write_lock, self._using("write") as conn:
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # -- import (``tracebound copy``) ----------------------------------------------------

    def import_raw(self, records: Sequence[RawRecord]) -> None:
        """Insert records verbatim, as another store holds them: see :class:`ImportStore`.

        One ``BEGIN IMMEDIATE`` transaction, so the checks (``check_import``) and the insert
        see the same log head, and the records land all or none. It runs on this thread's
        own connection, not the append writer (records from another store need not be the
        types the kernel writer binds, e.g. memoryview bodies); the writer's cached head is
        dropped after it.
        """
        if not records:
            return
        with self._write_lock, self._using("import") as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                (last,) = conn.execute(_LAST_SQL).fetchone()
                check_import(int(last), records, lambda sid: self._head(conn, sid))
                conn.executemany(_INSERT, [tuple(r) for r in records])
                conn.execute("COMMIT")
            except BaseException:
                rollback_open(conn)
                raise
            finally:
                if self._writer_conn is not None:
                    self._writer_conn.forget()
