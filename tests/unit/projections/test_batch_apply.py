"""The runner's fast paths keep the slow paths' meaning.

* ``apply_many`` (a projection's batch form of ``apply``) gives exactly the rows ``apply``
  gives event by event, and a failure inside it is still pinned to the failing event;
* the runner applies each page as it is read and across pages, so a failure in a later
  page stops the projection at that event, with the earlier pages committed;
* the SQLite reader's record dicts are the stored records, and a record that cannot be
  decoded stops the projections at that position;
* an ``apply_many`` that raises where ``apply`` does not is reported (once per run) and not
  tried again in that run, so the batch is not replayed at every page.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tracebound.errors import ContractError, IntegrityError
from tracebound.events.catalog import (
    AttemptCompleted,
    BlobErased,
    CostIncurred,
    CostSource,
    MergeOutcome,
    PluginResolved,
    PluginScope,
    SignalKind,
    TrustGatePassed,
)
from tracebound.events.envelope import Event, Payload
from tracebound.events.record import record_dict
from tracebound.ids import AdvisoryId, AttemptId, GateId, PluginId, Sha256Digest, StreamId
from tracebound.projections import ProjectionRunner, SQLiteViews, default_projections
from tracebound.projections.base import Column, EventRecord, Rows, Table
from tracebound.projections.fold import WorkflowStateProjection
from tracebound.projections.memory import MemorySink, project
from tracebound.projections.records import read_records
from tracebound.projections.reports import views_snapshot
from tracebound.projections.trail import AuditTrailProjection
from tracebound.store.port import AppendRequest
from tracebound.store.sqlite import SQLiteStore

T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)


def _payload(i: int) -> Payload:
    match i % 6:
        case 0:
            return CostIncurred(
                tier="direct", amount_usd=Decimal("0.01"), source=CostSource("openai")
            )
        case 1:
            return PluginResolved(
                plugin_id=PluginId(f"p{i % 3}"),
                extends_chain=(PluginId("base"),),
                matched_scope=PluginScope("s"),
                fallback_used=False,
            )
        case 2:
            return TrustGatePassed(
                gate=GateId("tests"), signals={SignalKind("tests_pass"): True}, score=9100
            )
        case 3:
            return AttemptCompleted(
                attempt_id=AttemptId(UUID(int=i)),
                attempt_index=i % 2,
                advisory_id=AdvisoryId("GHSA-1"),
                outcome="AppliedFromLlm",
                trust_outcome_passed=True,
                cost_usd=Decimal("0.02"),
                duration_ms=5,
            )
        case 4:
            return MergeOutcome(pr_url=f"https://x.test/pr/{i}", decision="merged", reviewer=None)
        case _:
            return BlobErased(digest=Sha256Digest("sha256:" + "1" * 64), reason="r")


def _events(n: int) -> list[Event]:
    """Interleaved workflows (runs of one or two events), some without a workflow."""
    out = []
    for i in range(n):
        wf = None if i % 11 == 0 else f"wf-{(i // 2) % 7}"
        out.append(
            Event.create(
                _payload(i),
                event_id=UUID(int=i + 1),
                timestamp=T0 + timedelta(milliseconds=i),
                workflow_id=wf,
            )
        )
    return out


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "ledger", synchronous="NORMAL")
    events = _events(5_000)  # more than one block of the trail, and than one read page
    requests: list[AppendRequest] = []
    for e in events:  # consecutive events of one stream go in one request, in log order
        stream = StreamId(e.workflow_id or "portfolio")
        if requests and requests[-1].stream_id == stream:
            requests[-1] = AppendRequest(stream, [*requests[-1].events, e])
        else:
            requests.append(AppendRequest(stream, [e]))
    store.append_batch(requests)
    yield store
    store.close()


@pytest.mark.parametrize("projection", [WorkflowStateProjection(), AuditTrailProjection()])
def test_apply_many_is_apply_event_by_event(ledger: SQLiteStore, projection: Any) -> None:
    records = list(read_records(ledger))
    expected = project([projection], records)
    sink = MemorySink()
    rows = Rows(sink)
    for begin in range(0, len(records), 777):  # chunks that cut workflows' runs anywhere
        projection.apply_many(records[begin : begin + 777], rows)
    sink.write(projection.tables, rows.drain())
    got = {t.name: sink.rows(t) for t in projection.tables}
    assert _plain(got) == _plain(expected)


def _plain(tables: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    def value(v: Any) -> Any:
        to_dict = getattr(v, "to_dict", None)
        return to_dict() if to_dict is not None else v

    return {
        name: [{k: value(v) for k, v in r.items()} for r in rows] for name, rows in tables.items()
    }


def test_sqlite_reader_yields_the_stored_records(ledger: SQLiteStore) -> None:
    typed = [record_dict(e) for e in ledger.read_log()]
    assert list(read_records(ledger)) == typed
    assert list(read_records(ledger, start=4_000, stop=4_100)) == typed[3_999:4_100]


SEEN = Table("seen_rows", (Column("position", "integer"),), key=("position",))


class Picky:
    """Records every cost's position; fails on one position (``apply_many`` and ``apply``)."""

    name = "picky"
    version = 1
    tables = (SEEN,)
    kinds: frozenset[str] | None = frozenset({"cost_incurred"})

    def __init__(self, bad: int | None, *, many_is_broken: bool = False) -> None:
        self.bad = bad
        self.many_is_broken = many_is_broken
        self.applied = 0  # calls of apply, counted to catch replays
        self.many_calls = 0

    def apply(self, record: EventRecord, rows: Rows) -> None:
        self.applied += 1
        pos = record["position"]
        rows.put(SEEN, (pos,), {"position": pos})
        if pos == self.bad:
            raise ValueError(f"bad cost at {pos}")

    def apply_many(self, records: Sequence[EventRecord], rows: Rows) -> None:
        self.many_calls += 1
        for record in records:
            rows.put(SEEN, (record["position"],), {"position": -1})  # half-done junk
        if self.many_is_broken or any(r["position"] == self.bad for r in records):
            raise RuntimeError("somewhere in this batch")
        for record in records:
            self.apply(record, rows)


def _cost_positions(store: SQLiteStore) -> list[int]:
    return [r["position"] for r in read_records(store) if r["event_type"] == "cost_incurred"]


@pytest.mark.parametrize("bad_index", [0, 1, 400, -1])  # first page, later pages, last
def test_a_failure_inside_apply_many_is_pinned_to_its_event(
    ledger: SQLiteStore, tmp_path: Path, bad_index: int
) -> None:
    costs = _cost_positions(ledger)
    bad = costs[bad_index]
    views = SQLiteViews(tmp_path / "v.db")
    runner = ProjectionRunner(ledger, views, [Picky(bad), *default_projections()])
    with pytest.raises(ContractError, match=rf"'picky' stopped at position {bad} .*ValueError"):
        runner.run()
    status = {s.name: s for s in runner.status()}
    assert (status["picky"].position, status["picky"].failed_position) == (bad - 1, bad)
    assert status["workflow_state"].position == ledger.size()
    assert [r["position"] for r in views.select(SEEN)] == [p for p in costs if p < bad]
    views.close()


def test_a_broken_apply_many_falls_back_to_apply(ledger: SQLiteStore, tmp_path: Path) -> None:
    views = SQLiteViews(tmp_path / "v.db")
    runner = ProjectionRunner(ledger, views, [Picky(None, many_is_broken=True)], batch_size=3_000)
    assert runner.run().events == ledger.size()
    assert [r["position"] for r in views.select(SEEN)] == _cost_positions(ledger)
    views.close()


def _contract_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "tracebound.projections.runner" and r.levelno == logging.WARNING
    ]


def test_a_broken_apply_many_is_reported_once_and_not_retried(
    ledger: SQLiteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    costs = _cost_positions(ledger)
    views = SQLiteViews(tmp_path / "v.db")
    picky = Picky(None, many_is_broken=True)
    # Three pages in the first batch, one in the second: a retry per page would replay.
    runner = ProjectionRunner(ledger, views, [picky], batch_size=4_500)
    with caplog.at_level(logging.WARNING, logger="tracebound.projections.runner"):
        runner.run()
    (warning,) = _contract_warnings(caplog)
    assert "'picky'" in warning and "apply_many" in warning
    assert picky.many_calls == 1
    assert picky.applied == len(costs)  # every event applied once: nothing replayed
    assert [r["position"] for r in views.select(SEEN)] == costs

    # The next run tries apply_many again, and reports it again, once.
    more = [
        Event.create(_payload(0), event_id=UUID(int=10_000 + i), timestamp=T0, workflow_id="wf-9")
        for i in range(3)
    ]
    ledger.append_batch([AppendRequest(StreamId("wf-9"), more)])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tracebound.projections.runner"):
        runner.run()
    assert len(_contract_warnings(caplog)) == 1
    assert picky.many_calls == 2
    assert [r["position"] for r in views.select(SEEN)] == _cost_positions(ledger)
    views.close()


def test_a_failing_event_is_not_reported_as_a_broken_apply_many(
    ledger: SQLiteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = _cost_positions(ledger)[3]
    views = SQLiteViews(tmp_path / "v.db")
    with (
        caplog.at_level(logging.WARNING, logger="tracebound.projections.runner"),
        pytest.raises(ContractError),
    ):
        ProjectionRunner(ledger, views, [Picky(bad)]).run()
    assert _contract_warnings(caplog) == []  # apply failed too: apply_many kept its contract
    views.close()


def test_views_do_not_depend_on_pages_or_batches(ledger: SQLiteStore, tmp_path: Path) -> None:
    snapshots = []
    for batch in (20_000, 1_000, 4_097):
        views = SQLiteViews(tmp_path / f"v{batch}.db")
        ProjectionRunner(ledger, views, batch_size=batch).run()
        snapshots.append(views_snapshot(views))
        views.close()
    assert snapshots[0] == snapshots[1] == snapshots[2]


def test_an_undecodable_record_stops_the_projections_there(
    ledger: SQLiteStore, tmp_path: Path
) -> None:
    bad = 3_000
    with sqlite3.connect(ledger.path) as conn:
        conn.execute("UPDATE events SET body = X'7B6E6F74206A736F6E' WHERE position = ?", (bad,))
    views = SQLiteViews(tmp_path / "v.db")
    runner = ProjectionRunner(ledger, views)
    with pytest.raises(IntegrityError, match=f"position {bad}"):
        runner.run()
    assert {s.position for s in runner.status()} == {bad - 1}
    views.close()
