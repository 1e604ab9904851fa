"""The SQLite store's append path: its settings, its writer connection (the C kernel's
`Writer` or `_PyWriter`, both run here), the single-row autocommit INSERT and its fallback,
error translation."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracebound.canonical import canonical_bytes
from tracebound.errors import ConcurrencyConflict, StorageError
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.events.envelope import Event
from tracebound.ids import StepId, StreamId
from tracebound.integrity.chain import GENESIS
from tracebound.store import sqlite as sqlite_module
from tracebound.store._chaining import Prepared, prepare_requests
from tracebound.store.port import ANY_VERSION, AppendRequest
from tracebound.store.sqlite import _WAL_AUTOCHECKPOINT, SQLiteStore, _PyWriter

needs_kernel = pytest.mark.skipif(
    sqlite_module._KernelWriter is None,
    reason="the C kernel is not built (or TRACEBOUND_PURE_PYTHON is set)",
)


def _event(n: int, *, step_id: str | None = None, workflow_id: str | None = None) -> Event:
    return Event.create(
        CostIncurred(
            tier="direct",
            amount_usd=Decimal(n),
            source=CostSource("s"),
            tokens_in=n,
            tokens_out=1,
            model="m",
            role="Executor",
            step_id=StepId(step_id or f"step-{n}"),
        ),
        event_id=UUID(int=n + 1),
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        workflow_id=workflow_id,
    )


@pytest.fixture(params=["kernel", "python"])
def writer_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the C kernel's Writer and again with the pysqlite one."""
    if request.param == "python":
        monkeypatch.setattr(sqlite_module, "_KernelWriter", None)
    elif sqlite_module._KernelWriter is None:
        pytest.skip("the C kernel is not built (or TRACEBOUND_PURE_PYTHON is set)")
    return str(request.param)


class _Spy:
    """Records the writer methods an append calls, and calls them."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.db, name)

        def call(*args: Any) -> Any:
            self.calls.append(name if name != "exec" else f"exec {args[0]}")
            return method(*args)

        return call


def _spy(store: SQLiteStore) -> list[str]:
    """Record the writer calls of ``store``'s appends from here on."""
    state = store._writer()
    spy = _Spy(state.db)
    state.db = spy
    return spy.calls


def test_connections_checkpoint_every_wal_autocheckpoint_pages(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        (pages,) = store._conn().execute("PRAGMA wal_autocheckpoint").fetchone()
        # SQLite's default: a short WAL is overwritten in place sooner (sqlite.py)
        assert pages == _WAL_AUTOCHECKPOINT == 1000
        # the writer runs the same settings, whichever writer it is
        assert f"PRAGMA wal_autocheckpoint={_WAL_AUTOCHECKPOINT};" in store._setup_sql()
        assert "PRAGMA synchronous=FULL;" in store._setup_sql()


def test_the_writer_runs_the_store_settings(tmp_path: Path, writer_kind: str) -> None:
    with SQLiteStore(tmp_path / "s", synchronous="EXTRA") as store:
        db = store._writer().db
        # the kernel writer checkpoints at the same size, deferred (SQLite's own is off)
        want = 0 if writer_kind == "kernel" else _WAL_AUTOCHECKPOINT
        assert db.int_query("PRAGMA wal_autocheckpoint") == want
        assert db.int_query("PRAGMA synchronous") == 3  # EXTRA: as asked, not the default
        assert db.int_query("PRAGMA foreign_keys") == 1
        assert db.int_query("PRAGMA busy_timeout") == 60_000


def test_the_kernel_writer_is_used_when_built(tmp_path: Path, writer_kind: str) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        db = store._writer().db
        assert isinstance(db, _PyWriter) == (writer_kind == "python")


@needs_kernel
def test_both_writers_store_the_same_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same appends through either writer leave byte-identical tables."""
    tables = []
    for kind in ("kernel", "python"):
        if kind == "python":
            monkeypatch.setattr(sqlite_module, "_KernelWriter", None)
        with SQLiteStore(tmp_path / kind) as store:
            store.append("a", [_event(1)])
            store.append("a", [_event(2)])  # the autocommit row
            store.append("b", [_event(3), _event(4)])
            with_wf = _event(99, step_id="é-ünïcode-🚀", workflow_id="wf-ü")
            store.append("c-ü", [with_wf, _event(5)])
            rows = store._conn().execute("SELECT * FROM events ORDER BY position").fetchall()
            tables.append(rows)
    assert tables[0] == tables[1]
    assert len(tables[0]) == 6
    assert any(row[4] is None for row in tables[0]) and any(row[4] == "wf-ü" for row in tables[0])


def test_single_and_batched_appends_share_the_writer(tmp_path: Path, writer_kind: str) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        one = store.append("a", [_event(1)])
        many = store.append("a", [_event(2), _event(3)], expected_version=1)
        assert [e.position for e in one + many] == [1, 2, 3]
        assert [e.stream_version for e in one + many] == [1, 2, 3]
        assert many[0].prev_hash == one[0].hash
        assert store.stream_head("a") == (3, many[-1].hash)


def test_sqlite_errors_in_the_append_transaction_are_storage_errors(
    tmp_path: Path, writer_kind: str
) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        store.append("a", [_event(1)])
        # Another connection makes the insert fail inside the transaction (a trigger that
        # aborts): the append must raise the package's StorageError, roll back, and the
        # store must keep working once the cause is gone.
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'no'); END"
        )
        with pytest.raises(StorageError, match="sqlite append failed") as caught:
            store.append("a", [_event(2), _event(3)])
        assert "no" in str(caught.value)
        assert isinstance(caught.value.__cause__, sqlite_module._WRITE_ERRORS)
        assert not store._writer().db.in_transaction()  # rolled back
        with pytest.raises(StorageError, match="sqlite append failed"):
            store.append("a", [_event(2)])  # the single-row path, then the transaction
        other.execute("DROP TRIGGER refuse")
        other.close()
        (again,) = store.append("a", [_event(3)], expected_version=1)
        assert (again.position, again.stream_version) == (2, 2)
        assert store.size() == 2


def test_one_event_onto_a_known_head_is_a_single_autocommit_insert(
    tmp_path: Path, writer_kind: str
) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        store.append("a", [_event(1)])  # the transaction: learns the head of "a"
        calls = _spy(store)
        (second,) = store.append("a", [_event(2)], expected_version=1)
        assert calls == ["in_transaction", "insert"]  # no BEGIN, data_version or COMMIT
        assert (second.position, second.stream_version) == (2, 2)
        calls.clear()
        store.append("b", [_event(3)])  # a stream it has not seen: the transaction
        assert calls[:3] == ["exec BEGIN IMMEDIATE", "data_version", "head"]
        assert calls[-1] == "exec COMMIT"
        calls.clear()
        store.append("a", [_event(4), _event(5)])  # two rows: the transaction
        assert calls == ["exec BEGIN IMMEDIATE", "data_version", "insert", "exec COMMIT"]
        assert not store._writer().db.in_transaction()
    with SQLiteStore(tmp_path / "s") as reopened:  # durable: another connection sees it all
        assert [e.position for e in reopened.read_log()] == [1, 2, 3, 4, 5]
        assert reopened.stream_head("a") == (4, list(reopened.read_stream("a"))[-1].hash)


def test_a_stale_head_sends_the_single_append_through_the_transaction(
    tmp_path: Path, writer_kind: str
) -> None:
    """Another connection appends between two appends of this one: the cached head is
    stale, the INSERT meets that connection's position, and the append chains onto the
    real head instead."""
    with SQLiteStore(tmp_path / "s") as mine, SQLiteStore(tmp_path / "s") as theirs:
        (first,) = mine.append("a", [_event(1)])
        (between,) = theirs.append("a", [_event(2)], expected_version=1)
        calls = _spy(mine)
        (after,) = mine.append("a", [_event(3)])  # the cache says version 1, position 1
        assert calls[:3] == ["in_transaction", "insert", "exec BEGIN IMMEDIATE"]
        assert (after.position, after.stream_version) == (3, 3)
        assert after.prev_hash == between.hash != first.hash
        state = mine._writer()
        assert state.solo_off == state.SOLO_BACKOFF  # a few appends skip the attempt
        theirs.append("a", [_event(4)], expected_version=3)
        with pytest.raises(ConcurrencyConflict) as conflict:
            mine.append("a", [_event(5)], expected_version=3)
        assert (conflict.value.expected, conflict.value.actual) == (3, 4)
    with SQLiteStore(tmp_path / "s") as store:
        events = list(store.read_log())
        assert [(e.position, e.stream_version) for e in events] == [(1, 1), (2, 2), (3, 3), (4, 4)]
        assert all(b.prev_hash == a.hash for a, b in pairwise(events))


def test_a_conflict_against_the_cached_head_is_checked_in_the_transaction(
    tmp_path: Path, writer_kind: str
) -> None:
    """The cache says version 1 but the stream is at 2: ``expected_version=2`` is right,
    and must not be refused on the cache's word."""
    with SQLiteStore(tmp_path / "s") as mine, SQLiteStore(tmp_path / "s") as theirs:
        mine.append("a", [_event(1)])
        theirs.append("a", [_event(2)])
        calls = _spy(mine)
        (ok,) = mine.append("a", [_event(3)], expected_version=2)
        assert ok.stream_version == 3
        assert "insert" not in calls[: calls.index("exec BEGIN IMMEDIATE")]  # not tried


@needs_kernel
def test_the_kernel_writer_refuses_rows_it_was_not_written_for(tmp_path: Path) -> None:
    """Rows of the wrong shape are a TypeError before anything is inserted."""
    kernel_writer = sqlite_module._KernelWriter
    assert kernel_writer is not None  # needs_kernel
    with SQLiteStore(tmp_path / "s") as store:
        (rec,) = store.append("a", [_event(1)])
        db = kernel_writer(str(store.path), 1000, store._setup_sql())
        try:
            good = (2, "a", 2, "t", None, "2026", 1, rec.hash, b"h" * 32, b"{}")
            for bad in (
                [good, (*good[:7], bytearray(32), *good[8:])],  # bytearray, not bytes
                [good, good[:9]],  # short
                [good, (2.0, *good[1:])],  # a float position
                (good,),  # not a list
            ):
                with pytest.raises(TypeError):
                    db.insert(bad)
            assert store.size() == 1  # the good row before the bad one was not inserted
            with pytest.raises(OverflowError):
                db.insert([(2**63, *good[1:])])
            with pytest.raises(sqlite_module._CONSTRAINT_ERRORS, match="UNIQUE"):
                db.insert([(1, *good[1:])])  # position 1 is taken
            assert db.head("a") == (1, rec.hash)
            assert db.head("nope") is None
            assert db.last_position() == 1
        finally:
            db.close()
        with pytest.raises(sqlite_module._WRITE_ERRORS, match="closed"):
            db.last_position()


def test_a_writer_that_cannot_open_is_a_storage_error(
    tmp_path: Path, writer_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        # the writer connection opens on the first append; make its setup fail
        monkeypatch.setattr(store, "_setup_sql", lambda: "PRAGMA no_such_thing = (;")
        with pytest.raises(StorageError, match="sqlite"):
            store.append("a", [_event(1)])


_cell = st.one_of(
    st.none(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=8),
    st.binary(max_size=40),
    st.floats(allow_nan=False),
    st.builds(bytearray, st.binary(max_size=4)),
)


@needs_kernel
@given(rows=st.lists(st.one_of(st.tuples(*[_cell] * 10), st.lists(_cell, max_size=11)), max_size=4))
@settings(max_examples=300, deadline=None)
def test_the_kernel_writer_never_crashes_on_rows_of_any_shape(
    tmp_path_factory: Any, rows: Any
) -> None:
    """Whatever the rows hold, ``insert`` returns or raises a Python exception (here inside
    a transaction that is rolled back): never a crash, never a half-bound row."""
    kernel_writer = sqlite_module._KernelWriter
    assert kernel_writer is not None  # needs_kernel
    directory = tmp_path_factory.mktemp("fuzz")
    SQLiteStore(directory).close()
    db = kernel_writer(str(directory / "ledger.db"), 1000, "")
    try:
        db.exec("BEGIN IMMEDIATE")
        try:
            db.insert(rows)
        except (TypeError, OverflowError, UnicodeEncodeError, *sqlite_module._WRITE_ERRORS):
            pass
        db.exec("ROLLBACK")
        assert db.last_position() == 0
    finally:
        db.close()


class _Sid(str):
    """A str subclass, as a caller's own id type may be."""


def test_str_subclass_ids_are_stored_as_text(tmp_path: Path, writer_kind: str) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        store.append(_Sid("a"), [_event(1), _event(2)])
        (one,) = store.append(_Sid("a"), [_event(3)])
        assert (one.position, one.stream_version) == (3, 3)
        assert [e.stream_id for e in store.read_stream("a")] == ["a", "a", "a"]
        (kind,) = store._conn().execute("SELECT DISTINCT typeof(stream_id) FROM events").fetchone()
        assert kind == "text"


def _big_batch(first: int) -> list[AppendRequest]:
    """Three streams, one of them twice, across several chunks: 700 events."""
    n = iter(range(first, first + 10_000))
    return [
        AppendRequest(StreamId("big"), [_event(next(n)) for _ in range(300)], 0),
        AppendRequest(StreamId("other"), [_event(next(n)) for _ in range(2)], ANY_VERSION),
        AppendRequest(StreamId("empty"), [], 0),
        AppendRequest(StreamId("big"), [_event(next(n)) for _ in range(398)], 300),
    ]


@needs_kernel
def test_a_large_batch_is_pipelined_and_stores_what_the_plain_path_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same batches with and without the pipeline: byte-identical tables, equal
    returned events, and the pipeline really ran (its writer calls were made)."""
    tables, returned = [], []
    for kind in ("pipelined", "plain", "pipelined through pysqlite"):
        if kind == "plain":
            monkeypatch.setattr(sqlite_module, "_PIPELINE_MIN", 10**9)
        if kind == "pipelined through pysqlite":  # the _PyWriter's synchronous twins
            monkeypatch.setattr(sqlite_module, "_KernelWriter", None)
        with SQLiteStore(tmp_path / kind) as store:
            store.append("other", [_event(1)])  # a stream that exists before
            calls = _spy(store)
            if kind == "pipelined through pysqlite":
                got = store._append_pipelined(_big_batch(10))
                calls.clear()
            else:
                got = store.append_batch(_big_batch(10))
            assert ("chain_async" in calls) == (kind == "pipelined")
            if kind == "pipelined":
                # chunks of _PIPELINE_CHUNK events: 300 = 128 + 128 + 44, then 2, then
                # 398 = 3 x 128 + 14; each chained and inserted on the writer's thread
                assert sqlite_module._PIPELINE_CHUNK == 128
                assert calls.count("chain_async") == 8
                assert "insert_async" not in calls
                assert calls[-2:] == ["exec_async", "wait"]
            assert [e.position for e in got] == list(range(2, 702))
            store.append("big", [_event(5000)], expected_version=698)  # the head moved on
            tables.append(store._conn().execute("SELECT * FROM events").fetchall())
            returned.append([e.model_dump() for e in got])
    assert tables[0] == tables[1] == tables[2]
    assert returned[0] == returned[1] == returned[2]


class _Declines(_Spy):
    """A writer whose ``chain_async`` declines the chunks whose number is in ``declined``
    (counted from 0), as the kernel does for inputs it was not written for."""

    def __init__(self, db: Any, declined: set[int]) -> None:
        super().__init__(db)
        self.declined = declined
        self.chunks = 0

    def chain_async(self, *args: Any) -> Any:
        n, self.chunks = self.chunks, self.chunks + 1
        self.calls.append("declined" if n in self.declined else "chain_async")
        return None if n in self.declined else self.db.chain_async(*args)


@needs_kernel
@pytest.mark.parametrize("declined", [{0}, {1}, {2, 3}, {4, 6}, set(range(8))])
def test_chunks_chained_here_and_on_the_writer_thread_mix_in_any_order(
    tmp_path: Path, declined: set[int]
) -> None:
    """A chunk the kernel declines is chained by ``chain_rows`` on the caller's thread, onto
    a head the worker wrote (after waiting for it), and the next chunk on the worker onto a
    head chained here: whatever the mix, the table and the returned events are those of
    the plain path (one transaction, no pipeline)."""
    want: list[Any] = []
    for kind in ("plain", "mixed"):
        with SQLiteStore(tmp_path / kind) as store:
            store.append("other", [_event(1)])
            if kind == "plain":
                got = store._append_prepared([prepare_requests(_big_batch(10))])[0]
                assert isinstance(got, list)
            else:
                state = store._writer()
                spy = state.db = _Declines(state.db, declined)
                got = store.append_batch(_big_batch(10))
                assert spy.calls.count("declined") == len(declined)
                assert spy.calls.count("insert_async") == len(declined)
            rows = store._conn().execute("SELECT * FROM events").fetchall()
            seen = (rows, [e.model_dump() for e in got], store.stream_head("big"))
            if want:
                assert seen == want[0]
            want.append(seen)


@needs_kernel
def test_chain_async_declines_what_chain_request_declines_and_queues_nothing(
    tmp_path: Path,
) -> None:
    def item() -> Prepared:
        return Prepared(_event(7))

    sid_json = canonical_bytes("s")
    with SQLiteStore(tmp_path / "s") as store:
        db = store._writer().db
        db.exec("BEGIN IMMEDIATE")
        odd = item()
        odd.fields.schema_version = 2**70
        for args in (
            ([item()], "s", sid_json, 0, 0, GENESIS[:31]),
            ([item()], "s", sid_json, 2**63 - 1, 0, GENESIS),
            ([item(), odd], "s", sid_json, 0, 0, GENESIS),
        ):
            assert db.chain_async(*args) is None
            db.wait()  # nothing under way
            assert db.in_transaction()  # the writer is not busy
        with pytest.raises(TypeError):
            db.chain_async([item()], b"s", sid_json, 0, 0, GENESIS)
        rows, position, version, prev = db.chain_async([item()], "s", sid_json, 0, 0, GENESIS)
        with pytest.raises(RuntimeError, match="in use"):
            db.chain_async([item()], "s", sid_json, position, version, prev)  # one job at a time
        db.wait()
        assert (position, version, prev) == (1, 1, rows[0][8])
        db.exec("ROLLBACK")


class _Checkpointing(_Spy):
    """A writer whose deferred checkpoint never ends: a batch prepares all its chunks ahead
    of its BEGIN."""

    def checkpointing(self) -> bool:
        return True


@needs_kernel
@pytest.mark.parametrize("checkpointing", [False, True])
def test_errors_are_raised_in_batch_order_whatever_was_prepared_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpointing: bool
) -> None:
    """A conflict in an early request wins over an event a later request cannot prepare,
    and a conflict over the failed insert of the chunk before it: the errors the
    unpipelined order gives, whether or not chunks were prepared ahead of the BEGIN."""
    bad = _event(10_000)

    class Picky(Prepared):
        __slots__ = ()

        def __init__(self, event: Event) -> None:
            if event is bad:
                raise ValueError("cannot prepare this event")
            super().__init__(event)

    monkeypatch.setattr(sqlite_module, "Prepared", Picky)
    with SQLiteStore(tmp_path / "s") as store:
        state = store._writer()
        if checkpointing:
            state.db = _Checkpointing(state.db)
        wrong = [AppendRequest(StreamId("a"), [_event(i) for i in range(600)], 5)]
        with pytest.raises(ConcurrencyConflict):
            store.append_batch([*wrong, AppendRequest(StreamId("b"), [bad], None)])
        with pytest.raises(ValueError, match="cannot prepare"):
            store.append_batch([AppendRequest(StreamId("b"), [_event(1), bad], None), *wrong])
        # the first chunk's insert fails (a trigger) and the next chunk's expected version
        # does not hold: the conflict is found before the wait that would report the insert
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.position = 3 "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
        with pytest.raises(ConcurrencyConflict):
            store.append_batch(
                [AppendRequest(StreamId("c"), [_event(i) for i in range(100)], None), *wrong]
            )
        other.execute("DROP TRIGGER refuse")
        other.close()
        assert store.size() == 0
        assert store.append_batch(_big_batch(10))[-1].position == 700


class _InterruptedAfterBegin(_Spy):
    """A signal handler raising just after BEGIN IMMEDIATE returned, once."""

    def __init__(self, db: Any) -> None:
        super().__init__(db)
        self.fired = False

    def exec(self, sql: str) -> None:
        self.db.exec(sql)
        if sql == "BEGIN IMMEDIATE" and not self.fired:
            self.fired = True
            raise KeyboardInterrupt


@pytest.mark.parametrize("size", [1, 2, 700])  # solo, a transaction, the pipeline
def test_an_interrupt_just_after_begin_leaves_no_transaction_open(
    tmp_path: Path, writer_kind: str, size: int
) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        store.append("warm", [_event(0)])  # a cached head: one event goes the solo way
        state = store._writer()
        state.db = _InterruptedAfterBegin(state.db)
        events = [_event(i) for i in range(1, size + 1)]
        if size == 1:  # the solo path runs no BEGIN: make it take the transaction
            state.solo_off = 1
        with pytest.raises(KeyboardInterrupt):
            store.append("s", events)
        assert not state.db.in_transaction()
        assert store.append("s", events)[-1].position == size + 1
        assert store.size() == size + 1


@needs_kernel
def test_a_conflict_late_in_a_pipelined_batch_writes_nothing(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        batch = _big_batch(10)
        batch[3] = AppendRequest(StreamId("big"), batch[3].events, 299)  # wrong: it will be 300
        with pytest.raises(ConcurrencyConflict) as conflict:
            store.append_batch(batch)  # the first chunks were inserted before this was found
        assert (conflict.value.expected, conflict.value.actual) == (299, 300)
        assert store.size() == 0
        assert not store._writer().db.in_transaction()
        got = store.append_batch(_big_batch(10))  # nothing cached from the failed attempt
        assert got[-1].position == 700 and store.stream_head("big") == (698, got[-1].hash)


@needs_kernel
def test_an_insert_error_in_a_pipelined_batch_rolls_it_all_back(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.position = 600 "
            "BEGIN SELECT RAISE(ABORT, 'position 600 refused'); END"
        )
        with pytest.raises(StorageError, match="position 600 refused"):
            store.append_batch(_big_batch(10))
        assert store.size() == 0
        other.execute("DROP TRIGGER refuse")
        other.close()
        assert store.append_batch(_big_batch(10))[-1].position == 700


@needs_kernel
def test_the_kernel_writer_works_one_background_job_at_a_time(tmp_path: Path) -> None:
    kernel_writer = sqlite_module._KernelWriter
    assert kernel_writer is not None  # needs_kernel
    with SQLiteStore(tmp_path / "s") as store:
        (rec,) = store.append("a", [_event(1)])
    db = kernel_writer(str(tmp_path / "s" / "ledger.db"), 1000, "")
    try:
        row = (2, "a", 2, "t", None, "2026", 1, rec.hash, b"h" * 32, b"{}")
        db.exec("BEGIN IMMEDIATE")
        db.insert_async([row])
        with pytest.raises(RuntimeError, match="in use"):
            db.last_position()  # the connection is the worker's until wait()
        assert db.wait() is None
        assert db.wait() is None  # nothing under way: nothing to wait for
        db.insert_async([row])  # position 2 again
        with pytest.raises(sqlite_module._CONSTRAINT_ERRORS, match="UNIQUE"):
            db.wait()
        rows = [(3, "a", 3, "t", None, "2026", 1, rec.hash, bytes(32), b'{"x":1}')]
        db.insert_async(rows)
        rows.clear()  # the writer holds the rows it was given, not the caller's list
        db.wait()
        db.exec_async("COMMIT")
        db.wait()
        assert not db.in_transaction() and db.last_position() == 3
        db.exec_async("NOT SQL")
        with pytest.raises(sqlite_module._WRITE_ERRORS, match="syntax"):
            db.wait()
        db.exec("BEGIN IMMEDIATE")
        db.insert_async([(4, "a", 4, *row[3:])])
        db.close()  # waits for the job, then closes: the uncommitted row is gone
    finally:
        db.close()
    with SQLiteStore(tmp_path / "s") as store:
        assert store.size() == 3


@needs_kernel
def test_the_kernel_writer_checkpoints_the_wal_after_the_append_returns(tmp_path: Path) -> None:
    """With SQLite's auto-checkpoint replaced by the deferred one, the WAL is still copied
    into the database file and reused in place: it does not grow without bound."""
    with SQLiteStore(tmp_path / "s") as store:
        db = store._writer().db
        n = 0
        for _ in range(40):  # ~40 x 600 x 0.55 KB: some 13 MB through the WAL
            batch = [_event(n + k) for k in range(600)]
            n += 600
            store.append_batch([AppendRequest(StreamId("s"), batch, ANY_VERSION)])
        for k in range(300):  # single appends (the autocommit INSERT) commit too
            store.append("s", [_event(n + k)])
        db.in_transaction()  # returns once a checkpoint under way is done
        main = (tmp_path / "s" / "ledger.db").stat().st_size
        wal = (tmp_path / "s" / "ledger.db-wal").stat().st_size
        page = db.int_query("PRAGMA page_size")
        assert main > 8 * 1024 * 1024  # checkpointed into the file
        assert wal < (_WAL_AUTOCHECKPOINT + 400) * (page + 24)  # one threshold and a batch
        assert store.size() == n + 300
