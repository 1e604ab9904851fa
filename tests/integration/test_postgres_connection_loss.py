"""A PostgreSQL session that dies under tracebound: a failover, a restart, a network blip,
``pg_terminate_backend``. Each is simulated by terminating the session's backend, which
needs no restart. The promise: a typed error, never a half-written batch, and the same
object works again on a new session (a long-running service must not stay broken).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conformance.suite import note
from tests.integration.test_postgres_views import _ledger
from tests.pg import PgServer, wait_for_lock_wait
from tracebound.errors import CommitOutcomeUnknown, ConcurrencyConflict, StorageError
from tracebound.ids import StreamId
from tracebound.projections import ProjectionRunner
from tracebound.projections.cost import CostLedgerProjection
from tracebound.projections.postgres_views import PostgresViews
from tracebound.store.group_commit import GroupCommitter
from tracebound.store.port import AppendRequest
from tracebound.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres


def terminate(dsn: str, pid: int) -> None:
    """End one backend the way a DBA or a failover does: its client finds out on next use."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        (done,) = admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() or (False,)
    assert done, f"no backend {pid} to terminate"


def test_views_work_again_after_their_session_is_terminated(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str
) -> None:
    """`project run --follow` keeps one PostgresViews for hours: a session ended under it
    (between two polls, or under a commit) is replaced, and nothing is applied twice."""
    store = _ledger(tmp_path / "ledger", ["successful"])
    tables = CostLedgerProjection().tables
    dbname = postgres_dsn.rsplit("dbname=", 1)[1]
    with PostgresViews(postgres_server.url(dbname, schema="views")) as views:
        runner = ProjectionRunner(store, views, [CostLedgerProjection()], batch_size=2)
        runner.run(until_caught_up=False)  # positions 1-2
        terminate(postgres_dsn, views._conn.info.backend_pid)
        assert views.positions()[0].position == 2  # a read: retried on a new session
        terminate(postgres_dsn, views._conn.info.backend_pid)
        runner.run(until_caught_up=False)  # its commit meets the dead session first
        assert views.position_record("cost_ledger").position == 4  # type: ignore[union-attr]
        terminate(postgres_dsn, views._conn.info.backend_pid)
        runner.run()
        with PostgresViews(postgres_server.url(dbname, schema="alone")) as alone:
            ProjectionRunner(store, alone, [CostLedgerProjection()]).run()
            assert views.snapshot(tables) == alone.snapshot(tables)  # nothing applied twice
    store.close()


@contextmanager
def commits_wait_for_a_standby(dsn: str) -> Iterator[None]:
    """Every COMMIT waits for a synchronous standby that never comes: committed locally,
    not yet acknowledged. Terminating such a session is the ambiguous commit (the COMMIT
    was sent, the answer lost) without racing a packet. Server-wide, so reset afterwards."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'tb_nobody'")
        admin.execute("SELECT pg_reload_conf()")
        try:
            yield
        finally:
            admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
            admin.execute("SELECT pg_reload_conf()")


def terminate_when_committing(dsn: str) -> None:
    """Wait for a session whose COMMIT waits for the standby, then terminate it."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        for _ in range(6000):
            row = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE wait_event = 'SyncRep' AND application_name = 'tracebound'"
            ).fetchone()
            if row is not None:
                return
            time.sleep(0.005)
    pytest.fail("no append ever waited at its COMMIT")


@pytest.mark.parametrize("grouped", [False, True], ids=["store", "group_commit"])
def test_an_append_whose_commit_answer_is_lost_says_so_and_a_retry_is_safe(
    postgres_dsn: str, grouped: bool
) -> None:
    """The connection dies after COMMIT was sent: the events are in, the caller cannot
    know. It gets a StorageError saying the outcome is unknown (not 'not written'), and a
    retry with expected_version is refused instead of writing the events twice."""
    store: Any = PostgresStore(postgres_dsn)
    if grouped:
        store = GroupCommitter(store)
    store.append("s", [note(0)])
    with commits_wait_for_a_standby(postgres_dsn):
        killer = threading.Thread(target=terminate_when_committing, args=(postgres_dsn,))
        killer.start()
        with pytest.raises(CommitOutcomeUnknown) as info:
            store.append("s", [note(1)], expected_version=1)
        killer.join()
    message = str(info.value)
    assert "may have been written" in message and "not written" not in message, message
    with pytest.raises(ConcurrencyConflict):  # the same store object, on a new session
        store.append("s", [note(1)], expected_version=1)
    assert [e.stream_version for e in store.read_stream("s")] == [1, 2]
    store.close()


def terminate_when_waiting_for_the_lock(dsn: str) -> None:
    """Wait for a session queued behind the log's lock (its BEGIN and lock sent), end it."""
    wait_for_lock_wait(dsn, "log_head")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND query LIKE '%log_head%'"
        )


@pytest.mark.parametrize(
    ("grouped", "events"),
    [(False, 3), (False, 1500), (True, 3), (True, 1500)],
    ids=["store", "store-bulk", "group_commit", "group_commit-bulk"],
)
def test_an_append_cut_off_before_its_commit_wrote_nothing_and_the_next_one_works(
    postgres_dsn: str, grouped: bool, events: int
) -> None:
    """Terminated mid-append (after BEGIN, queued for the lock): a StorageError that says
    nothing was written, none of the batch in the log, and the same object appends next."""
    holder = PostgresStore(postgres_dsn)
    store: Any = PostgresStore(postgres_dsn)
    if grouped:
        store = GroupCommitter(store)
    batch = [
        AppendRequest(StreamId("s"), [note(i) for i in range(events)]),
        AppendRequest(StreamId("t"), [note(0)]),
    ]
    with holder.tracking("hold"):
        holder.append("h", [note(0)])  # holds the log's lock until the block ends
        killer = threading.Thread(target=terminate_when_waiting_for_the_lock, args=(postgres_dsn,))
        killer.start()
        with pytest.raises(StorageError) as info:
            store.append_batch(batch)
        killer.join()
    assert not isinstance(info.value, CommitOutcomeUnknown)
    assert "nothing was written" in str(info.value)
    assert [e.stream_id for e in store.read_log()] == ["h"]  # no part of the batch
    written = store.append_batch(batch)  # the same object, on a new session
    assert written[-1].position == events + 2
    holder.close()
    store.close()
