"""Group commit on every backend: shared commits, per-request outcomes, durability.

Each test runs on SQLite, JSONL and PostgreSQL (a real server, tests/pg.py). To put
requests into one group deterministically, a :class:`Gate` holds the committer inside the
commit of a first "plug" request while the others queue; the gate only delays the real
backend method, it never replaces it. Timeouts only stop a broken test from hanging.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest

from tests.conformance.suite import note
from tests.conformance.test_jsonl_conformance import flock_held_by_another_process
from tests.group_commit_harness import run_and_kill
from tests.pg import PgServer, crash_and_restart
from tracebound.errors import (
    ConcurrencyConflict,
    LedgerDamaged,
    StorageError,
    StoreBusy,
    StoreClosed,
)
from tracebound.events.envelope import RecordedEvent
from tracebound.ids import StreamId
from tracebound.integrity.keys import NoteSigner
from tracebound.ledger import MERKLE_NOT_COMPARED, Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.group_commit import GroupCommitError, GroupCommitter
from tracebound.store.jsonl import JsonlStore
from tracebound.store.port import NO_STREAM, AppendRequest, LedgerStore, MerkleNodeStore
from tracebound.store.postgres import PostgresStore
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.witness import FileWitness

GUARD = 60.0


@dataclass
class Backend:
    name: str
    open: Callable[..., Any]  # a new handle on the same store (keyword options per backend)
    url: str  # for a child process
    server: PgServer | None = None
    dsn: str = ""


@pytest.fixture(params=["sqlite", "jsonl", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        path = tmp_path / "store"
        return Backend("sqlite", lambda **kw: SQLiteStore(path, **kw), f"sqlite:///{path}")
    if request.param == "jsonl":
        path = tmp_path / "store"
        return Backend("jsonl", lambda **kw: JsonlStore(path, **kw), f"jsonl:///{path}")
    dsn: str = request.getfixturevalue("postgres_dsn")
    server: PgServer = request.getfixturevalue("postgres_server")
    url = server.url(dsn.rsplit("dbname=", 1)[1], schema="gc")
    return Backend("postgres", lambda **kw: PostgresStore(dsn, schema="gc", **kw), url, server, dsn)


@pytest.fixture
def committer(backend: Backend) -> Iterator[GroupCommitter[Any]]:
    gc: GroupCommitter[Any] = GroupCommitter(backend.open())
    yield gc
    gc.close()


class Gate:
    """Holds the committer in its next commit until :meth:`open`; records group sizes."""

    def __init__(self, committer: GroupCommitter[Any]) -> None:
        self.sizes: list[int] = []
        self.entered = threading.Event()
        self._release = threading.Event()
        self._armed = True
        inner = committer.store._append_prepared

        def held(batches: Sequence[Any]) -> Any:
            self.sizes.append(len(batches))
            if self._armed:
                self._armed = False
                self.entered.set()
                assert self._release.wait(GUARD)
            return inner(batches)

        cast(Any, committer.store)._append_prepared = held  # an instance patch

    def open(self) -> None:
        self._release.set()


def _queued(committer: GroupCommitter[Any], n: int) -> None:
    """Wait until ``n`` requests were ever queued (so submissions keep their order)."""
    deadline = time.monotonic() + GUARD
    while committer._core._queued < n:
        assert time.monotonic() < deadline, "a request never reached the queue"
        time.sleep(0.001)


def _in_order(
    committer: GroupCommitter[Any],
    pool: ThreadPoolExecutor,
    calls: Sequence[Callable[[], list[RecordedEvent]]],
) -> list[Future[list[RecordedEvent]]]:
    """Plug the committer, then queue ``calls`` one after the other (FIFO known)."""
    gate = Gate(committer)
    plug = pool.submit(committer.append, "plug", [note(999_999)])
    assert gate.entered.wait(GUARD)
    futures = []
    for i, call in enumerate(calls, start=2):
        futures.append(pool.submit(call))
        _queued(committer, i)
    gate.open()
    plug.result(GUARD)
    for f in futures:
        f.exception(GUARD)
    committer.gate_sizes = gate.sizes  # type: ignore[attr-defined]
    return futures


def _check_log(store: LedgerStore, acked: dict[str, int]) -> None:
    """Positions 1..n, every event once, every ack at its position, streams gap-free."""
    log = list(store.read_log())
    assert [e.position for e in log] == list(range(1, len(log) + 1))
    ids = Counter(str(e.event_id) for e in log)
    assert [k for k, n in ids.items() if n > 1] == []
    where = {str(e.event_id): e.position for e in log}
    missing = {k: v for k, v in acked.items() if where.get(k) != v}
    assert missing == {}, f"acknowledged but not there (id -> acked position): {missing}"
    versions: dict[str, int] = {}
    for e in log:
        assert e.stream_version == versions.get(e.stream_id, 0) + 1
        versions[e.stream_id] = e.stream_version


# -- many threads -----------------------------------------------------------------------------


def test_threads_share_commits_and_every_ack_is_there_once(
    committer: GroupCommitter[Any], tmp_path: Path
) -> None:
    threads, per_thread = 8, 25
    acked: dict[str, int] = {}
    conflicts = Counter[int]()
    lock = threading.Lock()

    def work(t: int) -> None:
        for i in range(per_thread):
            (own,) = committer.append(f"own-{t}", [note(t * 1000 + i)])
            while True:  # optimistic concurrency on one contended stream, inside groups
                head = committer.stream_head("shared")
                version = 0 if head is None else head.version
                try:
                    (shared,) = committer.append(
                        "shared", [note(500_000 + t * 1000 + i)], expected_version=version
                    )
                    break
                except ConcurrencyConflict:
                    conflicts[t] += 1
            with lock:
                acked[str(own.event_id)] = own.position
                acked[str(shared.event_id)] = shared.position

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(GUARD)
    assert len(acked) == 2 * threads * per_thread
    _check_log(committer, acked)
    assert committer.size() == 2 * threads * per_thread
    shared = list(committer.read_stream("shared"))
    assert [e.stream_version for e in shared] == list(range(1, threads * per_thread + 1))

    signer = NoteSigner("gc-test", bytes(range(32)))
    ledger = Ledger(
        committer,
        clock=FixedClock(),
        ids=SequentialIds(),
        signer=signer,
        witness=FileWitness(tmp_path / "outside" / "witness.note", origin="gc.test/log"),
        origin="gc.test/log",
    )
    ledger.checkpoint()
    report = ledger.verify()
    assert report.ok, report.as_dict()
    assert report.size == 2 * threads * per_thread


def test_queued_requests_share_one_commit(committer: GroupCommitter[Any]) -> None:
    with ThreadPoolExecutor(12) as pool:
        calls = [(lambda i=i: committer.append(f"s{i % 3}", [note(i)])) for i in range(10)]
        futures = _in_order(committer, pool, calls)
    assert committer.gate_sizes == [1, 10]  # plug, then all
    positions = [f.result()[0].position for f in futures]
    assert positions == list(range(2, 12))  # FIFO: queue order is position order
    # What each caller got back is exactly what the store recorded.
    assert [f.result()[0] for f in futures] == list(committer.read_log(start=2))
    _check_log(committer, {})


# -- per-request outcomes ---------------------------------------------------------------------


def test_a_conflict_fails_only_its_own_request(committer: GroupCommitter[Any]) -> None:
    committer.append("s", [note(1)])  # s is at version 1
    with ThreadPoolExecutor(8) as pool:
        futures = _in_order(
            committer,
            pool,
            [
                lambda: committer.append("s", [note(2)], expected_version=1),  # ok: v2
                lambda: committer.append("s", [note(3)], expected_version=1),  # conflict
                lambda: committer.append("t", [note(4)], expected_version=NO_STREAM),  # ok
                lambda: committer.append_batch(  # conflict on u: t is not written either
                    [
                        AppendRequest(StreamId("t"), [note(5)], 1),
                        AppendRequest(StreamId("u"), [note(6)], 7),
                    ]
                ),
                lambda: committer.append("s", [note(7)], expected_version=2),  # ok: v3
            ],
        )
    assert committer.gate_sizes == [1, 5]  # one group
    ok2, bad3, ok4, bad56, ok7 = futures
    assert [(e.stream_version, e.position) for e in ok2.result()] == [(2, 3)]
    err = bad3.exception()
    assert isinstance(err, ConcurrencyConflict)
    assert (err.stream_id, err.expected, err.actual) == ("s", 1, 2)
    assert [(e.stream_id, e.position) for e in ok4.result()] == [("t", 4)]
    err = bad56.exception()
    assert isinstance(err, ConcurrencyConflict)
    assert (err.stream_id, err.expected, err.actual) == ("u", 7, 0)
    assert [(e.stream_version, e.position) for e in ok7.result()] == [(3, 5)]
    assert [e.event_id for e in committer.read_log()] == [
        note(n).event_id for n in (1, 999_999, 2, 4, 7)
    ]
    assert committer.stream_head("u") is None
    head = committer.stream_head("t")
    assert head is not None and head.version == 1
    _check_log(committer, {})


def test_a_failed_commit_fails_every_request_of_the_group(backend: Backend, tmp_path: Path) -> None:
    """A real failure in the group's commit: each request gets a typed error, none lands."""
    if backend.name == "sqlite":
        store = backend.open(busy_timeout=0.2)
    elif backend.name == "postgres":
        store = backend.open(lock_timeout=0.2)
    else:
        store = backend.open()
    committer: GroupCommitter[Any] = GroupCommitter(store)
    committer.append("s", [note(1)])
    blocker = _Blocker(backend, tmp_path)
    with ThreadPoolExecutor(8) as pool:
        gate = Gate(committer)
        first = pool.submit(committer.append, "s", [note(2)])
        assert gate.entered.wait(GUARD)
        blocker.start()  # the plug's commit and the group's both fail
        rest = []
        for i in range(5):
            rest.append(pool.submit(committer.append, f"x{i}", [note(10 + i)]))
            _queued(committer, 3 + i)
        gate.open()
        errors = [f.exception(GUARD) for f in [first, *rest]]
    assert gate.sizes[-1] == 5  # the five shared one (failed) commit
    for err in errors:
        assert isinstance(err, GroupCommitError), err
        assert isinstance(err, StorageError)
        assert isinstance(err.__cause__, LedgerDamaged if backend.name == "jsonl" else Exception)
    assert len({id(e) for e in errors}) == len(errors)  # one error object per caller
    blocker.stop()
    if backend.name != "jsonl":  # the torn tail stays until `tracebound repair`
        assert committer.size() == 1
        (rec,) = committer.append("s", [note(3)])
        assert (rec.position, rec.stream_version) == (2, 2)
    committer.close()


def test_a_busy_group_commit_raises_store_busy(backend: Backend, tmp_path: Path) -> None:
    """Another session holding the write lock past the timeout: each caller of the group
    gets a StoreBusy (``except StoreBusy`` works through group commit, as on the store
    itself), which is still a GroupCommitError; nothing is written, and the next append,
    once the lock is let go, lands where it should."""
    timeout = {"sqlite": "busy_timeout", "postgres": "lock_timeout"}.get(backend.name)
    store = backend.open(**{timeout or "lock_timeout": 0.2})
    committer: GroupCommitter[Any] = GroupCommitter(store)
    committer.append("s", [note(1)])
    with _write_lock_held(backend, tmp_path), ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(committer.append, f"x{i}", [note(10 + i)]) for i in range(3)]
        errors = [f.exception(GUARD) for f in futures]
    for err in errors:
        assert isinstance(err, StoreBusy), err
        assert isinstance(err, GroupCommitError)
        assert isinstance(err.__cause__, StoreBusy)
        assert err.waited == 0.2
        assert err.store == err.__cause__.store
    assert len({id(e) for e in errors}) == len(errors)  # one error object per caller
    assert committer.size() == 1
    (rec,) = committer.append("s", [note(2)])
    assert (rec.position, rec.stream_version) == (2, 2)
    committer.close()


@contextmanager
def _write_lock_held(backend: Backend, tmp_path: Path) -> Iterator[None]:
    """Another session holds the store's write lock until the block ends."""
    if backend.name == "jsonl":
        with flock_held_by_another_process(tmp_path / "store" / "lock"):
            yield
        return
    blocker = _Blocker(backend, tmp_path)
    blocker.start()
    try:
        yield
    finally:
        blocker.stop()


class _Blocker:
    """Makes the backend's next commits fail for real: a held write lock or a torn tail."""

    def __init__(self, backend: Backend, tmp_path: Path) -> None:
        self.backend = backend
        self.path = tmp_path / "store"
        self._conn: Any = None

    def start(self) -> None:
        if self.backend.name == "sqlite":
            self._conn = sqlite3.connect(self.path / "ledger.db", isolation_level=None)
            self._conn.execute("BEGIN IMMEDIATE")  # SQLite's one write lock, held
        elif self.backend.name == "postgres":
            self._conn = psycopg.connect(self.backend.dsn)
            self._conn.execute('SELECT position FROM "gc"."log_head" FOR UPDATE')
        else:
            with (self.path / "log.jsonl").open("ab") as f:
                f.write(b'{"batch":[9,9],"hash":"')  # what a crash mid-write leaves

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.rollback()
            self._conn.close()


class _Interrupted(Exception):
    pass


def test_an_interrupted_waiter_does_not_stall_its_group(committer: GroupCommitter[Any]) -> None:
    """Threads of a group wake each other in turn; one interrupted while it waited (here:
    the main thread, by a signal) must not leave the ones after it waiting forever."""
    if threading.current_thread() is not threading.main_thread():
        pytest.fail("signals reach only the main thread; run this test there")

    def interrupt(signum: int, frame: Any) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    with ThreadPoolExecutor(4) as pool:
        gate = Gate(committer)
        plug = pool.submit(committer.append, "plug", [note(0)])
        assert gate.entered.wait(GUARD)
        later: list[Future[list[RecordedEvent]]] = []

        def queue_after_main() -> None:
            _queued(committer, 2)  # the main thread's request is queued first
            later.append(pool.submit(committer.append, "s", [note(2)]))
            _queued(committer, 3)
            later.append(pool.submit(committer.append, "s", [note(3)]))
            _queued(committer, 4)

        helper = pool.submit(queue_after_main)
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        try:
            with pytest.raises(_Interrupted):
                committer.append("m", [note(1)])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        helper.result(GUARD)
        assert committer._core._queued == 4  # the others were queued behind it when it left
        gate.open()
        plug.result(GUARD)
        results = [f.result(GUARD) for f in later]
    assert [r[0].position for r in results] == [3, 4]
    assert gate.sizes == [1, 3]
    # The interrupted caller stopped waiting; its append was committed all the same.
    assert [e.stream_id for e in committer.read_log()] == ["plug", "m", "s", "s"]
    committer.append("s", [note(4)])  # and the committer carries on


# -- asyncio ----------------------------------------------------------------------------------


def test_asyncio_tasks_share_commits(committer: GroupCommitter[Any]) -> None:
    tasks, per_task = 24, 6

    async def main() -> tuple[dict[str, int], int]:
        acked: dict[str, int] = {}
        conflicts = 0

        async def work(t: int) -> None:
            nonlocal conflicts
            for i in range(per_task):
                (rec,) = await committer.append_async(f"task-{t % 5}", [note(t * 100 + i)])
                acked[str(rec.event_id)] = rec.position
            try:  # every task claims the same fresh stream: exactly one wins
                (rec,) = await committer.append_async(
                    "claim", [note(90_000 + t)], expected_version=NO_STREAM
                )
                acked[str(rec.event_id)] = rec.position
            except ConcurrencyConflict:
                conflicts += 1

        await asyncio.wait_for(asyncio.gather(*(work(t) for t in range(tasks))), GUARD)
        return acked, conflicts

    before = committer.groups
    acked, conflicts = asyncio.run(main())
    assert len(acked) == tasks * per_task + 1
    assert conflicts == tasks - 1
    _check_log(committer, acked)
    # Tasks on one loop queue together: fewer commits than appends.
    assert committer.groups - before < tasks * (per_task + 1)


_Got = list[RecordedEvent] | BaseException  # one asyncio.gather(return_exceptions=True) outcome


def test_asyncio_conflict_and_order_with_threads(committer: GroupCommitter[Any]) -> None:
    """Tasks and threads mix in the same groups; a task's conflict is its own."""
    committer.append("s", [note(1)])

    async def main() -> tuple[_Got, _Got, _Got]:
        return await asyncio.gather(
            committer.append_async("s", [note(2)], expected_version=1),
            committer.append_async("s", [note(3)], expected_version=0),
            asyncio.to_thread(committer.append, "t", [note(4)]),
            return_exceptions=True,
        )

    ok, conflict, threaded = asyncio.run(main())
    assert isinstance(ok, list)
    assert isinstance(threaded, list)
    assert [e.stream_version for e in ok] == [2]
    assert isinstance(conflict, ConcurrencyConflict)
    assert (conflict.expected, conflict.actual) in {(0, 1), (0, 2)}
    assert [e.stream_id for e in threaded] == ["t"]
    _check_log(committer, {})


def test_a_cancelled_task_stops_waiting_but_its_queued_append_commits(
    committer: GroupCommitter[Any],
) -> None:
    """A request handler cancelled (or timed out by asyncio.wait_for) while its append is
    queued: the append is committed all the same, as documented; the others of its group
    get their own answers, no waiter is left counted, and the committer carries on."""
    with ThreadPoolExecutor(2) as pool:
        gate = Gate(committer)
        plug = pool.submit(committer.append, "plug", [note(0)])
        assert gate.entered.wait(GUARD)

        async def main() -> list[_Got]:
            tasks = [asyncio.create_task(committer.append_async("s", [note(i)])) for i in (1, 2, 3)]
            await asyncio.sleep(0)  # each task queues its request, then awaits its outcome
            assert committer._core._queued == 4
            tasks[1].cancel()
            gate.open()
            return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), GUARD)

        first, cancelled, third = asyncio.run(main())
        plug.result(GUARD)
    assert isinstance(cancelled, asyncio.CancelledError)
    assert isinstance(first, list)
    assert isinstance(third, list)
    assert [first[0].position, third[0].position] == [2, 4]
    assert gate.sizes == [1, 3]  # the cancelled request stayed in its group
    log = list(committer.read_log())
    assert [(e.stream_id, e.position) for e in log] == [("plug", 1), ("s", 2), ("s", 3), ("s", 4)]
    assert committer._core._waking == 0  # nobody is left counted as on its way back
    (after,) = asyncio.run(committer.append_async("s", [note(4)]))
    assert after.stream_version == 4


# -- limits, close ----------------------------------------------------------------------------


def test_group_limits_keep_batches_whole_and_fifo(backend: Backend) -> None:
    committer: GroupCommitter[Any] = GroupCommitter(backend.open(), max_group_events=3)
    sizes = [1, 1, 1, 1, 5, 1]
    with ThreadPoolExecutor(8) as pool:
        calls = [
            (lambda i=i, n=n: committer.append(f"s{i}", [note(i * 10 + k) for k in range(n)]))
            for i, n in enumerate(sizes)
        ]
        futures = _in_order(committer, pool, calls)
    # plug; three 1-event requests fill a group; the next one is alone because the 5-event
    # batch after it would overflow; the 5-event batch goes alone, whole; then the last.
    assert committer.gate_sizes == [1, 3, 1, 1, 1]
    firsts = [f.result()[0].position for f in futures]
    assert firsts == [2, 3, 4, 5, 6, 11]
    assert [e.position for e in futures[4].result()] == [6, 7, 8, 9, 10]
    _check_log(committer, {})
    committer.close()


def test_a_full_queue_makes_callers_wait(backend: Backend) -> None:
    committer: GroupCommitter[Any] = GroupCommitter(
        backend.open(), max_group_events=2, max_pending_events=2
    )
    with ThreadPoolExecutor(8) as pool:
        gate = Gate(committer)
        plug = pool.submit(committer.append, "plug", [note(0)])
        assert gate.entered.wait(GUARD)
        queued = [pool.submit(committer.append, "s", [note(i)]) for i in (1, 2)]
        _queued(committer, 3)
        late = pool.submit(committer.append, "s", [note(3)])
        time.sleep(0.2)  # ample time to queue, were there room: there is not
        assert committer._core._queued == 3
        assert committer._core._pending_events == 2
        gate.open()
        for f in [plug, *queued, late]:
            f.result(GUARD)
    assert committer.size() == 4
    committer.close()


def test_close_commits_what_is_queued_then_refuses(backend: Backend) -> None:
    committer: GroupCommitter[Any] = GroupCommitter(backend.open())
    with ThreadPoolExecutor(8) as pool:
        gate = Gate(committer)
        plug = pool.submit(committer.append, "plug", [note(0)])
        assert gate.entered.wait(GUARD)
        queued = []
        for i in range(4):
            queued.append(pool.submit(committer.append, "s", [note(i + 1)]))
            _queued(committer, 2 + i)
        closing = pool.submit(committer.close)
        deadline = time.monotonic() + GUARD
        while not committer._core._closing:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        with pytest.raises(StoreClosed):
            committer.append("s", [note(9)])  # refused once close has begun
        gate.open()
        closing.result(GUARD)
        results = [f.result(GUARD) for f in [plug, *queued]]
    assert [r[0].position for r in results] == [1, 2, 3, 4, 5]
    with pytest.raises(StoreClosed):
        committer.append("s", [note(10)])
    with pytest.raises(StoreClosed):
        asyncio.run(committer.append_async("s", [note(11)]))
    with pytest.raises(StoreClosed):
        committer.size()  # the store was closed with it
    again = backend.open()
    try:
        assert again.size() == 5
    finally:
        again.close()


def test_flush_waits_for_every_queued_outcome(committer: GroupCommitter[Any]) -> None:
    with ThreadPoolExecutor(4) as pool:
        gate = Gate(committer)
        plug = pool.submit(committer.append, "plug", [note(0)])
        assert gate.entered.wait(GUARD)
        f = pool.submit(committer.append, "s", [note(1)])
        _queued(committer, 2)
        flushing = pool.submit(committer.flush)
        time.sleep(0.05)
        assert not flushing.done()  # the plug's group is held, so the flush waits
        gate.open()
        flushing.result(GUARD)
        assert committer.size() == 2  # both committed by the time flush returns
        assert [r[0].position for r in (plug.result(GUARD), f.result(GUARD))] == [1, 2]


def test_the_committer_is_a_ledger_store(committer: GroupCommitter[Any]) -> None:
    assert isinstance(committer, LedgerStore)
    ledger = Ledger(committer, clock=FixedClock(), ids=SequentialIds())
    recorded = ledger.record("run-1", [note(1).payload, note(2).payload])
    assert [e.position for e in recorded] == [1, 2]
    assert [e.position for e in committer.read_stream("run-1")] == [1, 2]
    committer.set_meta("k", "v")
    assert committer.get_meta("k") == "v"
    assert isinstance(committer, MerkleNodeStore)
    committer.add_merkle_nodes(1, 0, [b"\x01" * 32])
    assert committer.merkle_node_count(1) == 1
    assert committer.merkle_nodes(1, 0, 2) == [b"\x01" * 32]
    assert committer.read_hashes(1, 2) == [e.hash for e in recorded]
    committer.drop_merkle_nodes()
    assert committer.merkle_node_count(1) == 0


# -- durability -------------------------------------------------------------------------------


@pytest.mark.slow
def test_sigkill_right_after_acks_loses_nothing(backend: Backend, tmp_path: Path) -> None:
    if backend.name != "postgres":
        backend.open().close()  # create the store before the child opens it by URL
    else:
        PostgresStore(backend.dsn, schema="gc").close()
    result = run_and_kill(backend.url, tmp_path / "acks.jsonl", threads=8, acks=400)
    assert len(result.acked) >= 400, result.stderr
    if backend.server is not None:
        crash_and_restart(backend.server)  # and a power cut: only what was flushed remains
    store = backend.open()
    try:
        if backend.name == "jsonl":  # a kill mid-write may leave a torn tail, never more
            tails = store.torn_tails()
            if tails:
                store.repair(now=datetime(2026, 6, 2, tzinfo=UTC))
        _check_log(store, result.acked)
        report = Ledger(store, clock=FixedClock(), ids=SequentialIds()).verify(require_signed=False)
        assert report.damage is None, report.as_dict()
        assert {k: report.checks[k] for k in ("chain", "positions", "merkle")} == {
            "chain": "ok",
            "positions": "ok",
            "merkle": MERKLE_NOT_COMPARED,  # no key, no checkpoint: nothing signed to compare
        }
        assert report.size >= len(result.acked)
    finally:
        store.close()


# -- who commits (leader/follower) ------------------------------------------------------------


class _Committers:
    """Records which thread runs each commit (the real backend method still runs)."""

    def __init__(self, committer: GroupCommitter[Any]) -> None:
        self.threads: list[threading.Thread] = []
        self.sizes: list[int] = []
        inner = committer.store._append_prepared

        def spy(batches: Sequence[Any]) -> Any:
            self.threads.append(threading.current_thread())
            self.sizes.append(len(batches))
            return inner(batches)

        cast(Any, committer.store)._append_prepared = spy  # an instance patch


def test_an_appending_thread_commits_its_group_itself(
    backend: Backend, committer: GroupCommitter[Any]
) -> None:
    """No commit under way and nobody to wait for: the appending thread leads (no hand-off
    to the committer thread); requests queued meanwhile are left to the committer thread.
    PostgreSQL's connections are per thread, so there the committer thread commits all."""
    with ThreadPoolExecutor(12) as pool:
        gate = Gate(committer)
        seen = _Committers(committer)
        plug = pool.submit(committer.append, "plug", [note(0)])
        assert gate.entered.wait(GUARD)
        queued = []
        for i in range(5):
            queued.append(pool.submit(committer.append, f"s{i}", [note(i + 1)]))
            _queued(committer, 2 + i)
        gate.open()
        results = [f.result(GUARD) for f in [plug, *queued]]
    assert [r[0].position for r in results] == [1, 2, 3, 4, 5, 6]
    assert seen.sizes == [1, 5]
    plug_thread, leftover_thread = seen.threads
    if backend.name == "postgres":
        assert plug_thread is leftover_thread is committer._core._thread
    else:
        assert plug_thread is not committer._core._thread  # the plug's own (pool) thread
        assert plug_thread is not threading.main_thread()
        assert leftover_thread is committer._core._thread  # the leader does not keep its caller
    _check_log(committer, {})


def test_threads_appending_in_a_loop_lead_their_own_groups(
    backend: Backend, committer: GroupCommitter[Any]
) -> None:
    seen = _Committers(committer)
    threads, per_thread = 6, 30

    def work(t: int) -> None:
        for i in range(per_thread):
            committer.append(f"own-{t}", [note(t * 1000 + i)], expected_version=i)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(GUARD)
    assert committer.size() == threads * per_thread
    assert sum(seen.sizes) == threads * per_thread
    led = [t for t in seen.threads if t is not committer._core._thread]
    if backend.name == "postgres":
        assert led == []
    else:
        assert set(led) <= set(workers)  # only ever the appenders themselves...
        assert len(led) > len(seen.threads) // 2  # ...and they led most groups
    _check_log(committer, {})


def test_the_main_thread_and_tasks_never_lead(committer: GroupCommitter[Any]) -> None:
    """Signals run in the main thread, and an event loop must not wait for an fsync: their
    groups are committed by the committer thread."""
    seen = _Committers(committer)
    (rec,) = committer.append("main", [note(1)])
    assert rec.position == 1

    async def main() -> None:
        await committer.append_async("task", [note(2)])

    asyncio.run(main())
    assert seen.threads == [committer._core._thread, committer._core._thread]


def test_a_gathering_thread_leads_when_the_others_do_not_come_back(backend: Backend) -> None:
    """A caller woken with its outcome but not yet running again counts as *waking*; a thread
    appending meanwhile waits for it at most ``max_delay``, then commits by itself."""
    committer: GroupCommitter[Any] = GroupCommitter(backend.open(), max_delay=0.05)
    seen = _Committers(committer)
    try:
        with committer._core._lock:
            committer._core._waking += 1  # a caller of the last group that never comes back
        started = time.monotonic()
        done = ThreadPoolExecutor(1).submit(committer.append, "s", [note(1)])
        (rec,) = done.result(GUARD)
        waited = time.monotonic() - started
        assert rec.position == 1
        assert waited >= 0.05
        assert (seen.threads[0] is committer._core._thread) == (backend.name == "postgres")
        with committer._core._lock:
            committer._core._waking -= 1
    finally:
        committer.close()
    assert not committer._core._thread.is_alive()  # close stops the committer: no thread left


def test_sqlite_appends_from_many_threads_share_one_writer(tmp_path: Path) -> None:
    """Group commit's leader is whichever thread arrived last; the store writes through one
    connection whatever the thread, so what it knows of the heads survives the change."""
    store = SQLiteStore(tmp_path / "store")
    committer: GroupCommitter[Any] = GroupCommitter(store)
    try:
        with ThreadPoolExecutor(2) as pool:
            pool.submit(committer.append, "a", [note(1)]).result(GUARD)
            writer = store._writer_conn
            pool.submit(committer.append, "b", [note(2)]).result(GUARD)
            committer.append("a", [note(3)], expected_version=1)
        assert store._writer_conn is writer and writer is not None
        assert set(writer.heads) == {"a", "b"}
        assert writer.position == 3
    finally:
        committer.close()
