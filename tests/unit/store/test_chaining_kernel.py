"""The C append loop (``chain_request``, ``recorded``, ``blake3_one``) against store/_chaining.py.

``chain_rows`` and ``recorded_events`` run their per-event loops in the C kernel when it is
built. These tests hold the kernel to the Python loops byte for byte: the same rows (the
record bytes, the BLAKE3 links, every column), the same heads and positions, the same
``RecordedEvent`` objects; and they check that the kernel hands back to Python (``None``)
whatever it was not written for, instead of guessing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any
from uuid import UUID

import pytest
from blake3 import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

from tracebound.canonical import canonical_bytes
from tracebound.errors import ConcurrencyConflict
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.events.envelope import Event
from tracebound.events.record import LedgerFields, event_prefix
from tracebound.ids import StepId, StreamId
from tracebound.integrity import _kernel
from tracebound.integrity.chain import GENESIS
from tracebound.store import _chaining
from tracebound.store._chaining import (
    Chained,
    Prepared,
    PreparedRequest,
    chain_rows,
    prepare_requests,
    recorded_events,
)
from tracebound.store.port import AppendRequest
from tracebound.store.sqlite import SQLiteStore

if _kernel.KERNEL is None:
    pytest.skip("the C kernel is not built (or switched off)", allow_module_level=True)

K: ModuleType = _kernel.KERNEL


def _both(
    batch: list[PreparedRequest], position: int, heads: dict[str, tuple[int, bytes]]
) -> tuple[Chained, Chained]:
    def head_of(sid: str) -> tuple[int, bytes]:
        return heads.get(sid, (0, GENESIS))

    assert _chaining._chain_request is not None
    in_c = chain_rows(batch, position, head_of)
    saved = _chaining._chain_request
    _chaining._chain_request = None
    try:
        in_python = chain_rows(batch, position, head_of)
    finally:
        _chaining._chain_request = saved
    return in_c, in_python


_text = st.text(alphabet='abcXYZ019:/-_ é"\\\n\t\x00☃𝄞', min_size=1, max_size=40)
_times = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
)


@st.composite
def _events(draw: st.DrawFn) -> Event:
    return Event.create(
        CostIncurred(
            tier="direct",
            amount_usd=draw(st.decimals(min_value=0, max_value=10**6, places=6)),
            source=CostSource(draw(_text)),
            tokens_in=draw(st.integers(0, 2**40)),
            tokens_out=1,
            model=draw(_text),
            role="Executor",
            step_id=StepId(draw(_text)),
        ),
        event_id=UUID(int=draw(st.integers(0, 2**128 - 1))),
        timestamp=draw(_times),
        workflow_id=draw(st.one_of(st.none(), _text)),
        correlation_id=draw(st.one_of(st.none(), _text)),
    )


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", 'c"é\\', "𝄞\n"]), st.lists(_events(), max_size=4)),
        min_size=1,
        max_size=5,
    ),
    st.integers(0, 2**62),
    st.dictionaries(
        st.sampled_from(["a", "b", 'c"é\\']),
        st.tuples(st.integers(0, 2**62), st.binary(min_size=32, max_size=32)),
    ),
)
def test_chain_rows_in_c_equal_python(
    requests: list[tuple[str, list[Event]]],
    position: int,
    heads: dict[str, tuple[int, bytes]],
) -> None:
    batch = prepare_requests(
        [AppendRequest(StreamId(sid), events, None) for sid, events in requests]
    )
    in_c, in_python = _both(batch, position, heads)
    assert in_c == in_python
    # and each body is the canonical record (prefix + suffix == canonical_bytes(record)).
    for row in in_c.rows:
        assert row[8] == blake3(row[7] + row[9]).digest()
    assert [type(v) for row in in_c.rows for v in row] == [
        type(v) for row in in_python.rows for v in row
    ]


@pytest.fixture(scope="module")
def writer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A kernel Writer on a store file of its own (each example rolls back)."""
    store = SQLiteStore(tmp_path_factory.mktemp("chain-async") / "s")
    yield store._writer().db
    store.close()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_events(), max_size=40),
    st.sampled_from(["a", 'c"é\\', "𝄞\n"]),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.binary(min_size=32, max_size=32),
)
def test_chain_async_chains_what_chain_request_chains(
    writer: Any, events: list[Event], sid: str, position: int, version: int, prev: bytes
) -> None:
    """The worker writes each body and digest (the rows come back before it has), then
    inserts them: after wait() the rows equal chain_request's, and so does the table."""
    items = [Prepared(e) for e in events]
    sid_json = canonical_bytes(sid)
    want = K.chain_request(items, sid, sid_json, position, version, prev)
    writer.exec("BEGIN IMMEDIATE")
    try:
        got = writer.chain_async(items, sid, sid_json, position, version, prev)
        # The writer holds what it reads: the caller's list and items may change meanwhile.
        spare = _one()
        for item in items:
            item.prefix, item.fields = b"{}", spare.fields
        items.clear()
        writer.wait()
        assert got == want
        assert writer.int_query("SELECT COUNT(*) FROM events") == len(events)
    finally:
        writer.wait()
        writer.exec("ROLLBACK")


def test_chain_async_holds_what_its_worker_reads_until_wait(writer: Any) -> None:
    """The worker reads each item's prefix, timestamp and workflow bytes without the GIL:
    the writer holds a reference to each until wait(), so a caller that drops or replaces
    them meanwhile frees nothing the worker still reads."""
    item = _one()
    parts = (item.prefix, item.fields.timestamp, item.fields.workflow_id)
    before = [sys.getrefcount(part) for part in parts]
    writer.exec("BEGIN IMMEDIATE")
    try:
        assert writer.chain_async([item], "s", canonical_bytes("s"), 0, 0, GENESIS) is not None
        assert [sys.getrefcount(part) for part in parts] == [n + 1 for n in before]
        writer.wait()
        assert [sys.getrefcount(part) for part in parts] == before
    finally:
        writer.wait()
        writer.exec("ROLLBACK")


_FINALIZER_SCRIPT = """
import gc, sys, tempfile
from pathlib import Path
from tracebound.canonical import canonical_bytes
from tracebound.integrity._kernel import KERNEL
from tracebound.integrity.chain import GENESIS
from tracebound.store.sqlite import SQLiteStore
from tests.unit.store.test_chaining_kernel import _one

store = SQLiteStore(Path(tempfile.mkdtemp()) / "s")
db = store._writer().db
sid_json = canonical_bytes("s")
for api in ("chain_request", "chain_async"):
    for offset in range(40):
        items = [_one() for _ in range(3)]
        victim, spare = items[2], _one().fields
        class Bomb:
            def __del__(self) -> None:
                victim.fields = spare  # frees the old fields: its timestamp_text and bytes
        gc.disable()
        gc.collect()
        bomb = Bomb()
        bomb.me = bomb
        del bomb
        gc.set_threshold(gc.get_count()[0] + offset)
        gc.enable()
        db.exec("BEGIN IMMEDIATE")
        if api == "chain_async":
            out = db.chain_async(items, "s", sid_json, 0, 0, GENESIS)
            db.wait()
        else:
            out = KERNEL.chain_request(items, "s", sid_json, 0, 0, GENESIS)
        gc.disable()
        gc.set_threshold(700)
        db.exec("ROLLBACK")
        rows = out[0]
        # Each row holds one of the values its item had while it was read, never freed memory.
        assert all(row[5] == "2026-01-01T00:00:00.000000Z" for row in rows), rows
store.close()
print("ok")
"""


def test_a_finalizer_that_drops_an_items_values_mid_call_frees_nothing_in_use(
    tmp_path: Path,
) -> None:
    """Building rows allocates; an allocation may run the cyclic GC, and a finalizer it runs
    may replace an item's fields, freeing the old values. The C loops hold what they read
    (in a debug allocator, which poisons freed memory, using a freed value crashes)."""
    done = subprocess.run(
        [sys.executable, "-c", _FINALIZER_SCRIPT],
        env={**os.environ, "PYTHONMALLOC": "debug"},
        cwd=Path(__file__).parents[3],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_recorded_events_in_c_equal_python() -> None:
    events = [
        Event.create(
            CostIncurred(
                tier="direct",
                amount_usd=Decimal("0.5"),
                source=CostSource("s"),
                tokens_in=i,
                tokens_out=2,
                model="m",
                role="Executor",
                step_id=StepId("x"),
            ),
            event_id=UUID(int=i + 1),
            timestamp=datetime(2026, 1, 1, tzinfo=UTC),
            workflow_id=None if i % 2 else "wf",
        )
        for i in range(7)
    ]
    batch = prepare_requests(
        [
            AppendRequest(StreamId("a"), events[:3], None),
            AppendRequest(StreamId("b"), events[3:], 0),
        ]
    )
    done = chain_rows(batch, 10, lambda sid: (0, GENESIS))
    in_c = recorded_events(batch, done.rows)
    saved = _chaining._recorded
    _chaining._recorded = None
    try:
        in_python = recorded_events(batch, done.rows)
    finally:
        _chaining._recorded = saved
    assert in_c == in_python
    for x, y in zip(in_c, in_python, strict=True):
        assert type(x) is type(y)
        assert list(x.__dict__.items()) == list(y.__dict__.items())  # same keys, same order
        assert x.__pydantic_fields_set__ == y.__pydantic_fields_set__
        assert type(x.__pydantic_fields_set__) is set
        assert x.__pydantic_fields_set__ is not in_c[0].__pydantic_fields_set__ or x is in_c[0]
        assert x.__pydantic_extra__ is None and x.__pydantic_private__ is None
        assert x.model_dump() == y.model_dump()
    with pytest.raises(ValueError, match="rows for"):
        recorded_events(batch, done.rows[:-1])


def _one() -> Prepared:
    event = Event.create(
        CostIncurred(
            tier="direct",
            amount_usd=Decimal(1),
            source=CostSource("s"),
            tokens_in=1,
            tokens_out=1,
            model="m",
            role="Executor",
            step_id=StepId("x"),
        ),
        event_id=UUID(int=1),
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return Prepared(event)


class _Bytes(bytes):
    pass


def test_kernel_leaves_unusual_inputs_to_python() -> None:
    item = _one()
    sid_json = canonical_bytes("s")
    assert K.chain_request([item], "s", sid_json, 0, 0, GENESIS) is not None
    # a previous hash that is not exactly 32 plain bytes
    assert K.chain_request([item], "s", sid_json, 0, 0, GENESIS[:31]) is None
    assert K.chain_request([item], "s", sid_json, 0, 0, _Bytes(GENESIS)) is None
    # a position or version at the end of 64 bits
    assert K.chain_request([item], "s", sid_json, 2**63 - 1, 0, GENESIS) is None
    # a schema version beyond 64 bits, a prefix that is a bytes subclass, a missing value
    odd = _one()
    odd.fields.schema_version = 2**70
    assert K.chain_request([item, odd], "s", sid_json, 0, 0, GENESIS) is None
    odd = _one()
    odd.prefix = _Bytes(odd.prefix)
    assert K.chain_request([odd], "s", sid_json, 0, 0, GENESIS) is None
    odd = _one()
    odd.values = {k: v for k, v in odd.values.items() if k != "workflow_id"}
    assert K.chain_request([odd], "s", sid_json, 0, 0, GENESIS) is None


def test_chain_rows_falls_back_and_still_matches() -> None:
    odd = _one()
    odd.fields.schema_version = 2**70  # the kernel declines; Python formats it
    batch = [PreparedRequest("s", None, [_one(), odd])]
    in_c, in_python = _both(batch, 2**63 - 5, {})
    assert in_c == in_python
    assert b'"schema_version":%d' % 2**70 in in_c.rows[1][9]


def test_conflicts_are_the_same() -> None:
    batch = [PreparedRequest("s", 3, [_one()])]
    for impl in (_chaining._chain_request, None):
        saved = _chaining._chain_request
        _chaining._chain_request = impl
        try:
            with pytest.raises(ConcurrencyConflict) as caught:
                chain_rows(batch, 0, lambda sid: (2, GENESIS))
        finally:
            _chaining._chain_request = saved
        assert (caught.value.expected, caught.value.actual) == (3, 2)


def test_prefix_and_fields_are_what_the_kernel_reads() -> None:
    item = _one()
    (row,), *_ = K.chain_request([item], "s", canonical_bytes("s"), 4, 1, GENESIS)
    event = Event.create(
        item.values["payload"],
        event_id=item.values["event_id"],
        timestamp=item.values["timestamp"],
    )
    fields = LedgerFields(event)
    assert row[9].startswith(event_prefix(event))
    assert row[5] == fields.timestamp_text
    assert row[:3] == (5, "s", 2)


@pytest.mark.parametrize(
    "n", [0, 1, 31, 32, 33, 63, 64, 65, 1023, 1024, 1025, 1054, 2048, 3073, 9000, 70_000]
)
def test_blake3_one_matches_official(n: int) -> None:
    data = bytes((i * 7 + 3) % 251 for i in range(n))
    for level in range(K.blake3_levels()[1] + 1):
        previous = K.blake3_levels()[0]
        K.set_blake3_level(level)
        try:
            assert K.blake3_one(GENESIS, data) == blake3(GENESIS + data).digest()
            assert K.blake3_one(b"", data) == blake3(data).digest()
            assert K.blake3_one(data[: n // 2], data[n // 2 :]) == blake3(data).digest()
        finally:
            K.set_blake3_level(previous)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000), st.binary(max_size=40))
def test_blake3_one_fuzzed(body: bytes, prev: bytes) -> None:
    assert K.blake3_one(prev, body) == blake3(prev + body).digest()


def _store_rows(path: Path) -> list[tuple[object, ...]]:
    store = SQLiteStore(path, synchronous="NORMAL")
    try:
        for round_ in range(3):
            events = [
                Event.create(
                    CostIncurred(
                        tier="direct",
                        amount_usd=Decimal(f"0.{round_}{i}"),
                        source=CostSource("s"),
                        tokens_in=i,
                        tokens_out=1,
                        model="m",
                        role="Executor",
                        step_id=StepId(f"step-{i}"),
                    ),
                    event_id=UUID(int=100 * round_ + i + 1),
                    timestamp=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i),
                    workflow_id="wf",
                )
                for i in range(5)
            ]
            store.append_batch(
                [
                    AppendRequest(StreamId("a"), events[:2], None),
                    AppendRequest(StreamId("b"), events[2:], None),
                ]
            )
        conn = store._conn()
        return list(conn.execute("SELECT * FROM events ORDER BY position"))
    finally:
        store.close()


def test_store_writes_the_same_rows_with_and_without_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_kernel = _store_rows(tmp_path / "c")
    monkeypatch.setattr(_chaining, "_chain_request", None)
    monkeypatch.setattr(_chaining, "_recorded", None)
    assert _store_rows(tmp_path / "py") == with_kernel
    assert len(with_kernel) == 15
