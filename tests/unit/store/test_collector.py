"""store/collector.py: large appends pause the cyclic collector, and always restore it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import pytest

from tracebound import FixedClock, Ledger, SequentialIds, SQLiteStore
from tracebound.errors import ConcurrencyConflict
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.ids import StreamId
from tracebound.store import sqlite as sqlite_module
from tracebound.store.collector import paused_collector
from tracebound.store.port import AppendRequest


class _WatchingIds(SequentialIds):
    """Ids that note whether the collector ran while each one was drawn."""

    def __init__(self) -> None:
        super().__init__(namespace=3)
        self.seen: list[bool] = []

    def new_id(self) -> UUID:
        self.seen.append(gc.isenabled())
        return super().new_id()


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    store = SQLiteStore(tmp_path / "ledger")
    ledger = Ledger(store, clock=FixedClock(), ids=_WatchingIds())
    yield ledger
    ledger.close()
    gc.enable()


def _costs(n: int) -> list[CostIncurred]:
    return [
        CostIncurred(tier="direct", amount_usd=Decimal(i), source=CostSource("s")) for i in range(n)
    ]


def _seen(ledger: Ledger) -> list[bool]:
    ids = ledger.ids
    assert isinstance(ids, _WatchingIds)
    return ids.seen


def test_a_large_record_runs_without_the_collector_and_restores_it(ledger: Ledger) -> None:
    ledger.record("s", _costs(3))
    assert _seen(ledger) == [True] * 3  # small: not worth pausing
    _seen(ledger).clear()
    ledger.record("s", _costs(600))
    assert _seen(ledger) == [False] * 600
    assert gc.isenabled()


def test_a_failed_record_restores_the_collector(ledger: Ledger) -> None:
    with pytest.raises(ConcurrencyConflict):
        ledger.record("s", _costs(600), expected_version=5)
    assert gc.isenabled()
    assert ledger.store.size() == 0


def test_a_collector_the_program_disabled_stays_disabled(ledger: Ledger) -> None:
    gc.disable()
    ledger.record("s", _costs(600))
    assert not gc.isenabled()


# The pipelined append is the C writer's; without it append_batch is the plain path, which
# Ledger.record pauses the collector around instead (the tests above).
@pytest.mark.skipif(
    sqlite_module._KernelWriter is None,
    reason="the C kernel is not built (or TRACEBOUND_PURE_PYTHON is set)",
)
def test_the_stores_pipelined_append_pauses_it_too(ledger: Ledger) -> None:
    events = [ledger.event(p) for p in _costs(600)]
    store = ledger.store
    assert isinstance(store, SQLiteStore)
    collections: list[str] = []

    def note(phase: str, info: dict[str, int]) -> None:
        collections.append(phase)

    requests = [AppendRequest(StreamId("s"), events)]
    forget = gc.callbacks.remove  # bound now: the first allocation after the call collects
    gc.collect()
    gc.callbacks.append(note)
    try:
        recorded = store.append_batch(requests)
    finally:
        forget(note)
    # Running, the collector would have run several times over the 600 events' thousands
    # of objects (the returned ones alone are more than its threshold of 700); paused, it
    # runs once, as it resumes.
    assert collections.count("start") <= 1
    assert len(recorded) == 600
    assert gc.isenabled()
    assert store.size() == 600


def test_nested_pauses_end_with_the_collector_running() -> None:
    with paused_collector():
        assert not gc.isenabled()
        with paused_collector():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
