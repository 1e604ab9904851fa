"""Projection positions tracked in the projection's own transaction: exactly-once.

A projection's writes and the position it has reached commit together or not at all. A crash
(a killed process, not an exception) between the write and the advance, or after the advance
but before the commit, leaves both as they were, so the events are applied again, once.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from collections.abc import Iterator

import psycopg
import pytest

from tests.conformance.suite import note
from tests.pg import wait_for_lock_wait
from tracebound.errors import ConcurrencyConflict, StorageError, TraceboundError
from tracebound.store.port import TrackingStore
from tracebound.store.postgres import PostgresStore, PostgresTracking

pytestmark = pytest.mark.postgres

SCHEMA = "tracked"
VIEW = "CREATE TABLE IF NOT EXISTS seen (position bigint PRIMARY KEY, stream text NOT NULL)"


@pytest.fixture
def store(postgres_dsn: str) -> Iterator[PostgresStore]:
    s = PostgresStore(postgres_dsn, schema=SCHEMA)
    with s.tracking("setup") as tx:
        tx.execute(VIEW)  # the projection's own table, in the same database
    yield s
    s.close()


def seen(store: PostgresStore) -> list[int]:
    with store.tracking("reader") as tx:
        return [r[0] for r in tx.execute("SELECT position FROM seen ORDER BY position")]


def test_store_meets_the_tracking_port(store: PostgresStore) -> None:
    assert isinstance(store, TrackingStore)
    assert store.tracked_position("never") == 0


def test_writes_and_position_commit_together(store: PostgresStore) -> None:
    with store.tracking("p") as tx:
        assert (tx.name, tx.position) == ("p", 0)
        tx.execute("INSERT INTO seen VALUES (%s, %s)", (1, "a"))
        tx.advance(1)
        assert tx.position == 1
        tx.execute("INSERT INTO seen VALUES (%s, %s)", (2, "a"))
        tx.advance(2)
    assert store.tracked_position("p") == 2
    assert seen(store) == [1, 2]
    assert store.tracked_position("other") == 0


def test_exception_rolls_back_writes_and_position(store: PostgresStore) -> None:
    with store.tracking("p") as tx:
        tx.execute("INSERT INTO seen VALUES (1, 'a')")
        tx.advance(1)

    def fail() -> None:
        with store.tracking("p") as tx:
            tx.execute("INSERT INTO seen VALUES (2, 'a')")
            tx.advance(2)
            raise RuntimeError("the projection failed")

    with pytest.raises(RuntimeError):
        fail()
    assert store.tracked_position("p") == 1
    assert seen(store) == [1]


def _crash_inside(dsn: str, advance: bool) -> None:
    """Child process: write (and maybe advance), then die without committing."""
    store = PostgresStore(dsn, schema=SCHEMA)
    with store.tracking("p") as tx:
        tx.execute("INSERT INTO seen VALUES (7, 'crash')")
        if advance:
            tx.advance(7)
        os._exit(17)  # no exception, no cleanup: the process is simply gone


@pytest.mark.parametrize("advance", [False, True], ids=["before-advance", "before-commit"])
def test_crash_commits_nothing(store: PostgresStore, postgres_dsn: str, advance: bool) -> None:
    proc = multiprocessing.get_context("spawn").Process(
        target=_crash_inside, args=(postgres_dsn, advance)
    )
    proc.start()
    proc.join()
    assert proc.exitcode == 17
    assert store.tracked_position("p") == 0
    assert seen(store) == []
    with store.tracking("p") as tx:  # the row lock died with the session: no one waits
        assert tx.position == 0


def test_expected_position_is_checked(store: PostgresStore) -> None:
    with store.tracking("p", expected=0) as tx:
        tx.advance(3)
    with pytest.raises(ConcurrencyConflict) as info, store.tracking("p", expected=2):
        pass
    assert (info.value.stream_id, info.value.expected, info.value.actual) == ("p", 2, 3)


def test_advance_must_move_forward(store: PostgresStore) -> None:
    with store.tracking("p") as tx:
        tx.advance(5)

    def again() -> None:
        with store.tracking("p") as tx:
            tx.execute("INSERT INTO seen VALUES (5, 'again')")
            tx.advance(5)  # already applied: refused, and the whole transaction rolls back

    with pytest.raises(ConcurrencyConflict):
        again()
    assert store.tracked_position("p") == 5
    assert seen(store) == []


def test_backend_errors_are_translated(store: PostgresStore) -> None:
    with pytest.raises(StorageError) as info, store.tracking("p") as tx:
        tx.execute("INSERT INTO no_such_table VALUES (1)")
    assert not isinstance(info.value, psycopg.Error)

    def raw() -> None:
        with store.tracking("p") as tx:
            assert isinstance(tx, PostgresTracking)
            tx.cursor.execute("SELECT 1/0")  # the raw cursor: translated at the block's end

    with pytest.raises(StorageError):
        raw()
    assert store.tracked_position("p") == 0


def test_a_swallowed_failure_does_not_pretend_to_commit(store: PostgresStore) -> None:

    def swallow() -> None:
        with store.tracking("p") as tx:
            tx.advance(1)
            # A caller ignoring a failure must not believe the advance committed.
            with contextlib.suppress(TraceboundError):
                tx.execute("INSERT INTO seen VALUES (1, 'a'), (1, 'a')")  # duplicate key

    with pytest.raises(StorageError, match="nothing was committed"):
        swallow()
    assert store.tracked_position("p") == 0


def test_append_inside_tracking_commits_with_it(store: PostgresStore) -> None:
    """A process manager: the events it derives and its position commit together."""
    store.append("in", [note(1)])

    def crash() -> None:
        with store.tracking("pm") as tx:
            store.append("out", [note(2)])
            tx.advance(1)
            raise RuntimeError("crash before commit")

    with pytest.raises(RuntimeError):
        crash()
    assert (store.size(), store.tracked_position("pm")) == (1, 0)
    with store.tracking("pm") as tx:
        (derived,) = store.append("out", [note(2)])
        tx.advance(1)
    assert derived.position == 2
    assert (store.size(), store.tracked_position("pm")) == (2, 1)


def test_two_workers_of_one_projection_take_turns(store: PostgresStore, postgres_dsn: str) -> None:
    entered = threading.Event()
    release = threading.Event()
    second_saw: list[int] = []

    def first() -> None:
        with store.tracking("p") as tx:
            entered.set()
            release.wait()
            tx.advance(3)

    def second() -> None:
        other = PostgresStore(postgres_dsn, schema=SCHEMA)
        with other.tracking("p") as tx:
            second_saw.append(tx.position)
        other.close()

    a = threading.Thread(target=first)
    a.start()
    entered.wait()
    b = threading.Thread(target=second)
    b.start()
    wait_for_lock_wait(postgres_dsn, "projection_positions")  # the second one is queued
    assert second_saw == []
    release.set()
    a.join()
    b.join()
    assert second_saw == [3]  # it saw the first worker's progress, so it skips those events


class Flaky(Exception):
    pass


def test_exactly_once_across_a_restart(store: PostgresStore) -> None:
    """A subscriber applying each event in a tracking transaction: a failure midway and a
    restart from the tracked position apply every event exactly once (the primary key of
    ``seen`` would reject a second application)."""
    for i in range(1, 31):
        store.append(f"s{i % 3}", [note(i)])

    def run(fail_at: int | None) -> None:
        start = store.tracked_position("view") + 1
        with store.subscribe(start, poll_interval=3600) as sub:
            while sub.last_position < store.size():
                event = sub.next_event(timeout=60)
                assert event is not None
                with store.tracking("view") as tx:
                    if event.position <= tx.position:
                        continue
                    tx.execute(
                        "INSERT INTO seen VALUES (%s, %s)", (event.position, event.stream_id)
                    )
                    if event.position == fail_at:
                        raise Flaky
                    tx.advance(event.position)

    with pytest.raises(Flaky):
        run(fail_at=17)
    assert store.tracked_position("view") == 16
    assert seen(store) == list(range(1, 17))
    run(fail_at=None)
    assert store.tracked_position("view") == 30
    assert seen(store) == list(range(1, 31))
