"""One conformance suite for every ledger backend (CONVENTIONS #4).

A backend's test module subclasses :class:`LedgerStoreSuite` and provides a ``store``
fixture (and ``reopen`` to open a second handle on the same store, for multi-process and
restart tests). A new backend passes this suite unchanged.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, Literal
from uuid import UUID

import pytest

from tracebound.canonical import canonical_bytes
from tracebound.errors import (
    ConcurrencyConflict,
    ConcurrencyError,
    StorageError,
    StoreBusy,
    StoreClosed,
    TraceboundError,
    ValidationFailed,
)
from tracebound.events import Event, Payload, default_registry
from tracebound.events.catalog import MergeOutcome
from tracebound.events.record import record_dict
from tracebound.integrity.chain import GENESIS, chain_hash
from tracebound.integrity.consistency import ConsistencyBundle, verify_consistency_bundle
from tracebound.integrity.keys import NoteSigner
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.port import (
    NO_STREAM,
    AppendRequest,
    LedgerStore,
    MerkleNodeStore,
    RecordFilter,
    read_matching,
    stream_positions,
)
from tracebound.store.witness import FileWitness


class ConformanceNote(Payload):
    """A payload type only the suite uses; registered like any user type."""

    kind: Literal["conformance_note"] = "conformance_note"
    text: str
    n: int
    tags: tuple[str, ...] = ()


if "conformance_note" not in default_registry():
    default_registry().register(ConformanceNote)

_T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def note(n: int, text: str = "hello", *, workflow: str | None = "wf-1") -> Event:
    return Event.create(
        ConformanceNote(text=text, n=n, tags=("a", "ü", "\U0001f600")),
        event_id=UUID(int=n + 1),
        timestamp=_T0 + timedelta(microseconds=n),
        workflow_id=workflow,
    )


def outcome(n: int, *, workflow: str | None = "wf-1") -> Event:
    """An event of a second type (the suite's notes are all ``conformance_note``)."""
    return Event.create(
        MergeOutcome(pr_url=f"https://example.test/pr/{n}", decision="merged", reviewer=None),
        event_id=UUID(int=10**9 + n),
        timestamp=_T0 + timedelta(microseconds=n),
        workflow_id=workflow,
    )


def _writer(factory: Callable[[], LedgerStore], worker: int, count: int, shared: str) -> int:
    """Runs in a child process: own stream appends plus contended appends to ``shared``."""
    store = factory()
    conflicts = 0
    try:
        for i in range(count):
            store.append(f"own-{worker}", [note(worker * 100_000 + i)])
            while True:  # optimistic-concurrency loop on the shared stream
                head = store.stream_head(shared)
                version = 0 if head is None else head.version
                try:
                    store.append(shared, [note(i, f"w{worker}")], expected_version=version)
                    break
                except ConcurrencyConflict:
                    conflicts += 1
    finally:
        store.close()
    return conflicts


class LedgerStoreSuite:
    """The behaviour every backend must have."""

    # A picklable zero-argument callable that opens the same store in another process.
    factory: ClassVar[Any]

    @pytest.fixture
    def store(self) -> Iterator[LedgerStore]:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def reopen(self) -> Callable[[], LedgerStore]:  # pragma: no cover - overridden
        raise NotImplementedError

    # Seconds ``impatient`` handles wait for a lock: short, so a busy test is fast.
    IMPATIENT: ClassVar[float] = 0.2

    @pytest.fixture
    def impatient(self) -> Callable[[], LedgerStore]:  # pragma: no cover - overridden
        """Opens the same store, waiting at most ``IMPATIENT`` seconds for another's lock."""
        raise NotImplementedError

    @pytest.fixture
    def hold_write_lock(
        self,
    ) -> Callable[[], AbstractContextManager[None]]:  # pragma: no cover - overridden
        """Another process (or server session) holding the store's write lock for real."""
        raise NotImplementedError

    # -- appends ---------------------------------------------------------------------------

    def test_first_append_starts_chain_at_genesis(self, store: LedgerStore) -> None:
        (rec,) = store.append("s", [note(1)])
        assert (rec.position, rec.stream_version, rec.prev_hash) == (1, 1, GENESIS)
        body = canonical_bytes(record_dict(rec))
        assert rec.hash == chain_hash(GENESIS, body)

    def test_stored_bytes_equal_slow_canonical_form(self, store: LedgerStore) -> None:
        store.append("s", [note(1), note(2)])
        store.append("t", [note(3, workflow=None)])
        for raw, rec in zip(store.read_raw(), store.read_log(), strict=True):
            assert raw.body == canonical_bytes(record_dict(rec))
            assert raw.hash == chain_hash(raw.prev_hash, raw.body)

    def test_positions_are_gap_free_across_streams(self, store: LedgerStore) -> None:
        for i in range(30):
            store.append(f"s{i % 4}", [note(i)])
        positions = [e.position for e in store.read_log()]
        assert positions == list(range(1, 31))
        assert store.size() == 30

    def test_stream_positions_are_where_the_stream_s_versions_are_filed(
        self, store: LedgerStore
    ) -> None:
        for i in range(9):
            store.append("s" if i % 3 else "t", [note(i)])
        expected = [(e.stream_version, e.position) for e in store.read_stream("s")]
        assert stream_positions(store, "s", 1, 6) == expected  # the index, undecoded
        assert stream_positions(store, "s", 2, 3) == expected[1:3]
        assert stream_positions(store, "s", 7, 9) == []
        assert stream_positions(store, "nobody", 1, 2) == []

    def test_stream_chain_links_each_event_to_previous(self, store: LedgerStore) -> None:
        store.append("a", [note(1)])
        store.append("b", [note(2)])
        store.append("a", [note(3), note(4)])
        events = list(store.read_stream("a"))
        assert [e.stream_version for e in events] == [1, 2, 3]
        assert events[0].prev_hash == GENESIS
        assert events[1].prev_hash == events[0].hash
        assert events[2].prev_hash == events[1].hash
        head = store.stream_head("a")
        assert head is not None
        assert (head.version, head.head) == (3, events[2].hash)
        assert store.stream_head("missing") is None

    def test_round_trip_preserves_event(self, store: LedgerStore) -> None:
        ev = note(7, "ümlaut \u2028 \x01")
        (rec,) = store.append("s", [ev])
        (back,) = store.read_stream("s")
        assert back.payload == ev.payload
        assert back.event_id == ev.event_id
        assert back.timestamp == ev.timestamp
        assert back.workflow_id == ev.workflow_id
        assert back.hash == rec.hash

    def test_expected_version_conflict_is_typed_and_writes_nothing(
        self, store: LedgerStore
    ) -> None:
        store.append("s", [note(1)], expected_version=NO_STREAM)
        with pytest.raises(ConcurrencyConflict) as info:
            store.append("s", [note(2)], expected_version=NO_STREAM)
        assert (info.value.expected, info.value.actual, info.value.stream_id) == (0, 1, "s")
        store.append("s", [note(2)], expected_version=1)
        with pytest.raises(ConcurrencyConflict):
            store.append("s", [note(3)], expected_version=5)
        assert store.size() == 2

    @pytest.mark.parametrize(
        ("stream_id", "expected", "field"),
        [
            ("", None, "stream_id"),
            (7, None, "stream_id"),
            ("a\ud800b", None, "stream_id"),
            ("s", "0", "expected_version"),
            ("s", -1, "expected_version"),
            ("s", True, "expected_version"),
        ],
    )
    def test_a_bad_stream_id_or_expected_version_is_typed_and_writes_nothing(
        self, store: LedgerStore, stream_id: Any, expected: Any, field: str
    ) -> None:
        with pytest.raises(ValidationFailed) as info:
            store.append(stream_id, [note(1)], expected_version=expected)
        assert info.value.field == field
        with pytest.raises(ValidationFailed):  # a large batch takes its own path on SQLite
            store.append_batch([AppendRequest(stream_id, [note(i) for i in range(1500)], expected)])
        assert store.size() == 0

    def test_batch_is_atomic(self, store: LedgerStore) -> None:
        store.append("b", [note(1)])
        with pytest.raises(ConcurrencyConflict):
            store.append_batch(
                [
                    AppendRequest("a", [note(2), note(3)], NO_STREAM),  # type: ignore[arg-type]
                    AppendRequest("b", [note(4)], NO_STREAM),  # type: ignore[arg-type]
                ]
            )
        assert store.size() == 1
        assert store.stream_head("a") is None
        out = store.append_batch(
            [
                AppendRequest("a", [note(2), note(3)], NO_STREAM),  # type: ignore[arg-type]
                AppendRequest("b", [note(4)], 1),  # type: ignore[arg-type]
                AppendRequest("a", [note(5)]),  # type: ignore[arg-type]
            ]
        )
        assert [(e.stream_id, e.stream_version, e.position) for e in out] == [
            ("a", 1, 2),
            ("a", 2, 3),
            ("b", 2, 4),
            ("a", 3, 5),
        ]
        assert out[3].prev_hash == out[1].hash

    def test_large_batch(self, store: LedgerStore) -> None:
        out = store.append("big", [note(i) for i in range(2500)])
        assert [e.position for e in out] == list(range(1, 2501))
        assert sum(1 for _ in store.read_stream("big")) == 2500

    # -- reads ---------------------------------------------------------------------------

    def test_read_ranges(self, store: LedgerStore) -> None:
        store.append("s", [note(i) for i in range(10)])
        assert [e.position for e in store.read_log(start=3, stop=5)] == [3, 4, 5]
        assert [e.stream_version for e in store.read_stream("s", from_version=9)] == [9, 10]
        assert [e.stream_version for e in store.read_stream("s", to_version=2)] == [1, 2]
        assert list(store.read_log(start=11)) == []

    def test_reads_stream_in_constant_memory(self, store: LedgerStore) -> None:
        for chunk in range(12):
            store.append("m", [note(chunk * 1000 + i, "x" * 200) for i in range(1000)])

        def peak(limit: int, filtered: bool) -> int:
            tracemalloc.start()
            raws = store.read_raw()
            if filtered:  # the filtered read pages as read_raw does
                raws = read_matching(store, RecordFilter(kinds=frozenset({"conformance_note"})))
            for i, _ in enumerate(raws):
                if i >= limit:
                    break
            _, top = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            return top

        for filtered in (False, True):
            small, large = peak(1500, filtered), peak(12000, filtered)
            # A reader that loaded everything would need ~8x more for 8x the rows.
            assert large < small * 2, (filtered, small, large)

    def test_a_filtered_read_is_read_raw_s_matching_records_in_log_order(
        self, store: LedgerStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Positions 1..30 over two streams: every third an outcome, workflows wf-0..wf-2
        and none. Windows and pages of 4 (where the store has them) make every read cross
        many of them, so a window that matches nothing or a full page must not end it."""
        backend = __import__(type(store).__module__, fromlist=["_"])
        monkeypatch.setattr(backend, "_SCAN_WINDOW", 4, raising=False)
        monkeypatch.setattr(backend, "_PAGE", 4, raising=False)
        for i in range(30):
            wf = None if i % 4 == 3 else f"wf-{i % 3}"
            event = outcome(i, workflow=wf) if i % 3 == 0 else note(i, workflow=wf)
            store.append(f"s{i % 2}", [event])
        filters = [
            RecordFilter(kinds=frozenset({"merge_outcome"})),
            RecordFilter(workflows=frozenset({"wf-1"})),
            RecordFilter(kinds=frozenset({"merge_outcome"}), workflows=frozenset({"wf-0"})),
            RecordFilter(kinds=frozenset({"merge_outcome", "conformance_note"})),
            RecordFilter(workflows=frozenset({"wf-1", "wf-2"}), in_body=True),
            RecordFilter(kinds=frozenset()),
            RecordFilter(kinds=frozenset({"no_such_type"}), workflows=frozenset({"wf-1"})),
            RecordFilter(),
        ]
        for where in filters:
            for start, stop in ((1, None), (7, 22), (29, 40), (31, None), (5, 4)):
                got = list(read_matching(store, where, start=start, stop=stop))
                want = [r for r in store.read_raw(start=start, stop=stop) if where.matches(r)]
                assert got == want, (where, start, stop)
        outcomes = read_matching(store, RecordFilter(kinds=frozenset({"merge_outcome"})))
        assert [r.position for r in outcomes] == list(range(1, 31, 3))
        both = RecordFilter(kinds=frozenset({"merge_outcome"}), workflows=frozenset({"wf-0"}))
        assert [r.position for r in read_matching(store, both, start=2, stop=25)] == [
            7,
            10,
            13,
            19,
            22,
            25,
        ]

    # -- concurrency ---------------------------------------------------------------------

    def test_threads_append_concurrently(self, store: LedgerStore) -> None:
        errors: list[Exception] = []

        def work(t: int) -> None:
            try:
                for i in range(50):
                    store.append(f"t{t}", [note(t * 1000 + i)])
            except Exception as exc:  # noqa: BLE001 - any failure in a thread must reach the test
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors
        assert [e.position for e in store.read_log()] == list(range(1, 301))

    @pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
    def test_threads_that_end_leave_no_open_files_behind(self, store: LedgerStore) -> None:
        """A service that serves each request on a new thread (ThreadingHTTPServer) reads
        and appends through one store for weeks: a connection kept for every thread that
        ever used it ran out of file descriptors after a few hundred requests."""
        store.append("s", [note(0)])

        def serve(n: int) -> int:
            for i in range(n):
                t = threading.Thread(
                    target=lambda i=i: (store.size(), store.append("s", [note(i + 1)]))
                )
                t.start()
                t.join()
            return len(list(Path("/proc/self/fd").iterdir()))

        after_few = serve(5)
        assert serve(60) == after_few

    def test_processes_append_concurrently(
        self, store: LedgerStore, reopen: Callable[[], LedgerStore]
    ) -> None:
        workers, count = 4, 60
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(workers) as pool:
            pool.starmap(_writer, [(reopen, w, count, "shared") for w in range(workers)])
        total = workers * count * 2
        assert store.size() == total
        assert [e.position for e in store.read_log()] == list(range(1, total + 1))
        shared = list(store.read_stream("shared"))
        assert [e.stream_version for e in shared] == list(range(1, workers * count + 1))
        prev = GENESIS
        for raw in store.read_raw():
            assert raw.hash == chain_hash(raw.prev_hash, raw.body)
        for e in shared:
            assert e.prev_hash == prev
            prev = e.hash

    def test_a_store_another_process_holds_is_busy_the_same_way_on_every_backend(
        self,
        store: LedgerStore,
        impatient: Callable[[], LedgerStore],
        hold_write_lock: Callable[[], AbstractContextManager[None]],
    ) -> None:
        """One class to catch, whichever backend; it is still what each raised before
        (SQLite a StorageError, PostgreSQL a ConcurrencyError); nothing is written, and the
        handle works once the other process lets go."""
        store.append("s", [note(1)])
        other = impatient()
        try:
            with hold_write_lock():
                with pytest.raises(StoreBusy) as info:
                    other.append("s", [note(2)], expected_version=1)
                assert isinstance(info.value, ConcurrencyError)
                assert isinstance(info.value, StorageError)
                assert info.value.waited == self.IMPATIENT
                assert "locked by another process" in str(info.value)
            (rec,) = other.append("s", [note(2)], expected_version=1)
            assert (rec.position, rec.stream_version) == (2, 2)
        finally:
            other.close()
        assert [e.event_id for e in store.read_log()] == [note(1).event_id, note(2).event_id]

    # -- checkpoints and lifecycle -------------------------------------------------------

    def test_checkpoints_are_kept_in_order(self, store: LedgerStore) -> None:
        assert store.latest_checkpoint() is None
        store.save_checkpoint(5, "note-5\n")
        store.save_checkpoint(2, "note-2\n")
        assert store.latest_checkpoint() == "note-5\n"
        assert store.checkpoints() == [(2, "note-2\n"), (5, "note-5\n")]

    # -- stored Merkle nodes (MerkleNodeStore) -------------------------------------------

    def test_merkle_nodes_round_trip_and_keep_what_is_stored(
        self, store: LedgerStore, reopen: Callable[[], LedgerStore]
    ) -> None:
        assert isinstance(store, MerkleNodeStore)
        assert store.merkle_node_count(1) == 0
        assert store.merkle_nodes(1, 0, 5) == []
        row = [bytes([i]) * 32 for i in range(6)]
        store.add_merkle_nodes(1, 0, row[:3])
        store.add_merkle_nodes(1, 3, row[3:5])
        store.add_merkle_nodes(2, 0, [b"\x77" * 32])
        assert store.merkle_node_count(1) == 5
        assert store.merkle_nodes(1, 0, 5) == row[:5]
        assert store.merkle_nodes(1, 2, 100) == row[2:5]  # the run present, no more
        assert store.merkle_nodes(1, 7, 9) == []
        # Two checkpointers may add the same nodes: what is stored stays.
        store.add_merkle_nodes(1, 1, [b"\x99" * 32, *row[2:6]])
        assert store.merkle_nodes(1, 0, 10) == row
        again = reopen()
        try:
            assert isinstance(again, MerkleNodeStore)
            assert again.merkle_nodes(1, 0, 10) == row
            assert again.merkle_nodes(2, 0, 1) == [b"\x77" * 32]
        finally:
            again.close()
        store.drop_merkle_nodes()
        assert store.merkle_node_count(1) == store.merkle_node_count(2) == 0
        assert store.merkle_nodes(1, 0, 10) == []

    def test_read_hashes_reads_the_hash_column_in_order(self, store: LedgerStore) -> None:
        assert isinstance(store, MerkleNodeStore)
        store.append("a", [note(i) for i in range(3)])
        store.append("b", [note(i) for i in range(3, 7)])
        hashes = [r.hash for r in store.read_raw()]
        assert store.read_hashes(1, 7) == hashes
        assert store.read_hashes(3, 5) == hashes[2:5]
        assert store.read_hashes(6, 50) == hashes[5:]  # fewer: the caller checks the count
        assert store.read_hashes(8, 9) == []

    def test_use_after_close_is_typed(self, store: LedgerStore) -> None:
        store.close()
        with pytest.raises(StoreClosed):
            store.size()
        with pytest.raises(TraceboundError):
            store.append("s", [note(1)])

    def test_metadata_round_trips(self, store: LedgerStore) -> None:
        assert store.get_meta("origin") is None
        store.set_meta("origin", "example.com/log")
        store.set_meta("origin", "example.com/log2")
        assert store.get_meta("origin") == "example.com/log2"

    def test_a_key_rotation_verifies_from_either_key(
        self, store: LedgerStore, tmp_path: Path
    ) -> None:
        """ADR 0017 on every backend: the rotation event is found through the key stream's
        index, and the log verifies from the old and the new key."""
        old, new = NoteSigner("conformance", b"\x01" * 32), NoteSigner("conformance", b"\x02" * 32)
        origin = "conformance.example/rotation"

        def ledger(signer: NoteSigner, root: NoteSigner) -> Ledger:
            return Ledger(
                store,
                clock=FixedClock(),
                ids=SequentialIds(namespace=3),
                signer=signer,
                verifier=root.verifier,
                witness=FileWitness(tmp_path / "witness.note", origin=origin),
                origin=origin,
            )

        led = ledger(old, old)
        led.record("a", [ConformanceNote(text="x", n=i) for i in range(3)])
        led.checkpoint()
        kept = store.latest_checkpoint()
        assert kept is not None
        assert led.rotate_key(new, rotated_by="alice").rotation.position == 4
        led.checkpoint()  # nothing new: the hand-over both keys signed stays as it is
        led.record("a", [ConformanceNote(text="x", n=i) for i in range(3, 5)])
        led.checkpoint()
        for root in (old, new):
            report = ledger(new, root).verify(workers=1)
            assert report.ok, report.damage
            assert [(r.old, r.new) for r in report.rotations] == [(old.verifier, new.verifier)]
        # ADR 0019: what an auditor who kept the first checkpoint checks with the old key.
        bundle = ledger(new, old).prove_consistency(kept)
        result = verify_consistency_bundle(
            ConsistencyBundle.from_json(json.dumps(bundle.as_dict())),
            old.verifier,
            origin=origin,
            newest_key=new.verifier,
        )
        assert (result.old.size, result.new.size) == (3, 6)
        assert [c.size for c in result.handovers] == [4]
