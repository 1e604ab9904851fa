"""One PostgresStore shared by threads, closed by one of them while another reads.

The PostgreSQL counterpart of tests/unit/store/test_sqlite_close_threads.py. Every thread
reads through its own session, which ``close()`` closes. Closed under a statement under
way, that read failed with ConnectionLost ("retrying is safe"), and a thread calling in
while close() was at work opened a new session that nothing ever closed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from itertools import islice
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.conformance.suite import note
from tests.pg import wait_for_lock_wait
from tracebound.errors import StoreClosed
from tracebound.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres

GUARD = 60.0
# How long a statement held open waits for a close() that should not get through; a
# close() that does (the bug) gets through in well under this.
AMPLE = 0.5


def _sessions(dsn: str) -> int:
    """The store's sessions the server still has (its application_name is tracebound)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE application_name = 'tracebound' AND datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _close_during_a_statement(
    dsn: str, store: PostgresStore, read: Callable[[PostgresStore], Any]
) -> dict[str, Any]:
    """Run ``read`` in a thread, held inside its first statement by a lock another session
    has on the events table; close the store from a second thread meanwhile. What the read
    returned or raised, and what the next read raised."""
    out: dict[str, Any] = {}

    def reader() -> None:
        try:
            out["read"] = read(store)
        except BaseException as exc:  # noqa: BLE001 - the test reports what escaped
            out["read"] = exc
        try:
            out["next"] = store.size()
        except BaseException as exc:  # noqa: BLE001
            out["next"] = exc

    thread = threading.Thread(target=reader)
    closer = threading.Thread(target=store.close)
    with psycopg.connect(dsn) as blocker:
        blocker.execute(
            sql.SQL("LOCK TABLE {}.events IN ACCESS EXCLUSIVE MODE").format(
                sql.Identifier(store.schema)
            )
        )
        thread.start()
        wait_for_lock_wait(dsn, "events")  # the read is inside its statement
        closer.start()
        closer.join(AMPLE)  # close() must wait for that statement to end
        blocker.rollback()
    thread.join(GUARD)
    closer.join(GUARD)
    assert not thread.is_alive()
    assert not closer.is_alive()
    return out


@pytest.mark.parametrize(
    "read",
    [
        lambda s: [e.stream_version for e in islice(s.read_stream("s"), 50)],
        lambda s: [e.position for e in islice(s.read_log(), 50)],
        lambda s: s.stream_head("s").version,
    ],
    ids=["read_stream", "read_log", "stream_head"],
)
def test_close_from_another_thread_waits_for_a_read_under_way(
    postgres_dsn: str, read: Callable[[PostgresStore], Any]
) -> None:
    store = PostgresStore(postgres_dsn)
    store.append("s", [note(i) for i in range(60)])
    expected = read(store)
    out = _close_during_a_statement(postgres_dsn, store, read)
    assert out["read"] == expected  # the read under way finished with its rows...
    assert isinstance(out["next"], StoreClosed)  # ...and the next one is refused, typed
    assert store._connections == []
    assert _sessions(postgres_dsn) == 0  # no session opened after close() stays open
