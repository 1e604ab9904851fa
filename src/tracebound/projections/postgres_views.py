"""Materialised views in a PostgreSQL schema: the same projections, rows and positions.

The SQLite views file (:mod:`.sqlite_views`) is the embedded default. When the ledger lives
in PostgreSQL, its readers usually do too (and on replicas), so the views can be kept there:
``tracebound project run --views postgresql://user@host/db?schema=views``. The projection
classes do not change; only this sink does.

**Exactly once.** Each batch's rows of every projection and the projections' new positions
are written in ONE transaction (:meth:`PostgresViews.commit`), against a position table in
the views' own schema, so a crash leaves both or neither and the runner replays from the
stored position. (``PostgresStore.tracking(name)`` gives the same guarantee for one
projection per transaction; the runner commits all of them at once, and its position rows
carry a version and the last failure too, so the views keep an equivalent table of their
own, beside the rows, in the same transaction.) Each commit locks the positions it moves and
checks they are where this runner left them, so two runners on one schema cannot both apply
a batch: the second gets :class:`~tracebound.errors.ConcurrencyConflict`.

**Same rows as SQLite.** Column types map one to one: text ``TEXT``, integer ``BIGINT``,
decimal ``NUMERIC`` (written from the same decimal string the SQLite views store, so the
scale is kept and a read gives an equal :class:`~decimal.Decimal`), json ``JSONB`` (written
from the same canonical text and read back with orjson, as SQLite's are). Reads order text
keys with ``COLLATE "C"``, byte order, which is SQLite's order too, whatever the database's
locale. A test replays the golden histories through both and compares the rows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypeVar
from urllib.parse import parse_qsl, urlsplit

import orjson
import psycopg
from psycopg import sql
from psycopg.types.json import set_json_loads

from tracebound.errors import ConcurrencyConflict, ConfigError, ConnectionLost, StorageError
from tracebound.projections.base import Key, Projection, Row, Table
from tracebound.projections.sqlite_views import (
    _ENCODERS,
    LogAnchor,
    PositionRecord,
    TableWrite,
    _codec,
)
from tracebound.projections.trail import ENGINE_HISTORY
from tracebound.store.postgres import (
    apply_lock_timeout,
    connect_refused,
    connection_lost,
    display_url,
    lock_wait_error,
    parse_url,
)

__all__ = ["DEFAULT_VIEWS_SCHEMA", "PostgresViews"]

DEFAULT_VIEWS_SCHEMA: Final = "tracebound_views"
_MAX_IDENTIFIER: Final = 63

_PG_TYPES: Final = {"text": "text", "integer": "bigint", "decimal": "numeric", "json": "jsonb"}
_CASTS: Final = {"text": "text", "integer": "int8", "decimal": "numeric", "json": "jsonb"}

_Conn = psycopg.Connection[tuple[Any, ...]]
_T = TypeVar("_T")
_CONNECT_TIMEOUT: Final = 30  # seconds, as the ledger's sessions wait for a connection


def _not_allowed(what: str, exc: psycopg.Error, schema: str | None) -> StorageError:
    """A privilege the role lacks: ``schema`` is the views' schema when the command only
    reads them (then it lacks read privileges: telling it to read instead would be wrong)."""
    if schema is not None:
        return StorageError(
            f"postgresql views {what} failed: {exc}: reading the views needs USAGE on schema "
            f'{schema!r} and SELECT on its tables (docs/postgresql.md, "Roles and '
            'privileges")'
        )
    return StorageError(
        f"postgresql views {what} failed: {exc}: this role may not update the views "
        "(`project run`, and `report` unless told --no-update); a read-only role reads "
        "them with `report --no-update` and `project status`"
    )


@contextmanager
def _translated(
    what: str, place: str, waited: float | None = None, *, reads: str | None = None
) -> Iterator[None]:
    """No psycopg error escapes: they become StorageError, like the SQLite views', and a
    lock another session held past ``lock_timeout`` StoreBusy (``place`` and ``waited``, the
    session's lock_timeout: for its message). ``reads``: the schema, when the views are
    opened only to be read.
    """
    try:
        yield
    except psycopg.errors.LockNotAvailable as exc:
        busy = lock_wait_error(exc, place, waited)
        assert busy is not None
        raise busy from exc
    except psycopg.errors.InsufficientPrivilege as exc:
        raise _not_allowed(what, exc, reads) from exc
    except psycopg.Error as exc:
        lost = connection_lost(exc)  # a restart, a failover: the next call reconnects
        raise (ConnectionLost if lost else StorageError)(
            f"postgresql views {what} failed: {exc}"
        ) from exc


class PostgresViews:
    """The views in one PostgreSQL schema: positions, engine history, projection tables.

    Safe to share between threads (one connection behind a lock), like :class:`SQLiteViews`.

    A session that dies (a restart, a failover, ``pg_terminate_backend``) is replaced, and
    the call that found it dead runs once more on the new one: every call is a read or one
    whole transaction, so nothing of it was left half done. A commit whose COMMIT was lost
    with the session may have landed; its retry then finds the positions moved and raises
    :class:`~tracebound.errors.ConcurrencyConflict` instead of applying the batch twice.

    Args:
        url: ``postgresql://user@host:port/db?schema=name``; ``schema`` defaults to
            ``tracebound_views``. The schema may sit in the ledger's own database.
        create: create the schema and its position table if they are not there (the
            default). With ``False`` (a read-only command), views that are not there are a
            :class:`~tracebound.errors.ConfigError` and nothing is created.
    """

    def __init__(self, url: str, *, create: bool = True) -> None:
        dsn, schema = parse_url(url)
        if not any(k == "schema" for k, _ in parse_qsl(urlsplit(url).query)):
            schema = DEFAULT_VIEWS_SCHEMA  # never the ledger's own default schema
        if not schema or len(schema.encode()) > _MAX_IDENTIFIER or "\x00" in schema:
            raise ConfigError(f"schema must be 1-{_MAX_IDENTIFIER} bytes, not {schema!r}")
        self.schema = schema
        self.url = url
        self.place = display_url(dsn, schema)  # for messages: without the password
        self._lock = threading.RLock()
        self._tables: dict[str, Table] = {ENGINE_HISTORY.name: ENGINE_HISTORY}
        # seconds its session waits for a lock (None: none): the URL's or the role's
        # lock_timeout if one is set, else the ledger's 60 s (apply_lock_timeout)
        self.lock_timeout: float | None = None
        self._dsn = dsn
        # the schema, for a read-only command's messages (None: this one writes)
        self._reads = None if create else schema
        with _translated("open", self.place, self.lock_timeout, reads=self._reads):
            self._conn: _Conn = self._connect()
            try:
                if create:
                    self._set_up()
                else:  # a read-only role may run it: no DDL, not even IF NOT EXISTS
                    self._require_existing()
            except BaseException:
                self._conn.close()
                raise

    def _connect(self) -> _Conn:
        """A new autocommit session, JSONB read by orjson, with its lock_timeout set."""
        try:
            conn: _Conn = psycopg.connect(
                self._dsn,
                autocommit=True,
                application_name="tracebound",
                connect_timeout=_CONNECT_TIMEOUT,
            )
        except psycopg.Error as exc:
            # Not ConnectionLost: a follower would wait for a server that never lets it in.
            if (refused := connect_refused(exc, self.place, self._dsn)) is not None:
                raise refused from None  # it quotes PostgreSQL, without the password
            raise
        try:
            set_json_loads(orjson.loads, conn)
            self.lock_timeout = apply_lock_timeout(conn, None)
        except BaseException:
            conn.close()
            raise
        return conn

    def _retried(self, what: str, call: Callable[[], _T]) -> _T:
        """``call()`` under the lock, its errors translated; once more on a new session if
        the session turned out to be dead (see the class docstring for why that is safe)."""
        with self._lock:
            try:
                with _translated(what, self.place, self.lock_timeout, reads=self._reads):
                    return call()
            except StorageError:
                if not self._conn.broken:
                    raise
            self._conn.close()  # the dead session's socket and buffers, freed now
            with _translated(what, self.place, self.lock_timeout, reads=self._reads):
                self._conn = self._connect()
                return call()

    def _require_existing(self) -> None:
        """Refuse views that were never created: no position table in the schema."""
        found = self._conn.execute(
            "SELECT to_regclass(%s)",
            (sql.Identifier(self.schema, "projection_positions").as_string(self._conn),),
        ).fetchone()
        if found is None or found[0] is None:
            raise ConfigError(
                f"no views in schema {self.schema!r}; `tracebound project run` creates them "
                "(with the same --views)"
            )
        self._refuse_a_ledger()

    def _refuse_a_ledger(self) -> None:
        """Refuse a schema whose ``projection_positions`` is a ledger's (no version column)."""
        ours = self._conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'projection_positions' AND column_name = 'version'",
            (self.schema,),
        ).fetchone()
        if ours is None or ours[0] == 0:
            raise ConfigError(
                f"schema {self.schema!r} holds a ledger, not views; name another schema"
            )

    def _set_up(self) -> None:
        """Create the schema, the position table and the engine history, once; refuse a
        schema whose ``projection_positions`` is the ledger's (it has no version column)."""
        schema = self.schema
        with self._conn.transaction():
            self._serialise_ddl()
            self._conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
            )
            self._conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, "
                    "version bigint NOT NULL, position bigint NOT NULL, "
                    "failed_position bigint, error text)"
                ).format(self._name("projection_positions"))
            )
            self._refuse_a_ledger()
            self._conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (id int PRIMARY KEY CHECK (id = 1), "
                    "position bigint NOT NULL, hash text NOT NULL)"
                ).format(self._name("views_log"))
            )
            self._create(ENGINE_HISTORY)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> PostgresViews:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema --------------------------------------------------------------------------

    def _name(self, table: str) -> sql.Identifier:
        return sql.Identifier(self.schema, table)

    def _serialise_ddl(self) -> None:
        """Concurrent CREATE … IF NOT EXISTS can still collide in the catalog; a
        transaction-scoped advisory lock per schema makes schema changes one at a time."""
        self._conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            (f"tracebound-views:{self.schema}",),
        )

    def _create(self, table: Table) -> None:
        cols = sql.SQL(", ").join(
            sql.SQL("{} {}{}").format(
                sql.Identifier(c.name),
                sql.SQL(_PG_TYPES[c.type]),
                sql.SQL("" if c.nullable else " NOT NULL"),
            )
            for c in table.columns
        )
        key = sql.SQL(", ").join(map(sql.Identifier, table.key))
        self._conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))").format(
                self._name(table.name), cols, key
            )
        )
        for i, index in enumerate(table.indexes):
            self._conn.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                    sql.Identifier(f"{table.name}_ix{i}"),
                    self._name(table.name),
                    sql.SQL(", ").join(map(sql.Identifier, index)),
                )
            )
        self._tables[table.name] = table

    def prepare(self, projection: Projection) -> PositionRecord:
        """Create the projection's tables and position row; a new version starts over."""
        with self._lock:
            stored = self.position_record(projection.name)
            if stored is not None and stored.version != projection.version:
                self.reset(projection)
                stored = None
            if stored is None:
                self._retried("prepare", lambda: self._start(projection))
                return PositionRecord(projection.name, projection.version, 0, None, None)
            for table in projection.tables:
                self._tables[table.name] = table
            return stored

    def _start(self, projection: Projection) -> None:
        """Create the projection's tables and its position row at 0, in one transaction."""
        with self._conn.transaction():
            self._serialise_ddl()
            for table in projection.tables:
                self._create(table)
            self._conn.execute(
                sql.SQL(
                    "INSERT INTO {} (name, version, position) VALUES (%s, %s, 0) "
                    "ON CONFLICT (name) DO UPDATE SET version = excluded.version, "
                    "position = 0, failed_position = NULL, error = NULL"
                ).format(self._name("projection_positions")),
                (projection.name, projection.version),
            )

    def create_indexes(self, projections: Sequence[Projection]) -> None:
        """Nothing to do: PostgreSQL tables get their indexes when created."""

    def reset(self, projection: Projection) -> None:
        """Drop the projection's tables and position: the next run replays from position 0."""
        self._retried("reset", lambda: self._drop(projection))

    def _drop(self, projection: Projection) -> None:
        with self._conn.transaction():
            self._serialise_ddl()
            for table in projection.tables:
                self._conn.execute(
                    sql.SQL("DROP TABLE IF EXISTS {}").format(self._name(table.name))
                )
            self._conn.execute(
                sql.SQL("DELETE FROM {} WHERE name = %s").format(
                    self._name("projection_positions")
                ),
                (projection.name,),
            )
            self._conn.execute(  # a full rebuild forgets the log the views came from
                sql.SQL(
                    "DELETE FROM {} WHERE NOT EXISTS (SELECT 1 FROM {} WHERE position > 0)"
                ).format(self._name("views_log"), self._name("projection_positions"))
            )

    # -- positions -----------------------------------------------------------------------

    def _positions_query(self, suffix: sql.Composable) -> sql.Composed:
        return sql.SQL("SELECT name, version, position, failed_position, error FROM {} {}").format(
            self._name("projection_positions"), suffix
        )

    def position_record(self, name: str) -> PositionRecord | None:
        query = self._positions_query(sql.SQL("WHERE name = %s"))
        row = self._retried("read", lambda: self._conn.execute(query, (name,)).fetchone())
        return None if row is None else PositionRecord(*row)

    def log_anchor(self) -> LogAnchor | None:
        """The last record the views applied (None: none yet, or a schema written before
        the views kept it, read by a role that may not create the table)."""
        query = sql.SQL("SELECT position, hash FROM {}").format(self._name("views_log"))

        def read() -> tuple[Any, ...] | None:
            try:
                return self._conn.execute(query).fetchone()
            except psycopg.errors.UndefinedTable:
                return None

        row = self._retried("read", read)
        return None if row is None else LogAnchor(int(row[0]), str(row[1]))

    def positions(self) -> list[PositionRecord]:
        query = self._positions_query(sql.SQL('ORDER BY name COLLATE "C"'))
        rows = self._retried("read", lambda: self._conn.execute(query).fetchall())
        return [PositionRecord(*r) for r in rows]

    # -- the sink ------------------------------------------------------------------------

    def load(self, table: Table, key: Key) -> Row | None:
        """One row by primary key (the projections' read-through on a cache miss)."""
        query = sql.SQL("SELECT {} FROM {} WHERE {}").format(
            sql.SQL(", ").join(map(sql.Identifier, table.column_names)),
            self._name(table.name),
            sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(k)) for k in table.key),
        )
        found = self._retried("read", lambda: self._conn.execute(query, key).fetchone())
        return None if found is None else self._decode(table, found)

    @staticmethod
    def _decode(table: Table, values: Sequence[Any]) -> Row:
        """A row as SQLite's views decode it: psycopg already gives NUMERIC as Decimal and
        JSONB as data (parsed by orjson, registered on the connection)."""
        return dict(zip(table.column_names, values, strict=True))

    def _upsert(self, cur: psycopg.Cursor[Any], table: Table, rows: Sequence[Row]) -> None:
        codec = _codec(table.columns, _ENCODERS)
        names = [n for n, _ in codec]
        casts = [_CASTS[c.type] for c in table.columns]
        updates = [n for n in names if n not in table.key]
        conflict: sql.Composable = sql.SQL("DO NOTHING")
        if updates:
            conflict = sql.SQL("DO UPDATE SET {}").format(
                sql.SQL(", ").join(
                    sql.SQL("{} = excluded.{}").format(sql.Identifier(n), sql.Identifier(n))
                    for n in updates
                )
            )
        query = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}").format(
            self._name(table.name),
            sql.SQL(", ").join(map(sql.Identifier, names)),
            sql.SQL(", ").join(sql.SQL("%s::" + cast) for cast in casts),
            sql.SQL(", ").join(map(sql.Identifier, table.key)),
            conflict,
        )
        cur.executemany(
            query,
            [
                [r[n] if enc is None or r[n] is None else enc(r[n]) for n, enc in codec]
                for r in rows
            ],
        )

    def commit(self, writes: Sequence[TableWrite], anchor: LogAnchor | None = None) -> None:
        """Write every projection's rows and position in one transaction: all or nothing;
        with ``anchor``, the last record applied (kept if it is further than the stored).

        Raises:
            ConcurrencyConflict: another runner moved a position since this one read it.
            StorageError: PostgreSQL failed; nothing was written.
        """
        self._retried("commit", lambda: self._commit(writes, anchor))

    def _commit(self, writes: Sequence[TableWrite], anchor: LogAnchor | None) -> None:
        update = sql.SQL(
            "UPDATE {} SET position = %s, failed_position = %s, error = %s WHERE name = %s"
        ).format(self._name("projection_positions"))
        with self._conn.transaction(), self._conn.cursor() as cur:
            for w in writes:
                self._check_position(cur, w)
                for name, rows in w.rows.items():
                    if rows:
                        self._upsert(cur, self._tables[name], rows)
                cur.execute(update, (w.new_position, w.failed_position, w.error, w.projection.name))
            if anchor is not None:
                cur.execute(
                    sql.SQL(
                        "INSERT INTO {} AS a (id, position, hash) VALUES (1, %s, %s) "
                        "ON CONFLICT (id) DO UPDATE SET position = excluded.position, "
                        "hash = excluded.hash WHERE excluded.position >= a.position"
                    ).format(self._name("views_log")),
                    (anchor.position, anchor.hash),
                )

    def _check_position(self, cur: psycopg.Cursor[Any], w: TableWrite) -> None:
        """Lock the projection's position row and refuse to commit over another runner's."""
        found = cur.execute(
            sql.SQL("SELECT position FROM {} WHERE name = %s FOR UPDATE").format(
                self._name("projection_positions")
            ),
            (w.projection.name,),
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

        def upsert() -> None:
            with self._conn.transaction(), self._conn.cursor() as cur:
                if rows:
                    self._upsert(cur, ENGINE_HISTORY, rows)

        self._retried("import", upsert)
        return len(rows)

    # -- reading views -------------------------------------------------------------------

    def select(
        self,
        table: Table,
        *,
        where: Mapping[str, Any] | None = None,
        order_by: Sequence[str] | None = None,
    ) -> list[Row]:
        """Rows of a view table, decoded, ordered as :meth:`SQLiteViews.select` orders them.

        Text columns sort with ``COLLATE "C"`` (byte order, as SQLite does).
        """
        types = {c.name: c.type for c in table.columns}
        order = sql.SQL(", ").join(
            sql.SQL('{} COLLATE "C"' if types.get(c) == "text" else "{}").format(sql.Identifier(c))
            for c in (order_by or table.key)
        )
        query = sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, table.column_names)), self._name(table.name)
        )
        params: list[Any] = []
        if where:
            query += sql.SQL(" WHERE ") + sql.SQL(" AND ").join(
                sql.SQL("{} = %s").format(sql.Identifier(k)) for k in where
            )
            params = list(where.values())
        query += sql.SQL(" ORDER BY ") + order

        def read() -> list[tuple[Any, ...]]:
            try:
                return self._conn.execute(query, params).fetchall()
            except psycopg.errors.UndefinedTable:
                return []  # the projection has not run yet: an empty view

        return [self._decode(table, r) for r in self._retried("read", read)]

    def snapshot(self, tables: Sequence[Table]) -> dict[str, list[Row]]:
        """Every row of the given tables, ordered by key: what the equivalence tests compare."""
        return {t.name: self.select(t) for t in tables}
