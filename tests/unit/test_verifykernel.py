"""The C verify kernel (ADR 0007) against its references.

* its BLAKE3 against the official ``blake3`` package, in every SIMD code path;
* its SHA-256, leaf and node hashes against ``hashlib`` and ``integrity.merkle``;
* its acceptance against ``ChunkVerifier.feed_page``'s Python loop, on valid pages and on
  pages with one random mutation: the same number of records accepted, the same leaf hashes,
  the same chunk result;
* its SQLite reader against ``read_raw_pages``; and a full ``verify`` of damaged ledgers,
  which must report exactly the same with and without the kernel.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from blake3 import blake3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracebound import ledger as ledger_module
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.events.envelope import Event
from tracebound.ids import StreamId
from tracebound.integrity import _kernel
from tracebound.integrity import verify as verify_module
from tracebound.integrity.keys import NoteSigner
from tracebound.integrity.merkle import leaf_hash, node_hash, root_of
from tracebound.integrity.verify import PAGE, ChunkResult, ChunkVerifier, _StreamSpan
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store import sqlite as sqlite_module
from tracebound.store.port import AppendRequest, StreamStore
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.witness import FileWitness

if _kernel.KERNEL is None:
    pytest.skip("the C verify kernel is not built (or switched off)", allow_module_level=True)

K: ModuleType = _kernel.KERNEL
BEST_LEVEL = K.blake3_levels()[1]
LEVEL_NAMES = ["portable", "sse41", "avx2", "avx512vl"]
BOUNDARIES = [0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 1023, 1024, 1025, 1056, 1087, 1088,
              2047, 2048, 2049, 3071, 3072, 3073, 4095, 4096, 4097, 5120, 8191, 8192, 8193,
              9216, 10_000]  # fmt: skip


@pytest.fixture(params=range(BEST_LEVEL + 1), ids=lambda lvl: LEVEL_NAMES[lvl])
def level(request: pytest.FixtureRequest) -> Iterator[int]:
    """Run the test with the kernel's BLAKE3 forced to one code path (test hook)."""
    previous = K.blake3_levels()[0]
    assert K.set_blake3_level(request.param) == request.param
    yield request.param
    K.set_blake3_level(previous)


@pytest.fixture(params=[False, True], ids=["sha-portable", "sha-ni"])
def sha_ni(request: pytest.FixtureRequest) -> Iterator[bool]:
    previous = K.sha_levels()[0]
    if request.param and not K.sha_levels()[1]:
        pytest.skip("this CPU has no SHA extensions")
    assert K.set_sha_ni(request.param) == request.param
    yield request.param
    K.set_sha_ni(previous)


# -- BLAKE3 -------------------------------------------------------------------------------------


def test_every_supported_level_can_be_selected() -> None:
    assert BEST_LEVEL >= 0
    previous = K.blake3_levels()[0]
    try:
        for lvl in range(BEST_LEVEL + 1):
            assert K.set_blake3_level(lvl) == lvl
        assert K.set_blake3_level(99) == BEST_LEVEL  # clamped to what the CPU has
        assert K.set_blake3_level(-1) == 0
    finally:
        K.set_blake3_level(previous)


def test_blake3_boundaries(level: int) -> None:
    data = bytes((i * 7 + 3) % 251 for i in range(10_001))
    messages = [data[:n] for n in BOUNDARIES]
    assert K.blake3_many(messages) == [blake3(m).digest() for m in messages]
    # The same messages split into prefix and body at every interesting place.
    split = [(m[:cut], m[cut:]) for m in messages for cut in {0, 1, 32, len(m) // 2, len(m)}]
    assert K.blake3_many(split) == [blake3(a + b).digest() for a, b in split]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.binary(max_size=10_000), st.integers(0, 10_000)), max_size=40))
def test_blake3_matches_official(level: int, items: list[tuple[bytes, int]]) -> None:
    # Many messages of mixed lengths in one call: lanes are refilled as jobs finish, and
    # multi-chunk messages go through the parent levels together.
    messages = [
        (data[: cut % (len(data) + 1)], data[cut % (len(data) + 1) :]) for data, cut in items
    ]
    assert K.blake3_many(messages) == [blake3(a + b).digest() for a, b in messages]


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.integers(0, 10_000), min_size=1, max_size=20), st.binary(min_size=32, max_size=32)
)
def test_blake3_chain_links(level: int, lengths: list[int], prev: bytes) -> None:
    bodies = [os.urandom(n) for n in lengths]
    assert K.blake3_many([(prev, b) for b in bodies]) == [
        blake3(prev).update(b).digest() for b in bodies
    ]


# -- SHA-256 and the Merkle helpers -----------------------------------------------------------


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=600))
def test_sha256_matches_hashlib(sha_ni: bool, data: bytes) -> None:
    assert K.sha256(data) == hashlib.sha256(data).digest()


def test_sha256_lengths(sha_ni: bool) -> None:
    data = bytes(range(256)) * 40
    for n in [*range(130), 1000, 4096, 10_000]:
        assert K.sha256(data[:n]) == hashlib.sha256(data[:n]).digest(), n


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(min_size=32, max_size=32), st.integers(0, 7))
def test_leaf_and_perfect_roots(sha_ni: bool, seed: bytes, log_n: int) -> None:
    assert K.leaf_hash(seed) == leaf_hash(seed)
    leaves = [hashlib.sha256(seed + bytes([i])).digest() for i in range((1 << log_n) + 3)]
    blob = b"".join(leaves)
    for start in (0, 1, 3):
        count = 1 << log_n
        assert K.perfect_root(blob, start, count) == root_of(leaves[start : start + count])
    assert K.perfect_root(blob[:64], 0, 2) == node_hash(leaves[0], leaves[1])


def test_perfect_root_refuses_bad_runs() -> None:
    blob = bytes(32 * 8)
    for start, count in [(0, 3), (0, 0), (1, 8), (-1, 2)]:
        with pytest.raises(ValueError, match="power-of-two"):
            K.perfect_root(blob, start, count)


# -- acceptance: kernel == ChunkVerifier.feed_page ---------------------------------------------

STREAMS = ["run-0", "run-1", "ün-î", "流-2", "emoji-\U0001f600", "q'uote", "x" * 300]


def _cost(i: int) -> CostIncurred:
    # Sources of 1..1500 characters: records of one to three BLAKE3 chunks.
    return CostIncurred(
        tier="direct",
        amount_usd=Decimal(f"0.{i:04d}"),
        source=CostSource("s" * (1 + (i * 37) % 1500)),
    )


def _fill(store: StreamStore, n: int, streams: list[str]) -> None:
    ids, clock = SequentialIds(namespace=5), FixedClock()
    done = 0
    while done < n:
        requests = []
        for j, sid in enumerate(streams):
            count = min(1 + (done + j) % 4, n - done)
            if count <= 0:
                break
            events = [
                Event.create(
                    _cost(done + k),
                    event_id=ids.new_id(),
                    timestamp=clock.now(),
                    workflow_id=None if (done + k) % 3 == 0 else f"wf-{(done + k) % 5}-é",
                )
                for k in range(count)
            ]
            requests.append(AppendRequest(StreamId(sid), events))
            done += count
        store.append_batch(requests)


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, ...]]:
    store = SQLiteStore(tmp_path_factory.mktemp("kernel-rows"))
    try:
        _fill(store, 160, STREAMS)
        return [tuple(r) for page in store.read_raw_pages() for r in page]
    finally:
        store.close()


class _Probe(ChunkVerifier):
    """Records how many records the fast loop accepted before the slow path took over."""

    fast_count: int | None = None

    def feed(self, r: Any) -> bool:
        if self.fast_count is None:
            self.fast_count = self._expected - self.start
        return super().feed(r)


def _run(
    page: list[tuple[Any, ...]], start: int, sizes: list[int], kernel: ModuleType | None
) -> tuple[_Probe, ChunkResult]:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(verify_module, "_KERNEL", kernel)
        probe = _Probe(start, snapshot_sizes=sizes)
        result = probe.feed_pages([page])
    return probe, result


def _same(a: ChunkResult, b: ChunkResult) -> None:
    assert (a.start, a.size, a.streams, a.subtrees, a.snapshots) == (
        b.start,
        b.size,
        b.streams,
        b.subtrees,
        b.snapshots,
    )
    da, db = a.damage, b.damage
    assert (da is None) == (db is None)
    if da is not None and db is not None:
        assert (da.kind, da.position, da.detail) == (db.kind, db.position, db.detail)


def _flip(value: bytes, at: int) -> bytes:
    if not value:
        return b"x"
    i = at % len(value)
    return value[:i] + bytes([value[i] ^ 0x01]) + value[i + 1 :]


COLUMN = {"position": 0, "stream_id": 1, "stream_version": 2, "event_type": 3, "workflow_id": 4,
          "timestamp": 5, "schema_version": 6, "prev_hash": 7, "hash": 8, "body": 9}  # fmt: skip


def _mutate(page: list[tuple[Any, ...]], kind: str, j: int, k: int) -> list[tuple[Any, ...]]:
    j %= len(page)
    k %= len(page)
    out = list(page)
    row = list(out[j])
    if kind in {"prev_hash", "hash", "body"}:
        row[COLUMN[kind]] = _flip(row[COLUMN[kind]], k * 37)
    elif kind == "delete":
        del out[j]
        return out
    elif kind == "swap":
        out[j], out[k] = out[k], out[j]
        return out
    elif kind == "duplicate":
        out.insert(j, out[j])
        return out
    elif kind in {"position", "stream_version", "schema_version"}:
        row[COLUMN[kind]] += 1 if k % 2 else -1
    elif kind == "stream_id":
        row[1] = page[k][1] if page[k][1] != row[1] else row[1] + "z"
    elif kind == "workflow_id":
        row[4] = None if row[4] is not None else "wf-x"
    elif kind == "timestamp":
        row[5] = row[5].replace("Z", "+00:00") if k % 2 else row[5] + " "
    elif kind == "event_type":
        row[3] = "Other"  # checked against the body since the security review: both refuse it
    elif kind == "type":  # a column of an unusual type: the kernel must leave the page alone
        choice = k % 9
        if choice == 0:
            row[0] = str(row[0])
        elif choice == 1:
            row[0] = float(row[0])
        elif choice == 2:
            row[9] = bytearray(row[9])
        elif choice == 3:
            row[7] = row[7][:31]
        elif choice == 4:
            row[1] = row[1] + '"'
        elif choice == 5:
            row[5] = row[5] + "\ud800"  # no UTF-8 form: ts.encode() fails
        elif choice == 6:
            row[4] = "tab\there"
        elif choice == 7:
            row[2] = 1 << 70
        else:
            row[8] = None
    out[j] = tuple(row)
    return out


KINDS = ["prev_hash", "hash", "body", "delete", "swap", "duplicate", "position",
         "stream_version", "schema_version", "stream_id", "workflow_id", "timestamp",
         "event_type", "type"]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 150),
    st.integers(1, 160),
    st.one_of(
        st.none(), st.tuples(st.sampled_from(KINDS), st.integers(0, 10**6), st.integers(0, 10**6))
    ),
    st.lists(st.integers(0, 170), max_size=3),
)
def test_kernel_accepts_exactly_what_python_accepts(
    rows: list[tuple[Any, ...]],
    lo: int,
    length: int,
    mutation: tuple[str, int, int] | None,
    sizes: list[int],
) -> None:
    page = rows[lo : lo + length]
    if mutation is not None:
        page = _mutate(page, *mutation)
    start = rows[lo][0]
    snap = sorted({start + s for s in sizes})
    python, expected = _run(page, start, snap, None)
    _, got = _run(page, start, snap, K)
    _same(got, expected)
    python_count = len(page) if python.fast_count is None else python.fast_count

    kpage = K.page_from_rows(page)
    assert (kpage is None) == (mutation is not None and mutation[0] == "type")
    if kpage is None:
        return
    assert len(kpage) == len(page)
    assert kpage[:] == page
    count, leaves = K.accept(kpage, 0, start, len(page), {}, _StreamSpan)
    assert count == python_count
    assert leaves == b"".join(leaf_hash(r[8]) for r in page[:count])


def test_accept_respects_offset_limit_and_existing_spans(rows: list[tuple[Any, ...]]) -> None:
    page = K.page_from_rows(rows)
    assert page is not None
    streams: dict[str, _StreamSpan] = {}
    first, leaves1 = K.accept(page, 0, 1, 50, streams, _StreamSpan)
    assert first == 50 and len(leaves1) == 50 * 32
    rest, leaves2 = K.accept(page, 50, 51, 10**6, streams, _StreamSpan)
    assert rest == len(rows) - 50
    fresh: dict[str, _StreamSpan] = {}
    whole, leaves = K.accept(page, 0, 1, len(rows), fresh, _StreamSpan)
    assert (whole, leaves) == (len(rows), leaves1 + leaves2)
    assert streams == fresh
    # A span whose head is not plain (not an int): the kernel leaves that record to Python.
    odd = {sid: _StreamSpan(1, 1, b"", True, b"") for sid in fresh}
    assert K.accept(page, 1, 2, 10, odd, _StreamSpan)[0] == 0


# -- the SQLite reader --------------------------------------------------------------------------


def _sql(db: Path, statement: str, params: tuple[Any, ...] = ()) -> None:
    conn = sqlite3.connect(db)
    try:
        with conn:
            conn.execute(statement, params)
    finally:
        conn.close()


@pytest.fixture
def reader_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "store")
    _fill(store, 3 * PAGE + 17, STREAMS)
    yield store
    store.close()


def test_reader_pages_equal_python_pages(reader_store: SQLiteStore) -> None:
    if sqlite_module._KernelReader is None:
        pytest.skip("the kernel could not bind Python's SQLite library")
    python = [list(p) for p in reader_store.read_raw_pages(start=5, stop=3 * PAGE)]
    kernel = list(reader_store.verify_pages(start=5, stop=3 * PAGE))
    assert all(type(p) is K.Page for p in kernel)
    assert [p[:] for p in kernel] == python
    assert [p[-1] for p in kernel] == [p[-1] for p in python]


def test_reader_leaves_unusual_pages_to_python(reader_store: SQLiteStore) -> None:
    if sqlite_module._KernelReader is None:
        pytest.skip("the kernel could not bind Python's SQLite library")
    _sql(
        reader_store.path,
        "UPDATE events SET timestamp = CAST(timestamp AS BLOB) WHERE position = 3000",
    )
    pages = list(reader_store.verify_pages())
    kinds = [type(p) is K.Page for p in pages]
    assert kinds == [True, False, True, True]  # only the page holding position 3000 is Python's
    assert [list(p[:]) for p in pages] == [list(p) for p in reader_store.read_raw_pages()]


def test_reader_refuses_closed_store(reader_store: SQLiteStore) -> None:
    reader_store.close()
    with pytest.raises(Exception, match="closed"):
        next(iter(reader_store.verify_pages()))


# -- a full verify, with and without the kernel -------------------------------------------------

SIGNER = NoteSigner("tb-test", bytes(range(32)))
ORIGIN = "tracebound.test/kernel"


def _ledger(root: Path) -> Ledger:
    return Ledger(
        SQLiteStore(root / "store"),
        clock=FixedClock(),
        ids=SequentialIds(namespace=9),
        signer=SIGNER,
        witness=FileWitness(root / "outside" / "w.note", origin=ORIGIN, store_dir=root / "store"),
        origin=ORIGIN,
    )


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("signed")
    with _ledger(root) as ledger:
        _fill(ledger.store, 700, STREAMS[:4])
        ledger.checkpoint()
        _fill(ledger.store, PAGE + 300, STREAMS)
        ledger.checkpoint()
        _fill(ledger.store, 40, STREAMS[:2])
    return root


def _report(root: Path, kernel: bool, workers: int = 1) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as m:
        if not kernel:
            m.setattr(verify_module, "_KERNEL", None)
            m.setattr(sqlite_module, "_KernelReader", None)
        if workers > 1:  # several chunks, checked by helper threads (or processes, unbuilt)
            m.setattr(ledger_module, "CHUNK", 512)
        with _ledger(root) as ledger:
            return ledger.verify(workers=workers).as_dict()


_SET = "UPDATE events SET "
DB_MUTATIONS: dict[str, str] = {
    "body": _SET + "body = body || x'20' WHERE position = ?",
    "hash": _SET + "hash = zeroblob(32) WHERE position = ?",
    "prev": _SET + "prev_hash = hash WHERE position = ?",
    "delete": "DELETE FROM events WHERE position = ?",
    "version": _SET + "stream_version = stream_version + 100000 WHERE position = ?",
    "stream": _SET + "stream_id = stream_id || 'z' WHERE position = ?",
    "workflow": _SET + "workflow_id = 'wf-other' WHERE position = ?",
    "no-workflow": _SET + "workflow_id = NULL WHERE position = ?",
    "ts-int": _SET + "timestamp = 5 WHERE position = ?",
    "schema-text": _SET + "schema_version = '1' || 'x' WHERE position = ?",
    "body-text": _SET + "body = CAST(body AS TEXT) WHERE position = ?",
    "prev-empty": _SET + "prev_hash = x'' WHERE position = ?",
    "tail": "DELETE FROM events WHERE position >= ?",
}


def test_clean_ledger_verifies_the_same(signed: Path) -> None:
    with_kernel = _report(signed, kernel=True)
    assert with_kernel["ok"], with_kernel
    assert with_kernel == _report(signed, kernel=False)


@pytest.mark.parametrize("name", sorted(DB_MUTATIONS))
@pytest.mark.parametrize("position", [1, 699, 700, 701, 2048, 2049, 3000, 3048])
def test_damage_reports_are_identical(
    signed: Path, tmp_path: Path, name: str, position: int
) -> None:
    root = tmp_path / "copy"
    (root / "outside").mkdir(parents=True)
    (root / "store").mkdir()
    src, dst = (
        sqlite3.connect(signed / "store" / "ledger.db"),
        sqlite3.connect(root / "store" / "ledger.db"),
    )
    try:
        src.backup(dst)
        with dst:
            dst.execute(DB_MUTATIONS[name], (position,))
    finally:
        src.close()
        dst.close()
    (root / "outside" / "w.note").write_bytes((signed / "outside" / "w.note").read_bytes())
    expected = _report(root, kernel=False)
    assert _report(root, kernel=True) == expected
    if position in {700, 3000}:
        assert _report(root, kernel=True, workers=2) == expected


def test_helper_threads_verify_the_same(signed: Path) -> None:
    store = SQLiteStore(signed / "store")
    try:
        assert store.verify_in_threads == (sqlite_module._KernelReader is not None)
    finally:
        store.close()
    assert _report(signed, kernel=True, workers=3) == _report(signed, kernel=False)


def test_pure_python_switch_turns_the_kernel_off() -> None:
    code = (
        "from tracebound.integrity import verify; from tracebound.store import sqlite;"
        "print(verify._KERNEL is None, sqlite._KernelReader is None)"
    )
    env = {**os.environ, "TRACEBOUND_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "True"]


# -- the append path (same module: these cover the other half of ADR 0007's change) -------------


def _alternate(path: str, me: int, turns: Any, rounds: int) -> None:
    """Append to the shared stream whenever it is this process's turn."""
    store = SQLiteStore(path)
    ids, clock = SequentialIds(namespace=100 + me), FixedClock()
    try:
        for _ in range(rounds):
            turns[me].wait(60)
            turns[me].clear()
            event = Event.create(_cost(me), event_id=ids.new_id(), timestamp=clock.now())
            store.append_batch(
                [
                    AppendRequest(StreamId("shared"), [event]),
                    AppendRequest(StreamId(f"own-{me}"), [event]),
                ]
            )
            turns[1 - me].set()
    finally:
        store.close()


def _check_log(path: Path, expected_size: int) -> None:
    store = SQLiteStore(path)
    try:
        assert store.size() == expected_size
        assert [e.position for e in store.read_log()] == list(range(1, expected_size + 1))
        prev = bytes(32)
        for version, e in enumerate(store.read_stream("shared"), start=1):
            assert (e.stream_version, e.prev_hash) == (version, prev)
            prev = e.hash
        assert verify_module.verify_records(store.read_raw()).size == expected_size
    finally:
        store.close()


def test_two_processes_alternating_on_one_stream(tmp_path: Path) -> None:
    # Each writer caches the log head while PRAGMA data_version says nobody else wrote;
    # strictly alternating writers must see each other's appends every time.
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    path = tmp_path / "store"
    SQLiteStore(path).close()
    turns = [ctx.Event(), ctx.Event()]
    rounds = 15
    procs = [ctx.Process(target=_alternate, args=(str(path), me, turns, rounds)) for me in (0, 1)]
    for p in procs:
        p.start()
    turns[0].set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    _check_log(path, 4 * rounds)


def test_two_connections_alternating_in_one_process(tmp_path: Path) -> None:
    a, b = SQLiteStore(tmp_path / "s"), SQLiteStore(tmp_path / "s")
    ids, clock = SequentialIds(namespace=3), FixedClock()
    try:
        for i in range(20):
            store = a if i % 3 else b
            event = Event.create(_cost(i), event_id=ids.new_id(), timestamp=clock.now())
            store.append("shared", [event], expected_version=i)
    finally:
        a.close()
        b.close()
    _check_log(tmp_path / "s", 20)


def test_append_after_a_rolled_back_append_reuses_the_right_head(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s")
    ids, clock = SequentialIds(namespace=4), FixedClock()

    def event(i: int) -> Event:
        return Event.create(_cost(i), event_id=ids.new_id(), timestamp=clock.now())

    try:
        store.append("x", [event(1)])
        with pytest.raises(Exception, match="version"):
            store.append("x", [event(2)], expected_version=5)
        store.append_batch(
            [AppendRequest(StreamId("x"), [event(3)]), AppendRequest(StreamId("y"), [event(4)])]
        )
    finally:
        store.close()
    _check_log(tmp_path / "s", 3)


def test_new_stores_have_no_workflow_index(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s")
    store.close()
    conn = sqlite3.connect(tmp_path / "s" / "ledger.db")
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    finally:
        conn.close()
    assert "events_by_workflow" not in names


from datetime import UTC, datetime, timedelta, timezone  # noqa: E402

from tracebound.events.catalog import MergeOutcome  # noqa: E402
from tracebound.events.record import event_prefix  # noqa: E402


class _Str(str):
    __slots__ = ()


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**128 - 1),
    st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
        ),
    ),
    st.one_of(st.none(), st.text(max_size=20)),
    st.one_of(st.none(), st.text(max_size=20)),
    st.booleans(),
)
def test_fast_event_equals_validated_event(
    uid: int, when: datetime, workflow: str | None, correlation: str | None, merge: bool
) -> None:
    from uuid import UUID

    assert ledger_module._EVENT_FAST
    payload = (
        MergeOutcome(pr_url="https://example.test/pr/1", decision="merged", reviewer=None)
        if merge
        else _cost(uid % 1000)
    )
    kwargs: dict[str, Any] = {"workflow_id": workflow, "correlation_id": correlation}
    slow = Event.create(payload, event_id=UUID(int=uid), timestamp=when, **kwargs)
    fast = ledger_module._event_fast(payload, UUID(int=uid), when, workflow, correlation)
    assert fast is not None
    assert type(fast) is type(slow)
    assert fast == slow
    assert fast.__dict__ == slow.__dict__
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.model_dump(mode="json") == slow.model_dump(mode="json")
    assert event_prefix(fast) == event_prefix(slow)
    assert fast.timestamp.tzinfo is UTC


def test_fast_event_is_the_same_with_and_without_the_kernels_instance() -> None:
    from unittest.mock import patch
    from uuid import UUID

    when = datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2)))
    slow = Event.create(_cost(3), event_id=UUID(int=9), timestamp=when, workflow_id="w")
    built = []
    for instance in (ledger_module._instance, None):
        with patch.object(ledger_module, "_instance", instance):
            built.append(ledger_module._event_fast(_cost(3), UUID(int=9), when, "w", None))
    for fast in built:
        assert fast is not None
        assert type(fast) is Event
        assert fast == slow
        assert fast.model_fields_set == slow.model_fields_set
        assert fast.__pydantic_extra__ is None
        assert fast.__pydantic_private__ is None
    # Each event owns its fields set: no instance shares another's.
    assert built[0] is not None and built[1] is not None
    assert built[0].__pydantic_fields_set__ is not built[1].__pydantic_fields_set__
    assert type(built[0].__pydantic_fields_set__) is set


def test_fast_event_declines_unusual_inputs() -> None:
    from uuid import UUID

    payload, when, uid = _cost(1), datetime(2026, 1, 1, tzinfo=UTC), UUID(int=5)
    fast = ledger_module._event_fast
    assert fast(payload, uid, when, None, None) is not None
    assert fast(payload, uid, datetime(2026, 1, 1), None, None) is None  # naive
    assert fast(payload, uid, when, _Str("wf"), None) is None
    assert fast(payload, uid, when, None, _Str("c")) is None
    assert fast(payload, str(uid), when, None, None) is None  # type: ignore[arg-type]
