"""The PostgreSQL backend: many writer processes and hosts, one gap-free global order.

**Positions.** A one-row table, ``log_head``, holds the last assigned position. An append
runs ``UPDATE log_head SET position = position + n RETURNING position`` as the first
statement of its transaction. The row lock this takes is held until COMMIT, so appends
serialise on it and each one gets the block of positions right after the previous one.
Because the lock is released only after the commit is visible to other sessions, commit
order *is* position order: the positions any reader can see always form a prefix
``1..k``. A reader tailing the log by position therefore never passes a position that
commits later. That is the bug of a plain ``bigserial`` event table: its sequence hands
out numbers without waiting, so transaction 6 can commit before transaction 5, a reader
sees 6, moves on, and never sees 5.

Only the position comes from the locked row. Stream heads are read by a *later* statement
of the same transaction: under READ COMMITTED each statement takes a new snapshot, so once
the lock is held the heads include every earlier append. (A head read in the same statement
as the lock would use a snapshot from before the wait, and could chain onto a stale head.)

**Record bytes.** The writer canonicalises each payload before the lock
(:func:`~tracebound.events.record.event_prefix`); under the lock the store formats the
suffix and hashes, exactly as the SQLite backend does, so the same events at the same
positions hash to the same bytes in both.

**Round trips.** Every round trip made while the lock is held limits every writer on every
host, so an append of fewer than ``_COPY_THRESHOLD`` events is pipelined into two: BEGIN +
lock (with NOTIFY) + stream heads, then one multi-row INSERT + COMMIT. Larger appends stream
their rows with binary COPY between the two, chained piece by piece so that the server
ingests one piece while this process chains the next.

**Durability.** Every session sets ``synchronous_commit = on``: an append returns only once
its commit record is flushed (and, with synchronous replication configured on the server,
replicated).

**Subscriptions** LISTEN on a per-schema channel; each append sends ``NOTIFY`` with its
last position in the same transaction, so the notification is delivered only if and after
the events commit. **Tracking** keeps projection positions in ``projection_positions``,
updated in the projection's own transaction.

Every ``psycopg.Error`` is translated into :class:`~tracebound.errors.StorageError` (or
:class:`~tracebound.errors.ConcurrencyError` for lock and serialisation failures). An append
first replaces a session the server already ended (its goodbye is in the socket): nothing
was sent, so it runs once on the new one. Lost once something was sent, it is never
retried: :class:`~tracebound.errors.ConnectionLost` before its COMMIT was sent (nothing
written), :class:`~tracebound.errors.CommitOutcomeUnknown` after, since it may have
committed.
"""

from __future__ import annotations

import os
import re
import selectors
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from time import monotonic
from typing import TYPE_CHECKING, Any, Final, Self
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import psycopg
from blake3 import blake3
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.types.string import BytesBinaryDumper

from tracebound.errors import (
    CommitOutcomeUnknown,
    ConcurrencyConflict,
    ConcurrencyError,
    ConfigError,
    ConnectionLost,
    DamageKind,
    LedgerDamaged,
    StorageError,
    StoreBusy,
    StoreClosed,
    StoreNotFound,
    TraceboundError,
)
from tracebound.events.envelope import RecordedEvent
from tracebound.events.record import decode_at
from tracebound.ids import ChainHead, StreamVersion
from tracebound.integrity.chain import GENESIS
from tracebound.store._chaining import (
    ChainedAppends,
    PreparedRequest,
    Row,
    chain_rows,
    prepare_requests,
    recorded_events,
    stream_page_events,
)
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

if TYPE_CHECKING:
    from tracebound.store.port import LedgerStore, Subscription, SubscriptionStore, TrackingStore

__all__ = [
    "DEFAULT_SCHEMA",
    "SCHEMA_VERSION",
    "PostgresStore",
    "PostgresSubscription",
    "PostgresTracking",
    "parse_url",
]

DEFAULT_SCHEMA: Final = "tracebound"
SCHEMA_VERSION: Final = 1
_PAGE: Final = 1000  # rows per keyset page: bounded memory, one short statement per page
_VERIFY_PAGE: Final = 2048  # verify's page: a power of two, so a page is one Merkle subtree
_GOODBYE_READS: Final = 4  # reads of an idle session's unasked input: a FATAL, then EOF
_COPY_THRESHOLD: Final = 1000  # events from which an append streams rows with binary COPY
# A bulk append chains, sends and builds its events this many at a time, so that the server
# ingests one piece while the next is chained (PostgresStore._copy_batches).
_PIECE: Final = 256
_NEW_STREAM: Final = (0, GENESIS)  # a stream's version and chain head before its first event
_NO_UPPER: Final = (1 << 62) - 1  # "no upper bound" that still fits a bigint
_MAX_IDENTIFIER: Final = 63  # PostgreSQL truncates longer names (NAMEDATALEN - 1)

_Conn = psycopg.Connection[tuple[Any, ...]]

_COLUMNS: Final = (
    "position",
    "stream_id",
    "stream_version",
    "event_type",
    "workflow_id",
    "timestamp",
    "schema_version",
    "prev_hash",
    "hash",
    "body",
)
_COPY_TYPES: Final = ["int8", "text", "int8", "text", "text", "text", "int4"] + ["bytea"] * 3

# No index on workflow_id: nothing reads events by workflow (projections and subscribers read
# by position, streams by stream id), and each index is one more B-tree insert per event:
# ~15% of the server's CPU per event in a bulk append. Ledgers created before this change keep
# their events_by_workflow index, which is harmless there. (As in the SQLite store.)
_DDL: Final = """
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {meta} (
    key   text PRIMARY KEY,
    value text NOT NULL
);
-- timestamp is the RFC 3339 text exactly as hashed: verify compares the index columns with
-- the hashed bytes, so a column that a reader filters by cannot disagree with the record.
CREATE TABLE IF NOT EXISTS {events} (
    position       bigint  PRIMARY KEY,
    stream_id      text    NOT NULL,
    stream_version bigint  NOT NULL,
    event_type     text    NOT NULL,
    workflow_id    text,
    timestamp      text    NOT NULL,
    schema_version integer NOT NULL,
    prev_hash      bytea   NOT NULL,
    hash           bytea   NOT NULL,
    body           bytea   NOT NULL,
    UNIQUE (stream_id, stream_version)
);
CREATE TABLE IF NOT EXISTS {checkpoints} (
    size bigint PRIMARY KEY,
    note text   NOT NULL
);
CREATE TABLE IF NOT EXISTS {log_head} (
    id       boolean PRIMARY KEY DEFAULT true CHECK (id),
    position bigint  NOT NULL
);
INSERT INTO {log_head} (id, position) VALUES (true, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS {projection_positions} (
    name     text   PRIMARY KEY,
    position bigint NOT NULL CHECK (position >= 0)
);
CREATE TABLE IF NOT EXISTS {merkle_nodes} (
    level smallint NOT NULL,
    idx   bigint   NOT NULL,
    hash  bytea    NOT NULL,
    PRIMARY KEY (level, idx)
);
INSERT INTO {meta} (key, value) VALUES ('schema_version', {version}) ON CONFLICT DO NOTHING
"""
_TABLES: Final = (
    "meta",
    "events",
    "checkpoints",
    "log_head",
    "projection_positions",
    "merkle_nodes",
)
_TABLE_COLUMNS: Final = {
    "meta": frozenset({"key", "value"}),
    "events": frozenset(_COLUMNS),
    "checkpoints": frozenset({"size", "note"}),
    "log_head": frozenset({"id", "position"}),
    "projection_positions": frozenset({"name", "position"}),
    "merkle_nodes": frozenset({"level", "idx", "hash"}),
}
"""The columns each table must have: a table of one of these names that lacks them belongs
to someone else (``CREATE TABLE IF NOT EXISTS`` would have kept it and built beside it)."""
_OPTIONAL_TABLES: Final = frozenset({"merkle_nodes"})
"""Tables a ledger created by an older version lacks; opened with ``create=False`` (a role
without CREATE), it works without them: with no stored Merkle nodes, proofs read the log."""


_PRIVILEGES: Final = (
    "this role lacks a privilege the command needs (docs/postgresql.md, "
    '"Roles and privileges", lists them)'
)


_BUSY_HINT: Final = (
    "if that session is stopped or hung (its client stopped, or left it idle in a "
    "transaction), find it: SELECT pid, application_name, state, xact_start FROM "
    "pg_stat_activity WHERE state LIKE 'idle in transaction%'; pg_terminate_backend(pid) ends "
    "it and rolls back what it had not committed"
)
_UNNAMED: Final = ("the PostgreSQL ledger", None)

DEFAULT_LOCK_TIMEOUT: Final = 60.0
"""Seconds a session waits for a lock when nobody set ``lock_timeout``: PostgreSQL's own
default (0) waits for ever behind a stopped or hung writer, where SQLite's ``busy_timeout``
and JSONL's ``lock_timeout`` give up with StoreBusy after 60 s."""

_LOCK_TIMEOUT_SETTING: Final = (
    "SELECT setting::bigint, source FROM pg_settings WHERE name = 'lock_timeout'"
)


def lock_wait_error(exc: psycopg.Error, place: str, waited: float | None) -> StoreBusy | None:
    """:class:`StoreBusy` for a lock waited for past ``lock_timeout`` (``place``: the URL
    without password; ``waited``: the timeout, None if it is the server's); else None.

    Shared with the PostgreSQL views, so a held lock is the same StoreBusy there."""
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return StoreBusy(place, waited, f"{_BUSY_HINT}. PostgreSQL said: {exc}")
    return None


def apply_lock_timeout(conn: psycopg.Connection[Any], wanted: float | None) -> float | None:
    """Give a session its lock_timeout; return it in seconds (None: none, wait for ever).

    ``wanted`` (an explicit value) wins. Otherwise one someone set (its ``source`` is not
    ``default``: a DBA's for the server, database or role, or the URL's ``options``) is
    kept, even 0; only a session nobody set one for gets :data:`DEFAULT_LOCK_TIMEOUT`. It
    bounds the wait for a lock, never the statement holding one (a bulk append, a
    checkpoint). Shared with the PostgreSQL views, whose sessions wait the same.
    """
    if wanted is None:
        row = conn.execute(_LOCK_TIMEOUT_SETTING).fetchone()
        if row is not None and row[1] != "default":
            return int(row[0]) / 1000 if row[0] else None
        wanted = DEFAULT_LOCK_TIMEOUT
    ms = max(1, round(wanted * 1000))
    conn.execute(sql.SQL("SET lock_timeout TO {}").format(sql.Literal(ms)))
    return ms / 1000


_SERVER_GOING: Final = frozenset({"57P01", "57P02", "57P03"})
"""SQLSTATEs of a server that ended the session or refuses new ones for now: admin
shutdown (a restart, a fast stop), crash shutdown (another backend crashed), cannot connect
now (starting up, shutting down, in recovery)."""


def connection_lost(exc: psycopg.Error) -> bool:
    """Whether ``exc`` says the server is out of reach, not that the call was wrong: no
    session (refused, reset, closed under the client: libpq sets no SQLSTATE), a
    connection exception (class 08), or a server going down or coming up."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _SERVER_GOING


_REFUSALS: Final = (
    (
        r"password authentication failed|authentication failed for user",
        (
            "the server refused the credentials (a wrong password, or no such role): check the "
            "user name and password in the URL (or PGPASSWORD, ~/.pgpass)"
        ),
    ),
    (
        r"no password supplied",
        (
            "the server asks for a password and no password was given: put it in the URL "
            "(postgresql://user:password@host/db), PGPASSWORD or ~/.pgpass"
        ),
    ),
    (
        r'role ".*" does not exist',
        "no such role: check the user name in the URL, or create the role (CREATE ROLE name LOGIN)",
    ),
    (
        r'role ".*" is not permitted to log in',
        "this role may not log in: use a login role, or ALTER ROLE name LOGIN",
    ),
    (
        r'database ".*" does not exist',
        (
            "no such database: check its name in the URL, or create it (CREATE DATABASE name); "
            "`tracebound init` creates the ledger's schema in an existing database"
        ),
    ),
    (
        r"permission denied for database",
        "this role may not connect to the database: GRANT CONNECT ON DATABASE name TO role",
    ),
    (
        r"pg_hba\.conf",
        (
            "the server's pg_hba.conf lets no such connection in (this user, this database, "
            "from this host, with this encryption): its administrator adds a line for it and "
            "reloads the server"
        ),
    ),
    (
        r"but (SSL|GSSAPI encryption) was required",
        (
            "the URL requires an encrypted connection (sslmode=require or stricter) and the "
            "server offers none: turn ssl on in the server, or lower sslmode in the URL if an "
            "unencrypted connection is acceptable"
        ),
    ),
    (
        r"certificate",
        (
            "a TLS certificate could not be used: check sslrootcert, sslcert and sslkey, and "
            "that sslmode=verify-full names the host the certificate was made for"
        ),
    ),
)
"""What a connection refused for its settings says (the server's or libpq's English
message: no SQLSTATE reaches the client before a session exists), and what to do."""


def connect_refused(exc: psycopg.Error, place: str, dsn: str) -> ConfigError | None:
    """:class:`ConfigError` for a connection the server (or libpq) refused for its settings:
    credentials, role, database, pg_hba.conf, TLS. Retrying cannot help, so these are not
    ConnectionLost, which the followers and the runner wait for. None for anything else
    (nothing listening, a server starting or stopping, a message in another language).

    ``place``: the URL without password, for the message; ``dsn``: the one that was tried,
    whose password is scrubbed from what PostgreSQL said. Shared with the PostgreSQL views.
    """
    # libpq's hints come on tab-indented lines
    said = " ".join(_scrub(str(exc), _passwords(dsn)).split())
    for pattern, advice in _REFUSALS:
        if re.search(pattern, said):
            return ConfigError(f"cannot connect to {place}: {advice} (PostgreSQL said: {said})")
    return None


def _translate(
    exc: psycopg.Error, what: str, busy: tuple[str, float | None] = _UNNAMED
) -> TraceboundError:
    """The tracebound error for a psycopg error: the retryable ones become ConcurrencyError,
    a lock waited for past ``lock_timeout`` :class:`StoreBusy` (``busy``: the store's URL
    and the timeout, for its message)."""
    if (locked := lock_wait_error(exc, *busy)) is not None:
        return locked
    if isinstance(exc, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected):
        return ConcurrencyError(f"postgresql {what} lost a race, retry: {exc}")
    if isinstance(exc, psycopg.errors.InvalidSchemaName | psycopg.errors.UndefinedTable):
        return StoreNotFound(f"postgresql {what}: no ledger here ({exc}); create it first")
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return StorageError(f"postgresql {what} failed: {exc}: {_PRIVILEGES}")
    if connection_lost(exc):
        return ConnectionLost(f"postgresql {what} failed: {exc}")
    return StorageError(f"postgresql {what} failed: {exc}")


@contextmanager
def _translated(what: str, busy: tuple[str, float | None] = _UNNAMED) -> Iterator[None]:
    """Turn psycopg errors into tracebound errors: no backend exception escapes the API."""
    try:
        yield
    except psycopg.Error as exc:
        raise _translate(exc, what, busy) from exc


def parse_url(url: str) -> tuple[str, str]:
    """Split a store URL into a libpq connection string and the schema it names.

    ``postgresql://user@host:5432/db?schema=ledger&sslmode=require``: ``schema`` is ours
    (default ``tracebound``); every other query parameter is libpq's and stays in the DSN.
    ``postgres://`` is accepted too, as libpq accepts it.
    """
    try:
        url.encode("utf-8")  # a surrogate for a non-UTF-8 byte: urlencode and libpq raise
        parts = urlsplit(url)
    except UnicodeEncodeError:
        raise ConfigError("invalid PostgreSQL URL: it is not UTF-8 text") from None
    except ValueError as exc:  # "Invalid IPv6 URL": a bracket left open
        raise ConfigError(f"invalid PostgreSQL URL: {exc}") from None
    if parts.scheme not in {"postgresql", "postgres"}:
        # Not the URL itself: it may hold a password.
        raise ConfigError(f"not a postgresql:// URL (scheme {parts.scheme!r})")
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    if len(schemas) > 1:
        raise ConfigError("a store URL names one schema")
    rest = urlencode([(k, v) for k, v in query if k != "schema"], quote_via=quote)
    # Not urlunsplit: it writes "postgresql:///db" (no host: libpq's local socket) as
    # "postgresql:/db", which libpq refuses.
    dsn = f"postgresql://{parts.netloc}{parts.path}" + (f"?{rest}" if rest else "")
    if parts.fragment:
        dsn += f"#{parts.fragment}"
    return dsn, schemas[0] if schemas else DEFAULT_SCHEMA


# password=… in a key=value connection string, quoted or not.
_CONNINFO_PASSWORD: Final = re.compile(r"\bpassword\s*=\s*(?:'((?:[^'\\]|\\.)*)'|(\S+))")


def _passwords(dsn: str) -> list[str]:
    """The password a DSN holds, as written and percent-decoded: to scrub from messages.

    Works on a DSN libpq refuses to parse too (that is when its message may quote it).
    """
    found: list[str] = []
    with suppress(ValueError):
        parts = urlsplit(dsn)
        if parts.scheme in {"postgresql", "postgres"}:
            if parts.password:
                found.append(parts.password)
            found += [v for k, v in parse_qsl(parts.query) if k == "password"]
    found += [m.group(2) or m.group(1) for m in _CONNINFO_PASSWORD.finditer(dsn)]
    return sorted({f for p in found for f in (p, unquote(p)) if f}, key=len, reverse=True)


def _scrub(text: str, passwords: Sequence[str]) -> str:
    """``text`` with every password replaced by ``***``."""
    for secret in passwords:
        text = text.replace(secret, "***")
    return text


def display_url(conninfo: str, schema: str, *, with_password: bool = False) -> str:
    """A ``postgresql://`` URL that reopens this store, without the password.

    The URL is shown to people (``tracebound init`` prints it), so a password given in the
    DSN is left out; those who reopen it connect with libpq's own sources (``PGPASSWORD``,
    ``~/.pgpass``) or trust/peer authentication. ``with_password`` keeps it, for
    :attr:`PostgresStore.worker_url` only.
    """
    params = {k: str(v) for k, v in conninfo_to_dict(conninfo).items() if v is not None}
    password = params.pop("password", None)
    if with_password and password is not None:
        params["password"] = password
    user = params.pop("user", "")
    dbname = params.pop("dbname", "")
    host = params.get("host", "")
    netloc = ""
    if host and "/" not in host and "," not in host:
        params.pop("host")
        port = params.pop("port", "")
        netloc = f"[{host}]" if ":" in host else host
        netloc += f":{port}" if port else ""
    if user:
        netloc = f"{quote(user, safe='')}@{netloc}"
    params["schema"] = schema
    query = urlencode(params, quote_via=quote)
    return f"postgresql://{netloc}/{quote(dbname, safe='')}?{query}"  # see parse_url


class _Statements:
    """Every statement, with the schema's qualified names quoted in once."""

    def __init__(self, schema: str, conn: _Conn) -> None:
        def q(template: str, *, params: bool = True, **extra: sql.Composable) -> bytes:
            def name(*parts: str) -> sql.SQL:
                text = sql.Identifier(*parts).as_string(conn)
                # A quoted name may hold "%", which a statement run with parameters would
                # read as a placeholder.
                return sql.SQL(text.replace("%", "%%") if params else text)

            names: dict[str, sql.Composable] = {t: name(schema, t) for t in _TABLES}
            names["schema"] = name(schema)
            names["columns"] = sql.SQL(", ").join(map(sql.Identifier, _COLUMNS))
            names.update(extra)
            return sql.SQL(template).format(**names).as_bytes(conn)

        self.ddl = q(_DDL, params=False, version=sql.Literal(str(SCHEMA_VERSION)))
        self.allocate = q("UPDATE {log_head} SET position = position + %s RETURNING position")
        # The same, with the subscribers' NOTIFY in the same statement: a notification is
        # queued only at COMMIT (and dropped on ROLLBACK), so it can be sent as early as the
        # position is known, and costs no statement of its own.
        self.allocate_notify = q(
            "WITH h AS (UPDATE {log_head} SET position = position + %s RETURNING position) "
            "SELECT position, pg_notify(%s, position::text) FROM h"
        )
        # Group commit takes the lock first and sets the head once it knows which requests
        # of the group hold (a conflicting one gets no positions).
        self.lock_head = q("SELECT position FROM {log_head} FOR UPDATE")
        self.set_head = q("UPDATE {log_head} SET position = %s")
        self.set_head_notify = q(
            "WITH h AS (UPDATE {log_head} SET position = %s RETURNING position) "
            "SELECT pg_notify(%s, position::text) FROM h"
        )
        self.head = q(
            "SELECT stream_version, hash FROM {events} WHERE stream_id = %s "
            "ORDER BY stream_version DESC LIMIT 1"
        )
        self.heads = q(
            "SELECT s.sid, e.stream_version, e.hash FROM unnest(%s::text[]) AS s(sid) "
            "LEFT JOIN LATERAL (SELECT stream_version, hash FROM {events} "
            "WHERE stream_id = s.sid ORDER BY stream_version DESC LIMIT 1) AS e ON true"
        )
        # One statement for any number of rows (a column per array), so that in a pipeline
        # it is queued with NOTIFY and COMMIT instead of syncing on its own as executemany does.
        self.insert = q(
            "INSERT INTO {events} ({columns}) SELECT * FROM unnest("
            "%b::int8[], %b::text[], %b::int8[], %b::text[], %b::text[], %b::text[], "
            "%b::int4[], %b::bytea[], %b::bytea[], %b::bytea[])"
        )
        self.copy = q("COPY {events} ({columns}) FROM STDIN (FORMAT BINARY)", params=False)
        self.size = q("SELECT COALESCE(MAX(position), 0) FROM {events}")
        # One statement, one snapshot: COUNT(*) is an index-only scan of the primary key once
        # the table is vacuumed (~60 ms for 1M events), MIN and MAX one index probe each.
        self.extent = q(
            "SELECT (SELECT COUNT(*) FROM {events}), "
            "(SELECT COALESCE(MIN(position), 0) FROM {events}), "
            "(SELECT COALESCE(MAX(position), 0) FROM {events})"
        )
        self.read_raw = q(
            "SELECT {columns} FROM {events} WHERE position >= %s AND position <= %s "
            "ORDER BY position LIMIT %s"
        )
        # Each filter: its values (NULL: any), or'ed with a search of the hashed body for
        # its needles (NULL: none), as RecordFilter.matches says.
        searched = (
            "(%s::bytea[] IS NOT NULL AND EXISTS "
            "(SELECT FROM unnest(%s::bytea[]) AS n(b) WHERE position(n.b IN body) > 0))"
        )
        self.read_raw_matching = q(
            "SELECT {columns} FROM {events} WHERE position >= %s AND position <= %s "  # noqa: S608 - constant text, bound values
            f"AND (%s::text[] IS NULL OR event_type = ANY(%s::text[]) OR {searched}) "
            f"AND (%s::text[] IS NULL OR workflow_id = ANY(%s::text[]) OR {searched}) "
            "ORDER BY position LIMIT %s"
        )
        self.read_tail = q(
            "SELECT position, hash, body FROM {events} WHERE position > %s "
            "ORDER BY position LIMIT %s"
        )
        self.read_stream = q(
            "SELECT position, stream_version, hash, body FROM {events} "
            "WHERE stream_id = %s AND stream_version >= %s AND stream_version <= %s "
            "ORDER BY stream_version LIMIT %s"
        )
        self.stream_positions = q(
            "SELECT stream_version, position FROM {events} "
            "WHERE stream_id = %s AND stream_version >= %s AND stream_version <= %s "
            "ORDER BY stream_version"
        )
        self.save_checkpoint = q(
            "INSERT INTO {checkpoints} (size, note) VALUES (%s, %s) "
            "ON CONFLICT (size) DO UPDATE SET note = excluded.note"
        )
        self.latest_checkpoint = q("SELECT note FROM {checkpoints} ORDER BY size DESC LIMIT 1")
        self.checkpoints = q("SELECT size, note FROM {checkpoints} ORDER BY size")
        self.read_hashes = q(
            "SELECT hash FROM {events} WHERE position >= %s AND position <= %s ORDER BY position"
        )
        self.merkle_nodes = q(
            "SELECT idx, hash FROM {merkle_nodes} WHERE level = %s AND idx >= %s AND idx < %s "
            "ORDER BY idx"
        )
        # Not MAX(idx) + 1 alone: one forged row at 2**40 made that the count (and at
        # 2**63 - 1 an overflow). node_count() checks the three against each other.
        self.merkle_node_count = q(
            "SELECT COUNT(*), MIN(idx), MAX(idx) FROM {merkle_nodes} WHERE level = %s"
        )
        self.first_node_gap = q(
            "SELECT idx FROM (SELECT idx, LEAD(idx) OVER (ORDER BY idx) AS next "
            "FROM {merkle_nodes} WHERE level = %s AND idx >= 0) AS t "
            "WHERE next IS NULL OR next - 1 <> idx ORDER BY idx LIMIT 1"
        )
        self.add_merkle_nodes = q(
            "INSERT INTO {merkle_nodes} (level, idx, hash) "
            "SELECT %s, s.i, s.h FROM unnest(%s::int8[], %s::bytea[]) AS s(i, h) "
            "ON CONFLICT DO NOTHING"
        )
        self.drop_merkle_nodes = q("DELETE FROM {merkle_nodes}")
        self.get_meta = q("SELECT value FROM {meta} WHERE key = %s")
        self.set_meta = q(
            "INSERT INTO {meta} (key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        )
        # ON CONFLICT DO UPDATE locks an existing row and returns its newest value, so one
        # statement both creates a projection's row and serialises its workers.
        self.track = q(
            "INSERT INTO {projection_positions} (name, position) VALUES (%s, 0) "
            "ON CONFLICT (name) DO UPDATE SET position = {projection_positions}.position "
            "RETURNING position"
        )
        self.advance = q("UPDATE {projection_positions} SET position = %s WHERE name = %s")
        self.tracked = q("SELECT position FROM {projection_positions} WHERE name = %s")
        self.missing_tables = q(
            "SELECT t FROM unnest(%s::text[]) AS t "
            "WHERE to_regclass(quote_ident(%s) || '.' || quote_ident(t)) IS NULL"
        )
        self.table_columns = q(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = ANY(%s)"
        )


def _channel(schema: str) -> str:
    """The NOTIFY channel of a schema: one per ledger, so two ledgers never wake each other."""
    name = f"tracebound.{schema}"
    if len(name.encode()) > _MAX_IDENTIFIER:  # keep it unique rather than let it be truncated
        name = "tracebound." + blake3(schema.encode()).hexdigest()[:40]
    return name


class PostgresStore(ChainedAppends):
    """A ledger in one PostgreSQL schema. Safe to share between threads; open one per process.

    Each thread gets its own connection (a psycopg connection serves one thread at a time).

    Args:
        dsn: a libpq connection string or ``postgresql://`` URI, without ``schema``
            (see :func:`parse_url` for store URLs).
        schema: the schema holding this ledger's tables; several ledgers can share a database.
        create: create the schema and tables if they are missing; otherwise a missing ledger
            raises StoreNotFound. Existing tables are never touched, so a role without CREATE
            privileges (or a read replica) can open a ledger someone else created.
        notify: send NOTIFY for subscribers with each append. NOTIFY takes a database-wide
            lock at commit; appends are serialised anyway, so it only costs if other
            applications in the same database notify heavily.
        lock_timeout: seconds an append waits for the log's lock before failing with
            StoreBusy. None keeps one that was set for the session (the server's
            configuration, the database's or the role's, the URL's ``options`` or
            ``PGOPTIONS``; ``0`` there waits for ever), and gives a session nobody set one
            for :data:`DEFAULT_LOCK_TIMEOUT` (60 s). :attr:`lock_timeout` is the result.
        connect_timeout: seconds to wait for a connection.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        create: bool = True,
        notify: bool = True,
        lock_timeout: float | None = None,
        connect_timeout: float = 30.0,
    ) -> None:
        if not schema or len(schema.encode()) > _MAX_IDENTIFIER or "\x00" in schema:
            raise ConfigError(f"schema must be 1-{_MAX_IDENTIFIER} bytes, not {schema!r}")
        self._passwords = _passwords(dsn)
        try:
            conninfo_to_dict(dsn)
        except psycopg.Error as exc:
            # libpq quotes the token it could not parse, which may be the password; the
            # original error is not chained for the same reason.
            message = _scrub(str(exc).strip(), self._passwords)
            raise ConfigError(f"invalid PostgreSQL connection string: {message}") from None
        self._dsn = dsn
        self.schema = schema
        self.channel = _channel(schema)
        self.url = display_url(dsn, schema)
        # Verify's worker processes reopen the store from this: it keeps the password, and
        # reaches them through a pipe, never a command line. Never print it.
        self.worker_url = display_url(dsn, schema, with_password=True)
        self._notify = notify
        self._lock_timeout = lock_timeout
        # what the sessions really wait (set at each connect), for StoreBusy's message
        self._waits: float | None = lock_timeout
        self._connect_timeout = connect_timeout
        self._local = threading.local()
        self._closed = False
        self._pid = os.getpid()
        # Each with the thread it serves and the lock that thread holds through its
        # statements (see _using).
        self._connections: list[tuple[threading.Thread, _Conn, threading.RLock]] = []
        self._inherited: list[_Conn] = []  # a parent's sockets: never used, never closed
        self._connections_lock = threading.Lock()
        try:
            self._open(schema, create=create)
        except BaseException:
            self.close()  # a refused open keeps no connection until the collector runs
            raise

    def _open(self, schema: str, *, create: bool) -> None:
        """Connect, find the ledger's tables, and create them if ``create``."""
        with self._errors("open"):
            conn = self._conn()
            self._sql = _Statements(schema, conn)
            missing = {
                t for (t,) in conn.execute(self._sql.missing_tables, (list(_TABLES), schema))
            }
            self._has_nodes = create or "merkle_nodes" not in missing
            if missing - (set() if create else _OPTIONAL_TABLES):
                if not create:
                    raise StoreNotFound(f"no ledger in schema {schema!r} at {self.url}")
                with conn.transaction():
                    # Concurrent CREATE ... IF NOT EXISTS can still collide in the catalog;
                    # a transaction-scoped advisory lock makes first-time creation one-at-a-time.
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                        (f"tracebound:{schema}",),
                    )
                    self._create(conn)
                    self._check_tables(conn)  # before COMMIT: a refusal leaves nothing behind

    def _create(self, conn: _Conn) -> None:
        """Create the schema and the tables that are missing (``IF NOT EXISTS``).

        Raises:
            ConfigError: the schema's name is one PostgreSQL reserves.
            StorageError: the role may not create them, saying what it needs.
        """
        try:
            conn.execute(self._sql.ddl)
        except psycopg.errors.ReservedName as exc:
            raise ConfigError(
                f"schema {self.schema!r}: names starting with pg_ are PostgreSQL's own; "
                "choose another for the ledger (?schema=…)"
            ) from exc
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StorageError(
                f"postgresql open failed: {exc}: creating the ledger in schema "
                f"{self.schema!r} needs CREATE on the database (or on the schema, if it "
                "exists); have a role that has it run `tracebound init`, then grant this "
                'one what docs/postgresql.md, "Roles and privileges", lists'
            ) from exc

    def _check_tables(self, conn: _Conn) -> None:
        """Refuse a schema where a table of a ledger's name is another application's.

        Raises:
            ConfigError: naming the table and the columns it lacks.
        """
        found: dict[str, set[str]] = {}
        for table, column in conn.execute(
            self._sql.table_columns, (self.schema, list(_TABLE_COLUMNS))
        ):
            found.setdefault(table, set()).add(column)
        for table, columns in _TABLE_COLUMNS.items():
            if lacking := columns - found.get(table, set()):
                raise ConfigError(
                    f"{self.schema}.{table} is not a tracebound ledger's table (columns "
                    f"missing: {', '.join(sorted(lacking))}): this schema holds another "
                    "application's tables; give the ledger a schema of its own (?schema=…)"
                )

    @property
    def lock_timeout(self) -> float | None:
        """Seconds this store's sessions wait for a lock (None: as long as it takes)."""
        return self._waits

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """:func:`_translated`, naming this store and how long it waited in a StoreBusy
        (read when the error happens: the first connection is made inside the block)."""
        try:
            yield
        except psycopg.Error as exc:
            raise _translate(exc, what, (self.url, self._waits)) from exc

    @contextmanager
    def _append_errors(self) -> Iterator[None]:
        """:meth:`_errors` for an append, saying what a lost connection means for it.

        Lost before the COMMIT was sent, the transaction died with the session: nothing was
        written, and the caller may simply retry. Lost after, the events may be in the log
        (the server may have committed and the answer been lost): CommitOutcomeUnknown.
        """
        self._local.commit_sent = False
        try:
            with self._errors("append"):
                yield
        except StorageError as exc:
            conn: _Conn | None = getattr(self._local, "conn", None)
            # A ConfigError is the reconnect's (a password changed meanwhile): retrying
            # will not help, so it is not made a ConnectionLost.
            if (
                conn is None
                or not conn.broken
                or isinstance(exc, CommitOutcomeUnknown | ConfigError)
            ):
                raise
            if not self._local.commit_sent:
                raise ConnectionLost(
                    f"{exc}\nThe connection was lost before COMMIT was sent, so nothing was "
                    "written; the next call reconnects, and retrying is safe."
                ) from exc.__cause__
            raise CommitOutcomeUnknown(
                f"{exc}\nThe connection was lost after COMMIT was sent, so the append may "
                "have been written or not. Before writing it again, read the stream's head, "
                "or retry with the same expected_version (ConcurrencyConflict if it landed)."
            ) from exc.__cause__

    def _send_commit(self, conn: _Conn) -> None:
        """Send COMMIT; from here on a lost connection leaves the outcome unknown."""
        self._local.commit_sent = True
        conn.execute(b"COMMIT")

    # -- connections ---------------------------------------------------------------------

    def _connect(self) -> _Conn:
        """A new autocommit session with the settings every tracebound session needs."""
        try:
            conn: _Conn = psycopg.connect(
                self._dsn,
                autocommit=True,
                connect_timeout=max(1, round(self._connect_timeout)),
                application_name="tracebound",
            )
        except psycopg.Error as exc:
            if (refused := connect_refused(exc, self.url, self._dsn)) is not None:
                raise refused from None  # it quotes PostgreSQL, without the password
            text = str(exc)
            clean = _scrub(text, self._passwords)
            if clean != text:  # a message that quotes the password is raised without it
                raise type(exc)(clean) from None
            raise
        try:
            conn.execute("SET synchronous_commit TO on")
            self._waits = apply_lock_timeout(conn, self._lock_timeout)
        except BaseException:
            conn.close()
            raise
        return conn

    def _conn(self) -> _Conn:
        """This thread's session (use it through :meth:`_using`)."""
        if self._closed:
            raise StoreClosed(f"{self.url} is closed")
        if os.getpid() != self._pid:
            self._forget_parent_connections()
        conn: _Conn | None = getattr(self._local, "conn", None)
        if conn is not None and not conn.broken and not conn.closed:
            return conn
        conn = self._connect()
        self._register(conn)
        self._local.conn = conn
        return conn

    def _register(self, conn: _Conn) -> None:
        """Keep this thread's new session (with the thread's lock) for :meth:`close`."""
        lock: threading.RLock | None = getattr(self._local, "lock", None)
        if lock is None:
            lock = self._local.lock = threading.RLock()
        with self._connections_lock:
            if self._closed:  # close() has taken the list already: this one would stay open
                conn.close()
                raise StoreClosed(f"{self.url} is closed")
            # Threads come and go; their connections go with them, not at close() only.
            alive = []
            for thread, c, held in self._connections:
                if thread.is_alive() and not c.closed:
                    alive.append((thread, c, held))
                else:
                    c.close()
            alive.append((threading.current_thread(), conn, lock))
            self._connections = alive

    @contextmanager
    def _using(self) -> Iterator[_Conn]:
        """This thread's session, held for the statements of the ``with`` block.

        :meth:`close` from another thread closes this session too. Closed under a
        statement, the statement would fail as if the server had gone (ConnectionLost,
        "retrying is safe"), and libpq would free what the statement is using; so close()
        takes this lock first, and the statement under way runs to its end. The lock is
        the thread's (reentrant): a block may reconnect, or append inside a tracking block.
        A ``with`` block never spans a generator's ``yield``: a reader that stops
        iterating never holds it.
        """
        conn = self._conn()  # makes the thread's lock too (_register)
        with self._local.lock:
            if self._closed:  # close() began while this thread waited for the lock
                raise StoreClosed(f"{self.url} is closed")
            yield conn

    @contextmanager
    def _write_conn(self) -> Iterator[_Conn]:
        """The session for an append, held (:meth:`_using`): a live one, if the server let
        it be known that the idle session it had is dead.

        A server that ended the session while it was idle (a restart, a failover, an idle
        cut, ``pg_terminate_backend``) sent its goodbye and closed the socket, which the
        session has not read yet. Read now, before anything of the append is sent, it
        marks the session broken, and a new one is opened: nothing of the append reached
        the old one, so nothing of it can have been committed, and it runs once, on the
        new session. A session cut without a word (a host gone, a network cut) is found
        dead only once the append was sent: ConnectionLost, as for any loss before COMMIT.
        Inside a tracking block the transaction is the block's: its loss is the block's.
        """
        with self._using() as held:
            if held.info.transaction_status == TransactionStatus.IDLE and _read_goodbye(held):
                yield self._conn()  # raises ConnectionLost (translated) if the server is down
            else:
                yield held

    def _forget_parent_connections(self) -> None:
        """After fork: the parent's sessions are not ours to use, nor to close (closing
        would send the server a goodbye on the parent's socket)."""
        with self._connections_lock:
            self._inherited.extend(c for _, c, _ in self._connections)
            self._connections = []
            self._local = threading.local()
            self._pid = os.getpid()

    def close(self) -> None:
        """Close every thread's session. A statement another thread has under way runs to
        its end first (:meth:`_using`); whatever comes after raises StoreClosed."""
        self._closed = True  # first: no thread opens a session from here on
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for _, conn, lock in connections:
            with lock:
                conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- appends -------------------------------------------------------------------------

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[RecordedEvent]:
        prepared = prepare_requests(requests)
        count = sum(len(r.items) for r in prepared)
        streams = list(dict.fromkeys(r.stream_id for r in requests))
        with self._append_errors(), self._write_conn() as conn:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                return self._append_in_transaction(conn, count, streams, prepared)
            if count < _COPY_THRESHOLD:
                rows = self._append_pipelined(conn, count, streams, prepared)
                return recorded_events(prepared, rows)
            return self._append_copy(conn, count, streams, prepared)

    def _append_pipelined(
        self,
        conn: _Conn,
        count: int,
        streams: Sequence[str],
        prepared: Sequence[PreparedRequest],
    ) -> list[Row]:
        """A small append in two round trips, both of them while the lock is held.

        Round trips made under the lock limit every writer on every host. So BEGIN, the lock
        (with NOTIFY) and the stream heads go in one pipeline flush; the rows and COMMIT in a
        second. (``conn.transaction()`` would add a sync before COMMIT, hence the explicit
        BEGIN and COMMIT, used only when the session is not already in a transaction.)
        """
        with (
            _rollback_on_error(conn),
            conn.pipeline(),
            conn.cursor() as cur,
            conn.cursor() as head_cur,
        ):
            conn.execute(b"BEGIN")
            # The lock: held from here to COMMIT, so commit order is position order.
            self._send_lock(cur, count)
            # A separate statement, so it reads with a snapshot taken after the lock.
            self._send_heads(head_cur, streams)
            last = self._allocated(cur)
            rows = _rows_for(last - count, self._heads(head_cur, streams), prepared)
            if rows:
                conn.execute(self._sql.insert, [list(col) for col in zip(*rows, strict=True)])
            self._send_commit(conn)
        return rows

    def _append_copy(
        self,
        conn: _Conn,
        count: int,
        streams: Sequence[str],
        prepared: Sequence[PreparedRequest],
    ) -> list[RecordedEvent]:
        """A bulk append: BEGIN, the lock and the heads in one round trip, the rows by binary
        COPY (chained and sent piece by piece, :meth:`_copy_batches`), then COMMIT."""
        with _rollback_on_error(conn):
            with conn.pipeline(), conn.cursor() as cur, conn.cursor() as head_cur:
                conn.execute(b"BEGIN")
                self._send_lock(cur, count)  # the lock, as above
                self._send_heads(head_cur, streams)  # a later statement: a snapshot after it
                last = self._allocated(cur)
                heads = self._heads(head_cur, streams)
            _versions_after(prepared, _versions(heads))  # a conflict raises before any row is sent
            with conn.cursor() as cur:
                (rows,) = self._copy_batches(cur, last - count, heads, [prepared])
            with conn.pipeline():
                self._send_commit(conn)  # sent, not waited for: the server flushes the WAL
                events = recorded_events(prepared, rows)  # while this builds the events
        return events

    def _append_in_transaction(
        self,
        conn: _Conn,
        count: int,
        streams: Sequence[str],
        prepared: Sequence[PreparedRequest],
    ) -> list[RecordedEvent]:
        """An append that joins the session's open transaction (a tracking block), as a
        savepoint: the rows by binary COPY from ``_COPY_THRESHOLD`` events."""
        with conn.transaction(), conn.cursor() as cur:
            self._send_lock(cur, count)  # the lock, as above
            last = self._allocated(cur)
            self._send_heads(cur, streams)  # a later statement: a snapshot after the lock
            heads = self._heads(cur, streams)
            if count >= _COPY_THRESHOLD:
                _versions_after(prepared, _versions(heads))
                (rows,) = self._copy_batches(cur, last - count, heads, [prepared])
            else:
                rows = _rows_for(last - count, heads, prepared)
                if rows:
                    cur.execute(self._sql.insert, [list(col) for col in zip(*rows, strict=True)])
        return recorded_events(prepared, rows)

    def _send_lock(self, cur: psycopg.Cursor[Any], count: int) -> None:
        """Take the log's lock and ``count`` positions (and NOTIFY, if anything is added)."""
        if self._notify and count:
            cur.execute(self._sql.allocate_notify, (count, self.channel))
        else:
            cur.execute(self._sql.allocate, (count,))

    def _copy_batches(
        self,
        cur: psycopg.Cursor[Any],
        last: int,
        heads: Mapping[str, StreamHead],
        batches: Sequence[Sequence[PreparedRequest]],
    ) -> list[list[Row]]:
        """Chain ``batches`` after position ``last`` and stream their rows by binary COPY;
        the rows of each batch.

        The server is another process: it parses, inserts and indexes the rows it has
        received while this one chains the next piece of ``_PIECE`` events (psycopg sends
        without waiting, :func:`_copy_rows`). So the client's and the server's work
        overlap instead of taking turns; the caller builds the events it hands back while
        the server flushes the COMMIT, for the same reason. The expected versions must have
        been checked (:func:`_versions_after`): a piece is on its way before the next is
        chained.
        """
        chain = {sid: (int(h.version), bytes(h.head)) for sid, h in heads.items()}

        def head_of(sid: str) -> tuple[int, bytes]:
            return chain.get(sid, _NEW_STREAM)

        out: list[list[Row]] = []
        with _copy_rows(cur, self._sql.copy) as copy:
            write_row = copy.write_row
            for batch in batches:
                rows: list[Row] = []
                for piece in _pieces(batch, _PIECE):
                    chained = chain_rows(piece, last, head_of)
                    for row in chained.rows:
                        write_row(row)
                    rows += chained.rows
                    chain.update(chained.heads)
                    last = chained.position
                out.append(rows)
        return out

    # -- group commit (store/group_commit.py) ---------------------------------------------

    def _append_prepared(
        self, batches: Sequence[Sequence[PreparedRequest]]
    ) -> list[list[RecordedEvent] | ConcurrencyConflict]:
        """Append independent all-or-nothing batches in one transaction: one WAL flush.

        The seam for group commit. Two round trips, as for a single small append: BEGIN,
        the lock and every stream's head in one; the head update (with NOTIFY), the rows
        and COMMIT in the other (from ``_COPY_THRESHOLD`` rows, binary COPY between the
        two, as in a bulk append). A batch whose expected version does not hold gets its
        ConcurrencyConflict back and no positions; the others go ahead. An error fails
        them all (ROLLBACK).
        """
        streams = list(dict.fromkeys(r.stream_id for batch in batches for r in batch))
        with self._append_errors(), self._write_conn() as conn:
            idle = conn.info.transaction_status == TransactionStatus.IDLE
            if not idle:  # a tracking block's transaction: a group must not ride on it
                raise StorageError("group commit cannot join an open transaction")
            with _rollback_on_error(conn):
                with conn.pipeline(), conn.cursor() as cur, conn.cursor() as head_cur:
                    conn.execute(b"BEGIN")
                    cur.execute(self._sql.lock_head)  # held to COMMIT: commit = position order
                    if streams:  # a later statement: its snapshot includes every earlier append
                        self._send_heads(head_cur, streams)
                    last = self._allocated(cur)
                    heads = self._heads(head_cur, streams) if streams else {}
                outcomes = _admit(heads, batches)
                admitted = [b for b, o in zip(batches, outcomes, strict=True) if o is None]
                written = iter(self._write_group(conn, last, heads, admitted))
        return [next(written) if outcome is None else outcome for outcome in outcomes]

    def _write_group(
        self,
        conn: _Conn,
        last: int,
        heads: Mapping[str, StreamHead],
        batches: Sequence[Sequence[PreparedRequest]],
    ) -> list[list[RecordedEvent]]:
        """Insert the admitted batches' rows after ``last``, move the head, notify, COMMIT."""
        end = last + sum(len(r.items) for batch in batches for r in batch)
        if end - last >= _COPY_THRESHOLD:
            with conn.cursor() as cur:
                written = self._copy_batches(cur, last, heads, batches)
            with conn.pipeline():
                self._send_set_head(conn, end)
                self._send_commit(conn)  # sent; the events are built while the WAL is flushed
                return [recorded_events(b, r) for b, r in zip(batches, written, strict=True)]
        rows: list[Row] = []
        bounds: list[tuple[int, int]] = []
        current = dict(heads)
        for batch in batches:
            more = _rows_for(last + len(rows), current, batch)
            for row in more:  # the next batch of the group chains onto this one
                current[row[1]] = StreamHead(StreamVersion(row[2]), ChainHead(row[8]))
            bounds.append((len(rows), len(rows) + len(more)))
            rows += more
        with conn.pipeline():
            if rows:
                self._send_set_head(conn, end)
                conn.execute(self._sql.insert, [list(col) for col in zip(*rows, strict=True)])
            self._send_commit(conn)
        # Built after the commit: nothing here needs the lock.
        return [recorded_events(b, rows[i:j]) for b, (i, j) in zip(batches, bounds, strict=True)]

    def _send_set_head(self, conn: _Conn, end: int) -> None:
        if self._notify:
            conn.execute(self._sql.set_head_notify, (end, self.channel))
        else:
            conn.execute(self._sql.set_head, (end,))

    def _allocated(self, cur: psycopg.Cursor[Any]) -> int:
        """The last position of the block the lock statement assigned."""
        row = cur.fetchone()
        if row is None:
            raise StorageError(f"{self.url}: the log_head row is missing; recreate the schema")
        return int(row[0])

    def _send_heads(self, cur: psycopg.Cursor[Any], streams: Sequence[str]) -> None:
        if len(streams) == 1:
            cur.execute(self._sql.head, (streams[0],))
        else:
            cur.execute(self._sql.heads, (list(streams),))

    @staticmethod
    def _heads(cur: psycopg.Cursor[Any], streams: Sequence[str]) -> dict[str, StreamHead]:
        """The heads :meth:`_send_heads` asked for: stream id -> version and chain head."""
        if len(streams) == 1:
            row = cur.fetchone()
            rows = [] if row is None else [(streams[0], *row)]
        else:
            rows = cur.fetchall()
        return {
            sid: StreamHead(StreamVersion(version), ChainHead(digest))
            for sid, version, digest in rows
            if version is not None
        }

    # -- reads ---------------------------------------------------------------------------

    def _fetch(
        self, what: str, query: bytes, params: Sequence[Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """Run one idempotent statement (a read or an upsert) and return its rows.

        If the session turns out to be dead (the server restarted, a failover), the statement
        is run once more on a fresh session: it has no effect that could apply twice.
        Appends are never retried once anything of them was sent: lost before their COMMIT
        was sent they raise ConnectionLost (nothing written; the caller decides), after it
        CommitOutcomeUnknown. What an append does is replace a session that is already
        known dead before it sends anything (:meth:`_write_conn`), and run once on the new
        one. Inside a tracking transaction there is no retry either: the transaction is
        gone with the session.
        """
        args = () if params is None else params  # always parsed, so "%%" in a name is "%"
        # The connect is inside _errors: a server still down fails it, translated too.
        with self._errors(what), self._using() as conn:
            retry = conn.info.transaction_status == TransactionStatus.IDLE
            try:
                return _rows(conn.execute(query, args, binary=True))
            except psycopg.Error:
                if not (retry and conn.broken):
                    raise
            return _rows(self._conn().execute(query, args, binary=True))

    def stream_head(self, stream_id: str) -> StreamHead | None:
        rows = self._fetch("read", self._sql.head, (stream_id,))
        return StreamHead(StreamVersion(rows[0][0]), ChainHead(rows[0][1])) if rows else None

    def size(self) -> int:
        return int(self._fetch("read", self._sql.size)[0][0])

    def log_extent(self) -> tuple[int, int, int]:
        ((count, lowest, highest),) = self._fetch("read", self._sql.extent)
        return int(count), int(lowest), int(highest)

    def read_raw_pages(
        self, *, start: int = 1, stop: int | None = None, page_size: int = _VERIFY_PAGE
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Pages of rows in :class:`RawRecord` field order: the bulk reader behind ``verify``.

        Keyset pages, each one short statement (its own snapshot): a long reader holds no
        transaction open, so it neither blocks vacuum nor grows in memory. Positions that
        are visible always form a prefix (see the module docstring), so paging by position
        cannot skip a row.
        """
        upper = stop if stop is not None else _NO_UPPER
        cursor = start
        while cursor <= upper:
            page = self._fetch("read", self._sql.read_raw, (cursor, upper, page_size))
            if not page:
                return
            yield page
            cursor = page[-1][0] + 1

    def read_raw(self, *, start: int = 1, stop: int | None = None) -> Iterator[RawRecord]:
        for page in self.read_raw_pages(start=start, stop=stop, page_size=_PAGE):
            for row in page:
                yield RawRecord(*row)

    def read_raw_matching(
        self, where: RecordFilter, *, start: int = 1, stop: int | None = None
    ) -> Iterator[RawRecord]:
        params: list[Any] = []
        for values, needles in (
            (where.kinds, where.kind_needles()),
            (where.workflows, where.workflow_needles()),
        ):
            listed = None if values is None else sorted(values)
            searched = list(needles) or None
            params += [listed, listed, searched, searched]

        def page(lo: int, hi: int) -> list[tuple[Any, ...]]:
            return self._fetch("read", self._sql.read_raw_matching, (lo, hi, *params, _PAGE))

        for rows in window_pages(page, self.size, start=start, stop=stop, limit=_PAGE):
            for row in rows:
                yield RawRecord(*row)

    def read_log(self, *, start: int = 1, stop: int | None = None) -> Iterator[RecordedEvent]:
        for raw in self.read_raw(start=start, stop=stop):
            yield decode_at(raw.position, raw.hash, raw.body)

    def read_stream(
        self, stream_id: str, *, from_version: int = 1, to_version: int | None = None
    ) -> Iterator[RecordedEvent]:
        upper = to_version if to_version is not None else _NO_UPPER
        cursor = from_version
        while cursor <= upper:
            page = self._fetch("read", self._sql.read_stream, (stream_id, cursor, upper, _PAGE))
            if not page:
                return
            yield from stream_page_events(stream_id, page)
            cursor = page[-1][1] + 1

    def stream_positions(
        self, stream_id: str, from_version: int, to_version: int
    ) -> list[tuple[int, int]]:
        rows = self._fetch(
            "read", self._sql.stream_positions, (stream_id, from_version, to_version)
        )
        return [(int(v), int(p)) for v, p in rows]

    # -- checkpoints and metadata --------------------------------------------------------

    def save_checkpoint(self, size: int, note: str) -> None:
        self._fetch("checkpoint", self._sql.save_checkpoint, (size, note))

    def latest_checkpoint(self) -> str | None:
        rows = self._fetch("read", self._sql.latest_checkpoint)
        return str(rows[0][0]) if rows else None

    def checkpoints(self) -> list[tuple[int, str]]:
        return [(int(s), str(n)) for s, n in self._fetch("read", self._sql.checkpoints)]

    # -- Merkle nodes (MerkleNodeStore) -------------------------------------------------

    def read_hashes(self, start: int, stop: int) -> list[bytes]:
        return [bytes(h) for (h,) in self._fetch("read", self._sql.read_hashes, (start, stop))]

    def merkle_nodes(self, level: int, start: int, stop: int) -> list[bytes]:
        if not self._has_nodes:
            return []
        rows = self._fetch("read", self._sql.merkle_nodes, (level, start, stop))
        return contiguous_nodes(((int(i), h) for i, h in rows), start)

    def merkle_node_count(self, level: int) -> int:
        if not self._has_nodes:
            return 0
        ((rows, lowest, highest),) = self._fetch("read", self._sql.merkle_node_count, (level,))

        def first_gap() -> int:
            return int(self._fetch("read", self._sql.first_node_gap, (level,))[0][0])

        return node_count(level, int(rows), lowest, highest, first_gap)

    def add_merkle_nodes(self, level: int, start: int, hashes: Sequence[bytes]) -> None:
        if not self._has_nodes:  # an older ledger opened without CREATE: nothing is kept
            return
        indexes = list(range(start, start + len(hashes)))
        self._fetch("write", self._sql.add_merkle_nodes, (level, indexes, list(hashes)))

    def drop_merkle_nodes(self) -> None:
        if self._has_nodes:
            self._fetch("write", self._sql.drop_merkle_nodes)

    def get_meta(self, key: str) -> str | None:
        rows = self._fetch("read", self._sql.get_meta, (key,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        self._fetch("write", self._sql.set_meta, (key, value))

    # -- subscriptions -------------------------------------------------------------------

    def subscribe(self, start: int = 1, *, poll_interval: float = 1.0) -> PostgresSubscription:
        """Follow the log from ``start`` (inclusive): the backlog, then events as they commit.

        ``poll_interval`` is how long a waiting subscriber sleeps between re-reads when no
        notification arrives: a safety net for writers opened with ``notify=False``, and
        how quickly a close from another thread is noticed. It is not needed for ordering.
        """
        return PostgresSubscription(self, start, poll_interval=poll_interval)

    # -- tracking ------------------------------------------------------------------------

    @contextmanager
    def tracking(self, name: str, *, expected: int | None = None) -> Iterator[PostgresTracking]:
        """One transaction for projection ``name``: its writes and its position, atomically.

        The transaction runs on this thread's connection, so an :meth:`append` inside the
        block joins it too: a process manager can record the events it derives and the
        position it derived them from in one commit. The projection's row stays locked
        until the block ends, so two workers of one projection take turns.

        Raises:
            ConcurrencyConflict: ``expected`` is given and the tracked position differs.
        """
        # Held to the block's end (its COMMIT): close() from another thread waits for it.
        with (
            self._errors("tracking"),
            self._using() as conn,
            conn.transaction(),
            conn.cursor() as cur,
        ):
            row = cur.execute(self._sql.track, (name,)).fetchone()
            position = 0 if row is None else int(row[0])
            if expected is not None and expected != position:
                raise ConcurrencyConflict(name, expected, position)
            tx = PostgresTracking(conn, cur, name, position, self._sql.advance)
            yield tx
            if conn.info.transaction_status == TransactionStatus.INERROR:
                # A statement failed and the caller caught it: COMMIT would quietly roll
                # back, and the caller would believe the position advanced.
                raise StorageError(
                    f"projection {name!r}: a statement in the transaction failed; "
                    "nothing was committed"
                )

    def tracked_position(self, name: str) -> int:
        rows = self._fetch("read", self._sql.tracked, (name,))
        return int(rows[0][0]) if rows else 0

    # -- import (``tracebound copy``) ----------------------------------------------------

    def import_raw(self, records: Sequence[RawRecord]) -> None:
        """Insert records verbatim, as another store holds them: see :class:`ImportStore`.

        The same lock as an append (the ``log_head`` row, moved by ``len(records)``), so an
        import and appends from other hosts serialise and commit order stays position
        order; the checks (``check_import``) read the stream heads after the lock, as an
        append does. A failed check rolls the transaction back, ``log_head`` with it.
        """
        if not records:
            return
        rows = [tuple(r) for r in records]
        streams = list(dict.fromkeys(r.stream_id for r in records))
        with (
            self._errors("import"),
            self._using() as conn,
            conn.transaction(),
            conn.cursor() as cur,
        ):
            self._send_lock(cur, len(rows))
            last = self._allocated(cur)
            self._send_heads(cur, streams)
            heads = self._heads(cur, streams)
            check_import(last - len(rows), records, heads.get)
            if len(rows) >= _COPY_THRESHOLD:
                with _copy_rows(cur, self._sql.copy) as copy:
                    for row in rows:
                        copy.write_row(row)
            else:
                cur.execute(self._sql.insert, [list(col) for col in zip(*rows, strict=True)])


def _read_goodbye(conn: _Conn) -> bool:
    """Read what an idle session was sent unasked; whether that showed it dead.

    Waits for nothing: only bytes already in the socket are read (a notice, a parameter
    change, or a server's FATAL and end of stream). The end of stream marks ``conn``
    broken; so does a socket that cannot be polled.
    """
    # A selector, not select(): select() refuses a descriptor past 1024, which a busy
    # service's session has (and the check was silently skipped).
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(conn.fileno(), selectors.EVENT_READ)
            for _ in range(_GOODBYE_READS):
                if not selector.select(0):
                    break
                conn.pgconn.consume_input()  # libpq: the FATAL as a notice, then the EOF
        except (OSError, ValueError, psycopg.Error):
            pass  # a closed socket, or libpq saw the end of stream: the session is BAD
    return conn.broken or conn.closed


def _rows(cursor: psycopg.Cursor[Any]) -> list[tuple[Any, ...]]:
    return cursor.fetchall() if cursor.description is not None else []


def _rows_for(
    last: int, heads: Mapping[str, StreamHead], prepared: Sequence[PreparedRequest]
) -> list[Row]:
    """Rows to insert, positions ``last + 1`` onwards, in :data:`_COLUMNS` order.

    This runs under the log's lock, so it does only what needs the position and the stream
    heads: format the suffix and hash. The events handed back are built after the commit.
    """

    def head_of(sid: str) -> tuple[int, bytes]:
        head = heads.get(sid)
        return (0, GENESIS) if head is None else (head.version, head.head)

    return chain_rows(prepared, last, head_of).rows


def _versions_after(
    batch: Sequence[PreparedRequest], versions: Mapping[str, int]
) -> dict[str, int]:
    """The versions of ``batch``'s streams after it, if its expected versions hold.

    The check :func:`chain_rows` makes, made before any hashing, so that a bulk append can
    send its first rows before the last are chained.

    Raises:
        ConcurrencyConflict: as :func:`chain_rows` would, for the first request that fails.
    """
    after: dict[str, int] = {}
    for request in batch:
        sid = request.stream_id
        version = after.get(sid)
        if version is None:
            version = versions.get(sid, 0)
        expected = request.expected_version
        if expected is not None and expected != version:
            raise ConcurrencyConflict(sid, expected, version)
        after[sid] = version + len(request.items)
    return after


def _admit(
    heads: Mapping[str, StreamHead], batches: Sequence[Sequence[PreparedRequest]]
) -> list[ConcurrencyConflict | None]:
    """Per batch of a group, its conflict or None: each checked against the streams as the
    admitted batches before it leave them; a conflicting batch takes no positions."""
    versions = _versions(heads)
    outcomes: list[ConcurrencyConflict | None] = []
    for batch in batches:
        try:
            versions.update(_versions_after(batch, versions))
        except ConcurrencyConflict as conflict:
            outcomes.append(conflict)
            continue
        outcomes.append(None)
    return outcomes


def _pieces(batch: Sequence[PreparedRequest], size: int) -> Iterator[list[PreparedRequest]]:
    """``batch`` in pieces of at most ``size`` events, in order, without expected versions
    (:func:`_versions_after` checked them for the whole batch)."""
    piece: list[PreparedRequest] = []
    room = size
    for request in batch:
        items = request.items
        start = 0
        while start < len(items):
            part = items[start : start + room]
            piece.append(PreparedRequest(request.stream_id, None, part))
            start += len(part)
            room -= len(part)
            if not room:
                yield piece
                piece = []
                room = size
    if piece:
        yield piece


def _versions(heads: Mapping[str, StreamHead]) -> dict[str, int]:
    return {sid: int(head.version) for sid, head in heads.items()}


@contextmanager
def _copy_rows(cur: psycopg.Cursor[Any], statement: bytes) -> Iterator[psycopg.Copy]:
    """A binary ``COPY … FROM STDIN`` of rows in :data:`_COLUMNS` order, on ``cur``.

    psycopg picks a column's binary dumper by its type's oid, and for ``bytea`` that is the
    dumper of its DB-API ``Binary`` wrapper, written in Python (it was registered last);
    every value here is plain ``bytes``, so the C dumper of ``bytes`` is made the one for
    ``bytea`` on this cursor: 0.7 -> 0.3 µs per row. psycopg hands the rows to the socket
    as they come without waiting for the server, until 1 MB is queued.
    """
    cur.adapters.register_dumper(bytes, BytesBinaryDumper)
    with cur.copy(statement) as copy:
        copy.set_types(_COPY_TYPES)
        yield copy


@contextmanager
def _rollback_on_error(conn: _Conn) -> Iterator[None]:
    """For a transaction opened with an explicit BEGIN: ROLLBACK if the block fails."""
    try:
        yield
    except BaseException:
        if not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
            with suppress(psycopg.Error):
                conn.execute(b"ROLLBACK")
        raise


class PostgresTracking:
    """The projection's side of one tracking transaction (see :meth:`PostgresStore.tracking`).

    ``connection`` and ``cursor`` are the live psycopg objects of the transaction, for
    writes :meth:`execute` cannot express (COPY, server-side cursors). Errors they raise
    are translated when they leave the ``with`` block.
    """

    def __init__(
        self,
        connection: _Conn,
        cursor: psycopg.Cursor[Any],
        name: str,
        position: int,
        advance: bytes,
    ) -> None:
        self.connection = connection
        self.cursor = cursor
        self._name = name
        self._position = position
        self._advance = advance

    @property
    def name(self) -> str:
        return self._name

    @property
    def position(self) -> int:
        return self._position

    def execute(
        self, query: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        with _translated(f"projection {self._name!r}"):
            cur = self.cursor.execute(query.encode(), params or None)
            return cur.fetchall() if cur.description is not None else []

    def advance(self, position: int) -> None:
        if position <= self._position:
            # Another worker (or an earlier run) already applied this far.
            raise ConcurrencyConflict(self._name, position, self._position)
        with _translated(f"projection {self._name!r}"):
            self.cursor.execute(self._advance, (position, self._name))
        self._position = position


class PostgresSubscription:
    """Catch-up, then live: every event from ``start`` on, in order, exactly once.

    The switch from reading to waiting loses nothing because of its order: LISTEN first (on
    the subscription's own session, so the server queues every later notification for it),
    then read the backlog by position, then wait for a notification, then read again from
    the last position seen. An event that commits while the backlog is read is either in
    the read or announced by a notification that is already queued. Reads are always by
    position greater than the last one handed out, and visible positions are a prefix of
    the log, so nothing is skipped or repeated. A notification carries the appending
    transaction's last position; one that announces nothing new is skipped without a read.
    """

    def __init__(
        self,
        store: PostgresStore,
        start: int = 1,
        *,
        poll_interval: float = 1.0,
        page_size: int = _PAGE,
    ) -> None:
        if start < 1:
            raise ConfigError(f"positions start at 1, not {start}")
        self._store = store
        self._last = start - 1
        self._announced = 0  # the highest position a notification announced
        self._poll = poll_interval
        self._page = page_size
        self._buffer: deque[RecordedEvent] = deque()
        self._closed = False
        self._waiting = False
        self._lock = threading.Lock()
        with _translated("subscribe"):
            if store._closed:
                raise StoreClosed(f"{store.url} is closed")
            self._conn = store._connect()
            self._wake = f"{store.channel}.wake.{self._conn.info.backend_pid}"[:_MAX_IDENTIFIER]
            self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(store.channel)))
            self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._wake)))
        self._statement = store._sql.read_tail

    @property
    def last_position(self) -> int:
        return self._last

    def __iter__(self) -> Iterator[RecordedEvent]:
        return self

    def __next__(self) -> RecordedEvent:
        while True:
            event = self.next_event(timeout=None)
            if event is not None:
                return event
            if self._closed:
                raise StopIteration

    def next_event(self, timeout: float | None = None) -> RecordedEvent | None:
        deadline = None if timeout is None else monotonic() + timeout
        while not self._closed:
            if not self._buffer:
                self._fill()
            if self._buffer:
                event = self._buffer.popleft()
                self._last = event.position
                return event
            wait = self._poll
            if deadline is not None:
                wait = min(wait, deadline - monotonic())
                if wait <= 0:
                    return None
            self._wait(wait)
        return None

    def _fill(self) -> None:
        """Read the next page after the last position handed out."""
        with self._lock:
            if self._closed:
                return
            with _translated("subscription read"):
                rows = self._conn.execute(
                    self._statement, (self._last, self._page), binary=True
                ).fetchall()
        expected = self._last + 1
        for position, digest, body in rows:
            if position != expected:  # visible positions form a prefix; a hole is damage
                raise LedgerDamaged(
                    DamageKind.GAP, expected, f"position {expected} is missing from the log"
                )
            self._buffer.append(decode_at(position, digest, body))
            expected += 1

    def _wait(self, seconds: float) -> None:
        """Wait until a notification announces a position past the last one seen."""
        deadline = monotonic() + seconds
        with self._lock:
            if self._closed:
                return
            self._waiting = True
        try:
            with _translated("subscription wait"):
                while self._announced <= self._last and not self._closed:
                    remaining = deadline - monotonic()
                    if remaining <= 0:
                        return  # no news: the caller re-reads anyway (the safety net)
                    for notify in self._conn.notifies(timeout=remaining, stop_after=1):
                        if notify.channel == self._store.channel:
                            self._announce(notify.payload)
        finally:
            self._end_wait()

    def _end_wait(self) -> None:
        """Leave the wait; if close() came meanwhile, this thread closes the connection."""
        with self._lock:
            self._waiting = False
            if self._closed:
                self._conn.close()

    def _announce(self, payload: str) -> None:
        try:
            self._announced = max(self._announced, int(payload))
        except ValueError:
            self._announced = self._last + 1  # unreadable: read to find out

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            waiting = self._waiting
            if not waiting:
                self._conn.close()
        if waiting:
            # The owner thread is blocked in the wait: wake it through the server, and it
            # closes the connection itself (closing a socket another thread is polling is
            # unsafe). If that fails, it notices within poll_interval.
            try:
                with _translated("subscription close"), self._store._using() as conn:
                    conn.execute("SELECT pg_notify(%s, '')", (self._wake,))
            except TraceboundError:
                pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if TYPE_CHECKING:  # mypy holds the classes to the port's protocols

    def _meets_the_port(
        store: PostgresStore, sub: PostgresSubscription
    ) -> tuple[LedgerStore, SubscriptionStore, TrackingStore, Subscription]:
        return store, store, store, sub
