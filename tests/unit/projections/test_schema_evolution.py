"""Schema evolution through the projections: a new variant breaks nothing; a renamed field is
served by an upcaster during the migration window (ADR-0034, "Schema evolution discipline")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, Literal
from uuid import UUID

import pytest

from tracebound.errors import ContractError
from tracebound.events import EventRegistry, default_registry
from tracebound.events.catalog import (
    BUILTIN_PAYLOAD_TYPES,
    CostIncurred,
    CostSource,
    MergeOutcome,
)
from tracebound.events.envelope import Event, Payload
from tracebound.projections import ProjectionRunner, SQLiteViews, default_projections
from tracebound.projections.base import Column, EventRecord, Rows, Table
from tracebound.projections.reports import views_snapshot
from tracebound.store.sqlite import SQLiteStore

T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)


class DeployNoted(Payload):
    """A variant added by user code after the projections were written."""

    kind: Literal["deploy_noted"] = "deploy_noted"
    environment: str


if "deploy_noted" not in default_registry():
    default_registry().register(DeployNoted)


class ReviewV1(Payload):
    """Version 1 of a user type: the reviewer was called ``by``."""

    kind: Literal["review_left"] = "review_left"
    by: str
    verdict: str


class ReviewV2(Payload):
    """Version 2 renamed ``by`` to ``reviewer``; v1 records are upcast on read."""

    SCHEMA_VERSION: ClassVar[int] = 2
    kind: Literal["review_left"] = "review_left"
    reviewer: str
    verdict: str


def _rename_by(v1: dict[str, Any]) -> dict[str, Any]:
    out = dict(v1)
    out["reviewer"] = out.pop("by")
    return out


REVIEWS = Table(
    "reviews",
    (Column("reviewer"), Column("count", "integer")),
    key=("reviewer",),
)


class ReviewsByReviewer:
    """A projection written against v2: it only knows ``reviewer``."""

    name = "reviews"
    version = 1
    tables = (REVIEWS,)
    kinds: frozenset[str] | None = frozenset({"review_left"})

    def apply(self, record: EventRecord, rows: Rows) -> None:
        who = record["payload"]["reviewer"]
        row = rows.get(REVIEWS, (who,)) or {"reviewer": who, "count": 0}
        row["count"] += 1
        rows.put(REVIEWS, (who,), row)


def _event(i: int, payload: Payload) -> Event:
    return Event.create(
        payload, event_id=UUID(int=i), timestamp=T0 + timedelta(seconds=i), workflow_id="wf"
    )


def _v2_registry() -> EventRegistry:
    reg = EventRegistry()
    for cls in BUILTIN_PAYLOAD_TYPES:
        reg.register(cls)
    reg.register(ReviewV2)
    reg.register_upcaster("review_left", 1, _rename_by)
    return reg


def test_a_new_variant_flows_through_and_is_ignored(tmp_path: Path) -> None:
    base = [
        CostIncurred(tier="direct", amount_usd=Decimal("0.5"), source=CostSource("x")),
        MergeOutcome(pr_url="u", decision="merged", reviewer=None),
    ]
    with_new = [base[0], DeployNoted(environment="prod"), base[1], DeployNoted(environment="eu")]
    snapshots = []
    for name, payloads in (("plain", base), ("extended", with_new)):
        store = SQLiteStore(tmp_path / name)
        views = SQLiteViews(tmp_path / f"{name}.db")
        for i, p in enumerate(payloads):
            store.append("wf", [_event(i + 1, p)])
        ProjectionRunner(store, views, default_projections()).run()
        snapshots.append(views_snapshot(views))
        views.close()
        store.close()
    plain, extended = snapshots
    for table in ("cost_ledger", "roi_workflows", "plugin_workflows", "gate_stats", "kg_nodes"):
        assert plain[table] == extended[table], table
    # the fold counts the new kind and the trail shows it, in order
    state = extended["workflow_state"][0]["state"]
    assert (state["events"], state["other_events"]) == (4, 2)
    kinds = [e[2] for e in extended["audit_trail"][0]["entries"]]
    assert kinds == ["cost_incurred", "deploy_noted", "merge_outcome", "deploy_noted"]


def test_old_records_are_upcast_for_the_projections(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "ledger")
    # Written during the migration window: v1 records first, then v2 ones.
    store.append("wf", [_event(1, ReviewV1(by="ana", verdict="ok"))])
    store.append("wf", [_event(2, ReviewV1(by="bo", verdict="ok"))])
    store.append("wf", [_event(3, ReviewV2(reviewer="ana", verdict="nit"))])
    raw_versions = [r.schema_version for r in store.read_raw()]
    assert raw_versions == [1, 1, 2]  # the stored bytes keep the version they were written at
    views = SQLiteViews(tmp_path / "views.db")
    runner = ProjectionRunner(store, views, [ReviewsByReviewer()], registry=_v2_registry())
    runner.run()
    assert views.select(REVIEWS) == [
        {"reviewer": "ana", "count": 2},
        {"reviewer": "bo", "count": 1},
    ]
    views.close()
    store.close()


def test_without_an_upcaster_the_projection_stops_at_the_old_record(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "ledger")
    store.append("wf", [_event(1, ReviewV2(reviewer="ana", verdict="ok"))])
    store.append("wf", [_event(2, ReviewV1(by="bo", verdict="ok"))])
    reg = EventRegistry()
    reg.register(ReviewV2)  # no upcaster registered: v1 cannot be read
    views = SQLiteViews(tmp_path / "views.db")
    runner = ProjectionRunner(store, views, [ReviewsByReviewer()], registry=reg)
    with pytest.raises(ContractError, match="position 2"):
        runner.run()
    (status,) = runner.status()
    assert (status.position, status.failed_position) == (1, 2)
    assert views.select(REVIEWS) == [{"reviewer": "ana", "count": 1}]
    views.close()
    store.close()
