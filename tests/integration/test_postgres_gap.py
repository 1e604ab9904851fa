"""The event-store "gap" bug, on a real PostgreSQL server.

An event table keyed by a ``bigserial`` hands out positions without waiting for earlier
transactions to commit: transaction 1 takes position 1, transaction 2 takes 2 and commits
first, a reader tailing by position sees 2 and moves past 1, which commits a moment later and
is never read. The store must make that impossible: every position a reader can see is part
of a gap-free prefix of the log, so tailing by position reads every event exactly once.

The control test builds the naive table and shows the detector used here does catch the skip,
so the store's tests could fail.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
import pytest

from tests.conformance.suite import note
from tests.pg import wait_for_lock_wait
from tracebound.ids import Position
from tracebound.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres

SCHEMA = "gap"


def skipped_positions(seen: Sequence[int], final: Sequence[int]) -> list[int]:
    """Positions in the final log that a tailing reader passed without reading."""
    top = seen[-1] if seen else 0
    read = set(seen)
    return [p for p in final if p <= top and p not in read]


def test_detector_catches_the_naive_bigserial_gap(postgres_dsn: str) -> None:
    """Control: a sequence-keyed table really loses an event for a tailing reader."""
    with psycopg.connect(postgres_dsn, autocommit=True) as setup:
        setup.execute("CREATE TABLE naive (position bigserial PRIMARY KEY, data text)")
    slow = psycopg.connect(postgres_dsn)  # transaction 1: takes position 1, commits last
    fast = psycopg.connect(postgres_dsn)  # transaction 2: takes position 2, commits first
    reader = psycopg.connect(postgres_dsn, autocommit=True)
    try:
        slow.execute("INSERT INTO naive (data) VALUES ('slow')")
        fast.execute("INSERT INTO naive (data) VALUES ('fast')")
        fast.commit()
        seen: list[int] = []

        def tail() -> None:
            last = seen[-1] if seen else 0
            rows = reader.execute(
                "SELECT position FROM naive WHERE position > %s ORDER BY position", (last,)
            ).fetchall()
            seen.extend(r[0] for r in rows)

        tail()
        slow.commit()
        tail()
        final = [r[0] for r in reader.execute("SELECT position FROM naive ORDER BY position")]
    finally:
        for conn in (slow, fast, reader):
            conn.close()
    assert final == [1, 2]
    assert seen == [2]
    assert skipped_positions(seen, final) == [1]


def test_a_lower_position_cannot_commit_after_a_higher_one(postgres_dsn: str) -> None:
    """The same interleaving on the store: the second writer waits for the first's commit."""
    store = PostgresStore(postgres_dsn, schema=SCHEMA)
    holding = threading.Event()
    release = threading.Event()
    results: dict[str, Any] = {}

    def slow_writer() -> None:
        # An append inside a tracking transaction stays uncommitted until the block ends:
        # a writer that took its position and has not committed yet.
        with store.tracking("slow-writer"):
            (results["slow"],) = store.append("slow", [note(1)])
            holding.set()
            release.wait()

    def fast_writer() -> None:
        (results["fast"],) = store.append("fast", [note(2)])

    slow = threading.Thread(target=slow_writer)
    slow.start()
    holding.wait()
    fast = threading.Thread(target=fast_writer)
    fast.start()
    wait_for_lock_wait(postgres_dsn, "log_head")  # the fast writer queues for the lock
    seen = [e.position for e in store.read_log()]
    assert seen == []  # nothing committed, and nothing jumped ahead
    release.set()
    slow.join()
    fast.join()
    seen += [e.position for e in store.read_log(start=len(seen) + 1)]
    assert (results["slow"].position, results["fast"].position) == (1, 2)
    assert seen == [1, 2]
    store.close()


def _writer(dsn: str, worker: int, count: int, seed: int) -> int:
    """A writer process: random streams, batch sizes and delays, some slow commits."""
    rng = random.Random(seed)
    store = PostgresStore(dsn, schema=SCHEMA)
    written = 0
    try:
        while written < count:
            size = min(rng.randint(1, 4), count - written)
            events = [note(worker * 1_000_000 + written + i) for i in range(size)]
            stream = f"w{worker}-s{rng.randint(0, 3)}"
            if rng.random() < 0.3:
                # Hold the position uncommitted for a while: the gap bug's window.
                with store.tracking(f"writer-{worker}"):
                    store.append(stream, events)
                    time.sleep(rng.uniform(0, 0.004))
            else:
                store.append(stream, events)
            written += size
            time.sleep(rng.uniform(0, 0.002))
    finally:
        store.close()
    return written


def _tail(store: PostgresStore, done: Callable[[], bool]) -> Iterator[list[Position]]:
    """Read by position greater than the last one seen until the writers are done."""
    last = 0
    while True:
        finished = done()  # read once more after the writers finish, to catch up fully
        batch = [e.position for e in store.read_log(start=last + 1)]
        if batch:
            last = batch[-1]
            yield batch
        elif finished:
            return


def test_tailing_reader_sees_every_position_once_under_concurrent_writers(
    postgres_dsn: str,
) -> None:
    workers, count = 4, 150
    store = PostgresStore(postgres_dsn, schema=SCHEMA)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        pending = pool.starmap_async(
            _writer, [(postgres_dsn, w, count, 1000 + w) for w in range(workers)]
        )
        seen: list[int] = []
        subscription_seen: list[int] = []
        with store.subscribe(1, poll_interval=3600) as sub:
            for batch in _tail(store, pending.ready):
                assert batch[0] == (seen[-1] if seen else 0) + 1, "the reader jumped a position"
                assert batch == list(range(batch[0], batch[-1] + 1)), batch
                seen += batch
            assert pending.get() == [count] * workers
            while len(subscription_seen) < workers * count:
                event = sub.next_event(timeout=60)
                assert event is not None, "the subscription stalled"
                subscription_seen.append(event.position)
    total = workers * count
    final = [e.position for e in store.read_log()]
    assert final == list(range(1, total + 1))
    assert skipped_positions(seen, final) == []
    assert seen == final
    assert subscription_seen == final
    store.close()
