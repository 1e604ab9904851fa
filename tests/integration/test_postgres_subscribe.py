"""Live subscriptions: catch-up, then live, with no event lost or repeated across the switch.

The behaviour is the port's (:class:`~tracebound.store.port.SubscriptionStore`), so each test
runs on PostgreSQL (LISTEN/NOTIFY) and on SQLite (polling, ``store/sqlite_subscribe.py``).
On PostgreSQL the subscriber's safety-net poll is set to an hour: only notifications can wake
it, so a lost notification shows up as a stalled test, not as a slow pass.

Timeouts below only stop a broken test from hanging; no assertion depends on timing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conformance.suite import note
from tracebound.events.envelope import RecordedEvent
from tracebound.store.port import LedgerStore, Subscription, SubscriptionStore
from tracebound.store.postgres import PostgresStore, PostgresSubscription
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.sqlite_subscribe import SQLiteSubscription, SQLiteSubscriptions, subscribe

pytestmark = pytest.mark.postgres

GUARD = 60.0  # seconds before a missing event fails the test (never reached when it works)


@dataclass
class Backend:
    store: LedgerStore
    subscriptions: SubscriptionStore
    reopen: Callable[[], LedgerStore]  # a second writer, with its own connections


@pytest.fixture(params=["postgres", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "postgres":
        dsn: str = request.getfixturevalue("postgres_dsn")
        pg = PostgresStore(dsn, schema="live")

        quiet: list[float] = []

        class NotifiedOnly:
            """Subscribe with the safety-net poll effectively off, and record every wait that
            ended without news: with events pending, only a lost notification does that."""

            def subscribe(self, start: int = 1) -> Subscription:
                sub = pg.subscribe(start, poll_interval=3600)
                wait = sub._wait

                def recorded_wait(seconds: float) -> None:
                    wait(seconds)
                    if sub._announced <= sub.last_position and not sub._closed:
                        quiet.append(seconds)

                sub._wait = recorded_wait  # type: ignore[method-assign]
                return sub

        yield Backend(pg, NotifiedOnly(), lambda: PostgresStore(dsn, schema="live"))
        pg.close()
        assert quiet == [], "a subscriber was woken by its timeout, not by a notification"
    else:
        lite = SQLiteStore(tmp_path / "store")
        yield Backend(lite, SQLiteSubscriptions(lite), lambda: SQLiteStore(tmp_path / "store"))
        lite.close()


def take(sub: Subscription, n: int) -> list[RecordedEvent]:
    out: list[RecordedEvent] = []
    for _ in range(n):
        event = sub.next_event(timeout=GUARD)
        assert event is not None, f"stalled after {[e.position for e in out]}"
        out.append(event)
    return out


def test_catch_up_then_live(backend: Backend) -> None:
    backend.store.append("a", [note(i) for i in range(1, 26)])
    with backend.subscriptions.subscribe(1) as sub:
        backlog = take(sub, 25)
        assert [e.position for e in backlog] == list(range(1, 26))
        assert sub.last_position == 25
        writer = threading.Thread(
            target=lambda: [backend.store.append("b", [note(100 + i)]) for i in range(10)]
        )
        writer.start()
        live = take(sub, 10)
        writer.join()
        assert [e.position for e in live] == list(range(26, 36))
        assert [e.stream_id for e in live] == ["b"] * 10
        assert sub.next_event(timeout=0) is None  # nothing more, and no duplicate


def test_subscribe_from_a_position(backend: Backend) -> None:
    recorded = backend.store.append("a", [note(i) for i in range(1, 8)])
    with backend.subscriptions.subscribe(5) as sub:
        assert sub.last_position == 4
        got = take(sub, 3)
    assert [e.position for e in got] == [5, 6, 7]
    assert [e.hash for e in got] == [e.hash for e in recorded[4:]]


def test_events_committed_during_the_switch_are_delivered(backend: Backend) -> None:
    """Commit events in the window between the last read that found nothing new and the wait.

    That is the switch from catching up to waiting: an event committed there is neither in
    the read nor (if the subscriber started listening too late) announced to it.
    """
    backend.store.append("a", [note(i) for i in range(1, 4)])
    sub = backend.subscriptions.subscribe(1)
    assert isinstance(sub, PostgresSubscription | SQLiteSubscription)
    fill = sub._fill
    races = 0

    def fill_then_race() -> None:
        nonlocal races
        fill()
        if not sub._buffer and races < 2:
            # The read found nothing new and the subscriber is about to wait: now a second
            # writer, with its own connection, commits two appends.
            races += 1
            other = backend.reopen()
            try:
                other.append("race", [note(50 + races)])
                other.append("race", [note(60 + races)])
            finally:
                other.close()

    sub._fill = fill_then_race  # type: ignore[method-assign]
    with sub:
        got = take(sub, 7)
        assert races == 2
        assert sub.next_event(timeout=0) is None
    assert [e.position for e in got] == list(range(1, 8))
    assert [e.stream_id for e in got[3:]] == ["race"] * 4


def test_concurrent_writer_across_the_switch(backend: Backend) -> None:
    """A writer runs before, during and after the catch-up: every event, once, in order."""
    total = 400
    started = threading.Event()

    def write() -> None:
        other = backend.reopen()
        try:
            for i in range(0, total, 4):
                other.append(f"s{i % 3}", [note(i + j) for j in range(4)])
                started.set()
        finally:
            other.close()

    writer = threading.Thread(target=write)
    writer.start()
    started.wait()
    with backend.subscriptions.subscribe(1) as sub:
        got = take(sub, total)
        writer.join()
        assert sub.next_event(timeout=0) is None
    assert [e.position for e in got] == list(range(1, total + 1))
    final = list(backend.store.read_log())
    assert [e.hash for e in got] == [e.hash for e in final]


def test_close_from_another_thread_ends_iteration(backend: Backend) -> None:
    backend.store.append("a", [note(1)])
    sub = backend.subscriptions.subscribe(1)
    seen: list[int] = []
    waiting = threading.Event()

    def consume() -> None:
        for event in sub:
            seen.append(event.position)
            waiting.set()

    consumer = threading.Thread(target=consume)
    consumer.start()
    waiting.wait()  # it has the one event and is now blocked waiting for more
    sub.close()
    consumer.join(GUARD)
    assert not consumer.is_alive(), "close() did not wake the blocked subscriber"
    assert seen == [1]
    assert sub.next_event(timeout=0) is None
    sub.close()  # idempotent


def test_sqlite_subscribe_function(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s")
    store.append("a", [note(1), note(2)])
    with subscribe(store, 2) as sub:
        assert [e.position for e in take(sub, 1)] == [2]
    store.close()


def test_postgres_notifications_stay_in_their_schema(postgres_dsn: str) -> None:
    """Two ledgers in one database: each subscriber hears only its own ledger."""
    a = PostgresStore(postgres_dsn, schema="one")
    b = PostgresStore(postgres_dsn, schema="two")
    assert a.channel != b.channel
    with a.subscribe(1, poll_interval=3600) as sub:
        b.append("b", [note(1)])
        assert sub.next_event(timeout=0) is None
        a.append("a", [note(2)])
        (event,) = take(sub, 1)
        assert event.stream_id == "a"
    a.close()
    b.close()


def test_postgres_safety_net_without_notify(postgres_dsn: str) -> None:
    """A writer opened with notify=False is still seen, by the subscriber's periodic re-read."""
    reader = PostgresStore(postgres_dsn, schema="quiet")
    writer = PostgresStore(postgres_dsn, schema="quiet", notify=False)
    with reader.subscribe(1, poll_interval=0.05) as sub:
        writer.append("a", [note(1)])
        assert [e.position for e in take(sub, 1)] == [1]
    reader.close()
    writer.close()
