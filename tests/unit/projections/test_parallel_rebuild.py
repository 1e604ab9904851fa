"""A rebuild split over worker processes ends in exactly the views a serial rebuild makes."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.bench_projections import _events_for

from tracebound.errors import ContractError
from tracebound.ids import StreamId
from tracebound.projections import ProjectionRunner, SQLiteViews, default_projections
from tracebound.projections.records import RecordDecoder, read_records
from tracebound.projections.reports import views_snapshot
from tracebound.projections.runner import _split
from tracebound.store.port import AppendRequest
from tracebound.store.sqlite import SQLiteStore


@pytest.fixture
def ledger(tmp_path: Path) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "ledger.db", synchronous="NORMAL")
    store.append_batch([AppendRequest(StreamId(f"wf-{i:07d}"), _events_for(i)) for i in range(40)])
    return store


def test_parallel_rebuild_equals_serial(ledger: SQLiteStore, tmp_path: Path) -> None:
    serial = ProjectionRunner(ledger, SQLiteViews(tmp_path / "serial.db"), batch_size=37)
    serial.rebuild()
    expected = views_snapshot(serial.views)
    parallel = ProjectionRunner(ledger, SQLiteViews(tmp_path / "parallel.db"), batch_size=37)
    report = parallel.rebuild(workers=2)
    assert report.events == ledger.size()
    assert views_snapshot(parallel.views) == expected
    # every projection stands at the head, and running again changes nothing
    assert {s.position for s in parallel.status()} == {ledger.size()}
    assert parallel.run().events == 0
    assert views_snapshot(parallel.views) == expected
    serial.views.close()
    parallel.views.close()


def test_workers_must_be_positive(ledger: SQLiteStore, tmp_path: Path) -> None:
    runner = ProjectionRunner(ledger, SQLiteViews(tmp_path / "v.db"))
    with pytest.raises(ContractError):
        runner.rebuild(workers=0)
    runner.views.close()


def test_split_balances_and_keeps_every_projection() -> None:
    projections = default_projections()
    groups = _split(projections, 2)
    assert len(groups) == 2
    assert sorted(p.name for g in groups for p in g) == sorted(p.name for p in projections)
    # the fold (every payload) and the audit trail (every envelope) are split apart
    where = {p.name: i for i, g in enumerate(groups) for p in g}
    assert where["workflow_state"] != where["audit_trail"]


def test_payloads_are_skipped_only_for_kinds_nobody_reads(ledger: SQLiteStore) -> None:
    full = list(read_records(ledger))
    some = list(read_records(ledger, decoder=RecordDecoder(), payload_kinds={"cost_incurred"}))
    assert len(full) == len(some)
    for a, b in zip(full, some, strict=True):
        if a["event_type"] == "cost_incurred":
            assert a == b
        else:
            assert b["payload"] is None
            # the envelope columns only: every field it has is the full record's
            assert {k: a[k] for k in b if k != "payload"} == {
                k: v for k, v in b.items() if k != "payload"
            }
            assert set(b) == {
                "event_type",
                "payload",
                "position",
                "schema_version",
                "stream_id",
                "stream_version",
                "timestamp",
                "workflow_id",
            }
