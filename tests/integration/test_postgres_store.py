"""The PostgreSQL backend beyond the conformance suite: URLs, bytes, errors, durability."""

from __future__ import annotations

import gc
import multiprocessing
import shutil
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from tests.conformance.suite import note
from tests.pg import PgServer, crash_and_restart
from tracebound.errors import (
    ConcurrencyConflict,
    ConcurrencyError,
    ConfigError,
    StorageError,
    StoreBusy,
    StoreNotFound,
)
from tracebound.store.port import (
    NO_STREAM,
    AppendRequest,
    LedgerStore,
    SubscriptionStore,
    TrackingStore,
)
from tracebound.store.postgres import PostgresStore, display_url, parse_url
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.url import open_store

pytestmark = pytest.mark.postgres


def test_store_meets_every_port(postgres_dsn: str) -> None:
    with PostgresStore(postgres_dsn) as store:
        assert isinstance(store, LedgerStore)
        assert isinstance(store, SubscriptionStore)
        assert isinstance(store, TrackingStore)


def test_hashed_bytes_are_identical_to_sqlite(postgres_dsn: str, tmp_path: Path) -> None:
    """Same events, same positions: the same record bytes and hashes in both backends."""
    batches = [
        [AppendRequest("a", [note(1), note(2, "ü \u2028")], NO_STREAM)],  # type: ignore[arg-type]
        [
            AppendRequest("b", [note(3, workflow=None)]),  # type: ignore[arg-type]
            AppendRequest("a", [note(4)], 2),  # type: ignore[arg-type]
        ],
        [AppendRequest("c", [note(i) for i in range(5, 200)])],  # type: ignore[arg-type]
    ]
    with PostgresStore(postgres_dsn) as pg, SQLiteStore(tmp_path / "s") as lite:
        for batch in batches:
            assert pg.append_batch(batch) == lite.append_batch(batch)
        assert list(pg.read_raw()) == list(lite.read_raw())
        assert list(pg.read_log()) == list(lite.read_log())
        assert list(pg.read_stream("a")) == list(lite.read_stream("a"))
        assert pg.stream_head("c") == lite.stream_head("c")


def test_parse_url() -> None:
    assert parse_url("postgresql://u@h:5/db") == ("postgresql://u@h:5/db", "tracebound")
    assert parse_url("postgres://u@h/db?schema=x&sslmode=require") == (
        "postgresql://u@h/db?sslmode=require",
        "x",
    )
    with pytest.raises(ConfigError):
        parse_url("postgresql://h/db?schema=a&schema=b")
    with pytest.raises(ConfigError):
        parse_url("sqlite:///x")


def test_open_store_by_url_and_reopen_by_its_url(postgres_server: PgServer) -> None:
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute("CREATE DATABASE by_url TEMPLATE template0")
    try:
        url = postgres_server.url("by_url", schema="my ledger")
        with pytest.raises(StoreNotFound):
            open_store(url)
        store = open_store(url, create=True)
        assert isinstance(store, PostgresStore)
        assert store.schema == "my ledger"
        store.append("s", [note(1)])
        again = open_store(store.url)  # the URL it reports opens it again
        assert [e.position for e in again.read_log()] == [1]
        again.close()
        store.close()
    finally:
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
            admin.execute("DROP DATABASE by_url WITH (FORCE)")


def test_a_url_with_no_host_reaches_the_server_through_its_unix_socket(
    postgres_server: PgServer,
) -> None:
    """``postgresql:///db?host=/socket/dir``, libpq's usual form for a local socket, was
    refused ("invalid connection option"): rebuilding the URL turned ``///`` into ``/``."""
    assert parse_url("postgresql:///db?host=/run/pg") == (
        "postgresql:///db?host=%2Frun%2Fpg",
        "tracebound",
    )
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute("CREATE DATABASE by_socket TEMPLATE template0")
    try:
        url = (
            f"postgresql:///by_socket?host={quote(str(postgres_server.socket_dir), safe='')}"
            f"&port={postgres_server.port}&user=postgres"
        )
        with closing(open_store(url, create=True)) as store:
            store.append("s", [note(1)])
            assert store.size() == 1
            with closing(open_store(store.url)) as again:  # the URL it reports opens it again
                assert again.size() == 1
        assert (
            display_url("host=/run/pg dbname=db", "s")
            == "postgresql:///db?host=%2Frun%2Fpg&schema=s"
        )
    finally:
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
            admin.execute("DROP DATABASE by_socket WITH (FORCE)")


def test_url_leaves_the_password_out(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn + " password=s3cret")  # trust auth ignores it
    assert "s3cret" not in store.url
    assert "schema=tracebound" in store.url
    store.close()


def test_schemas_are_separate_ledgers(postgres_dsn: str) -> None:
    with PostgresStore(postgres_dsn, schema="a") as a, PostgresStore(postgres_dsn, schema="b") as b:
        a.append("s", [note(1), note(2)])
        b.append("s", [note(3)])
        assert (a.size(), b.size()) == (2, 1)
        assert b.stream_head("s") is not None
        assert b.stream_head("s").version == 1  # type: ignore[union-attr]


def test_missing_ledger_is_store_not_found(postgres_dsn: str) -> None:
    with pytest.raises(StoreNotFound):
        PostgresStore(postgres_dsn, schema="nothing", create=False)


def test_a_schema_holding_another_applications_events_table_is_refused(
    postgres_dsn: str,
) -> None:
    """``init`` into a schema whose ``events`` table is someone else's skipped it (CREATE
    TABLE IF NOT EXISTS), added tracebound's other tables beside the application's, said
    "Created", and every command after failed on a missing column."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA app")
        conn.execute("CREATE TABLE app.events (id int PRIMARY KEY, name text)")
    with pytest.raises(ConfigError, match=r"app\.events .*not a tracebound ledger's"):
        PostgresStore(postgres_dsn, schema="app")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'app'"
        ).fetchall()
    assert tables == [("events",)]  # nothing added beside it


def test_a_refused_open_keeps_no_connection(postgres_dsn: str) -> None:
    def stores(conn: psycopg.Connection[Any]) -> int:
        # The store's sessions by the name it connects with: autovacuum and the fixtures'
        # own sessions come and go in this database too.
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = 'tracebound'"
        ).fetchone()
        assert row is not None
        return int(row[0])

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        gc.disable()  # the collector would close it anyway, later: not what is tested
        try:
            # The error's traceback holds the half-made store (as a caller's logging would).
            with pytest.raises(StoreNotFound) as caught:
                PostgresStore(postgres_dsn, schema="nothing_here", create=False)
            # The server lets a closed session go a moment after the client hangs up.
            deadline = time.monotonic() + 10
            while stores(conn) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert stores(conn) == 0, caught.traceback
        finally:
            gc.enable()


def test_a_ledger_from_before_stored_merkle_nodes_opens_without_them(
    postgres_dsn: str,
) -> None:
    """A role without CREATE can still open (and prove from) an older ledger; the next
    open that may create adds the table."""
    with PostgresStore(postgres_dsn, schema="older") as store:
        store.append("s", [note(i) for i in range(300)])
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute('DROP TABLE "older".merkle_nodes')
    with PostgresStore(postgres_dsn, schema="older", create=False) as store:
        assert store.merkle_nodes(1, 0, 1) == [] and store.merkle_node_count(1) == 0
        store.add_merkle_nodes(1, 0, [b"\x01" * 32])  # kept nowhere, refused by no one
        store.drop_merkle_nodes()
        assert store.merkle_node_count(1) == 0
        assert len(store.read_hashes(1, 300)) == 300
    with PostgresStore(postgres_dsn, schema="older") as store:
        store.add_merkle_nodes(1, 0, [b"\x01" * 32])
        assert store.merkle_nodes(1, 0, 1) == [b"\x01" * 32]


def test_bad_configuration_is_config_error(postgres_dsn: str) -> None:
    with pytest.raises(ConfigError):
        PostgresStore(postgres_dsn, schema="")
    with pytest.raises(ConfigError):
        PostgresStore(postgres_dsn, schema="x" * 64)
    with pytest.raises(ConfigError):
        PostgresStore("host=127.0.0.1 port='unterminated")


def test_unreachable_server_is_storage_error(postgres_server: PgServer) -> None:
    with tempfile.TemporaryDirectory() as nowhere, pytest.raises(StorageError) as info:
        PostgresStore(f"host={nowhere} port={postgres_server.port} user=postgres")
    assert isinstance(info.value.__cause__, psycopg.Error)
    assert not isinstance(info.value, psycopg.Error)


def _open(dsn: str) -> int:
    with PostgresStore(dsn, schema="raced") as store:
        return store.size()


def test_first_open_from_many_processes_at_once(postgres_dsn: str) -> None:
    """Creating the schema is serialised: concurrent first opens all succeed."""
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        assert pool.map(_open, [postgres_dsn] * 8) == [0] * 8


def test_sessions_commit_synchronously_whatever_the_server_default(
    postgres_dsn: str, postgres_server: PgServer
) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(postgres_dsn)["dbname"]
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(
                sql.Identifier(str(dbname))
            )
        )
    with PostgresStore(postgres_dsn) as store:
        row = store._conn().execute("SHOW synchronous_commit").fetchone()
    assert row == ("on",)


def test_acknowledged_appends_survive_a_server_crash(
    postgres_dsn: str, postgres_server: PgServer
) -> None:
    store = PostgresStore(postgres_dsn)
    acknowledged = store.append_batch(
        [AppendRequest("s", [note(i) for i in range(100)])]  # type: ignore[arg-type]
    )
    acknowledged += store.append("s", [note(100)])
    crash_and_restart(postgres_server)
    # The same store object reconnects: its broken session is replaced on next use.
    assert [e.hash for e in store.read_log()] == [e.hash for e in acknowledged]
    (after,) = store.append("s", [note(101)])
    assert after.position == 102
    store.close()


def test_lock_timeout_is_a_retryable_concurrency_error(postgres_dsn: str) -> None:
    """A writer that cannot get the log's lock in time fails cleanly, and can retry later."""
    holder = PostgresStore(postgres_dsn)
    impatient = PostgresStore(postgres_dsn, lock_timeout=0.05)
    with holder.tracking("hold"):
        holder.append("a", [note(1)])  # holds the log's lock until this block ends
        with pytest.raises(ConcurrencyError) as info:
            impatient.append("b", [note(2)])
        assert not isinstance(info.value, ConcurrencyConflict)
        with pytest.raises(ConcurrencyError):  # the session was rolled back, not left broken
            impatient.append_batch([AppendRequest("b", [note(i) for i in range(100)])])  # type: ignore[arg-type]
    (event,) = impatient.append("b", [note(2)])
    assert event.position == 2
    assert [e.stream_id for e in impatient.read_log()] == ["a", "b"]
    holder.close()
    impatient.close()


# --- lock_timeout: 60 s unless someone set one -----------------------------------------------


def _session_lock_timeout(store: PostgresStore) -> str:
    row = store._conn().execute("SHOW lock_timeout").fetchone()
    assert row is not None
    return str(row[0])


def _set_for_this_role(dsn: str, value: str) -> None:
    """A DBA's setting for the role, in this test's database only (dropped with it)."""
    dbname = dsn.rsplit("dbname=", 1)[1]
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {} SET lock_timeout = {}").format(
                sql.Identifier(dbname), sql.Literal(value)
            )
        )


def test_a_session_nobody_set_a_lock_timeout_for_waits_60_s(postgres_dsn: str) -> None:
    """PostgreSQL's own default (0) waits for ever behind a stopped or hung writer, where
    SQLite and JSONL stop with StoreBusy after 60 s: with nothing set, 60 s here too."""
    with PostgresStore(postgres_dsn) as store:
        assert (_session_lock_timeout(store), store.lock_timeout) == ("1min", 60.0)


def test_a_lock_timeout_set_for_the_role_or_in_the_url_is_kept(postgres_dsn: str) -> None:
    # The URL's options, even "0" (wait for ever), are the user's; a role's setting the DBA's.
    with PostgresStore(f"{postgres_dsn} options='-c lock_timeout=0'") as store:
        assert (_session_lock_timeout(store), store.lock_timeout) == ("0", None)
    _set_for_this_role(postgres_dsn, "7s")
    with PostgresStore(postgres_dsn) as store:
        assert (_session_lock_timeout(store), store.lock_timeout) == ("7s", 7.0)
    with PostgresStore(postgres_dsn, lock_timeout=0.25) as store:  # an explicit one wins
        assert (_session_lock_timeout(store), store.lock_timeout) == ("250ms", 0.25)


def test_store_busy_names_the_effective_lock_timeout(postgres_dsn: str) -> None:
    """A role's 250 ms, not the argument's None: StoreBusy says how long it waited."""
    _set_for_this_role(postgres_dsn, "250ms")
    with PostgresStore(postgres_dsn) as holder, PostgresStore(postgres_dsn) as waiting:
        with holder.tracking("hold"):
            holder.append("a", [note(1)])  # holds the log's lock until this block ends
            with pytest.raises(StoreBusy) as info:
                waiting.append("b", [note(2)])
        assert info.value.waited == 0.25
        assert "within 0.25 s" in str(info.value)


def test_lock_timeout_does_not_bound_a_long_append_or_a_checkpoint(postgres_dsn: str) -> None:
    """lock_timeout bounds waiting for a lock, never the work done holding one: a bulk
    append (COPY) and a checkpoint go through with the shortest timeout there is."""
    with PostgresStore(postgres_dsn, lock_timeout=0.001) as store:
        events = store.append_batch(
            [AppendRequest(f"s{k}", [note(i) for i in range(5000)]) for k in range(4)]  # type: ignore[arg-type]
        )
        store.save_checkpoint(len(events), "n\n")
        assert (store.size(), store.checkpoints()) == (20000, [(20000, "n\n")])


@pytest.mark.parametrize("schema", ["Mixed Case", 'per%cent%s"quote', "ünï"])
def test_any_schema_name_works(postgres_dsn: str, schema: str) -> None:
    """Names are quoted, and a "%" in one is not taken for a query placeholder."""
    with PostgresStore(postgres_dsn, schema=schema) as store:
        store.append("a", [note(1)])
        store.append("a", [note(i) for i in range(2, 1002)])  # the COPY path
        store.save_checkpoint(1, "n\n")
        store.set_meta("origin", "o")
        with store.tracking("p") as tx:
            tx.advance(1)
        with store.subscribe(1000, poll_interval=3600) as sub:
            assert [sub.next_event(timeout=60) for _ in range(2)][-1].position == 1001  # type: ignore[union-attr]
        with open_store(store.url) as again:  # type: ignore[attr-defined]
            assert (again.size(), again.checkpoints(), again.get_meta("origin")) == (
                1001,
                [(1, "n\n")],
                "o",
            )
        assert store.tracked_position("p") == 1


def test_missing_server_binaries_fail_instead_of_skipping(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tests.pg

    monkeypatch.delenv("TRACEBOUND_PG_BINDIR", raising=False)
    monkeypatch.setattr(tests.pg, "_DEBIAN_ROOT", tmp_path)
    monkeypatch.setattr(shutil, "which", lambda _name: None)  # the module tests.pg uses
    with pytest.raises(pytest.fail.Exception, match="never skipped"):
        tests.pg.find_bindir()
