"""The audit trail: ledger and engine histories merged on (timestamp, source rank, sequence)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracebound.errors import ContractError
from tracebound.events.catalog import CostIncurred, CostSource, MergeOutcome
from tracebound.events.envelope import Event
from tracebound.projections import ProjectionRunner, SQLiteViews
from tracebound.projections.reports import trail
from tracebound.projections.trail import (
    ENGINE_RANK,
    LEDGER_RANK,
    TrailEntry,
    merge_trail,
    normalise_timestamp,
    parse_langgraph_checkpoints,
    parse_temporal_history,
)
from tracebound.store.sqlite import SQLiteStore

T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)

TEMPORAL = {
    "events": [
        {
            "eventId": "1",
            "eventTime": "2026-05-18T12:00:00Z",
            "eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED",
            "workflowExecutionStartedEventAttributes": {"workflowType": {"name": "Remediate"}},
        },
        {
            "eventId": "2",
            "eventTime": "2026-05-18T12:00:00.000000500Z",
            "eventType": "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED",
        },
        {
            "eventId": "3",
            "eventTime": "2026-05-18T12:00:01Z",
            "eventType": "EVENT_TYPE_ACTIVITY_TASK_FAILED",
        },
    ]
}
LANGGRAPH = [  # newest first, as checkpointer.list() returns them
    {
        "ts": "2026-05-18T14:00:02.000000+02:00",
        "id": "1ef-2",
        "metadata": {"source": "loop", "step": 1},
    },
    {"ts": "2026-05-18T12:00:02+00:00", "id": "1ef-1", "metadata": {"source": "input", "step": 0}},
]


def test_timestamps_normalise_to_utc_nanoseconds() -> None:
    assert normalise_timestamp("2026-05-18T12:00:00Z") == "2026-05-18T12:00:00.000000000Z"
    assert normalise_timestamp("2026-05-18T12:00:00.123456Z") == "2026-05-18T12:00:00.123456000Z"
    assert normalise_timestamp("2026-05-18T14:00:00.5+02:00") == "2026-05-18T12:00:00.500000000Z"
    assert normalise_timestamp("2026-05-18T00:30:00-01:00") == "2026-05-18T01:30:00.000000000Z"
    with pytest.raises(ContractError):
        normalise_timestamp("2026-05-18 12:00")  # no zone: ambiguous, refused


def test_timestamps_before_year_1000_keep_text_order_and_odd_ones_are_refused() -> None:
    # Was "999-12-31T23:30:00…Z": unpadded, it sorted after "1990-…" in the merged trail.
    assert normalise_timestamp("1000-01-01T00:30:00+01:00") == "0999-12-31T23:30:00.000000000Z"
    assert normalise_timestamp("0001-01-01T00:00:00Z") == "0001-01-01T00:00:00.000000000Z"
    for odd in (
        "2026-02-30T00:00:00Z",  # no such day (was passed through as written)
        "2026-05-18T24:00:00Z",
        "0001-01-01T00:30:00+01:00",  # before year 1 in UTC (was OverflowError)
        "9999-12-31T23:00:00-02:00",  # after year 9999 in UTC (was OverflowError)
        "2026-05-18T12:00:00+99:00",  # no such offset (was ValueError)
    ):
        with pytest.raises(ContractError, match="timestamp"):
            normalise_timestamp(odd)
    with pytest.raises(ContractError, match="timestamp"):  # was a ValueError traceback
        parse_langgraph_checkpoints(
            [{"ts": "2026-05-18T12:00:00+99:00", "id": "1"}], workflow_id="w"
        )


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 2), max_value=datetime(9998, 12, 30), timezones=st.just(UTC)
    ),
    st.datetimes(
        min_value=datetime(1970, 1, 2), max_value=datetime(9998, 12, 30), timezones=st.just(UTC)
    ),
)
def test_normalised_text_order_is_time_order(a: datetime, b: datetime) -> None:
    na, nb = normalise_timestamp(a.isoformat()), normalise_timestamp(b.isoformat())
    assert (na < nb) == (a < b) and (na == nb) == (a == b)


def test_engine_parsers() -> None:
    temporal = parse_temporal_history(TEMPORAL, workflow_id="wf")
    assert [(r["seq"], r["event_type"]) for r in temporal] == [
        (1, "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED"),
        (2, "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED"),
        (3, "EVENT_TYPE_ACTIVITY_TASK_FAILED"),
    ]
    assert temporal[0]["detail"] == {"workflowType": {"name": "Remediate"}}
    graph = parse_langgraph_checkpoints(LANGGRAPH, workflow_id="wf")
    assert [(r["seq"], r["event_type"], r["detail"]["id"]) for r in graph] == [
        (1, "checkpoint.input", "1ef-1"),  # put back in time order
        (2, "checkpoint.loop", "1ef-2"),
    ]
    with pytest.raises(ContractError):
        parse_temporal_history({"events": [{"eventId": "x"}]}, workflow_id="wf")
    with pytest.raises(ContractError):
        parse_langgraph_checkpoints([{"id": "no ts"}], workflow_id="wf")


def test_ties_break_by_source_rank_then_sequence() -> None:
    ts = "2026-05-18T12:00:00.000000000Z"
    ledger = [
        TrailEntry(ts, LEDGER_RANK, 5, "ledger", "cost_incurred", 5),
        TrailEntry(ts, LEDGER_RANK, 2, "ledger", "plugin_resolved", 2),
    ]
    engine = [
        TrailEntry(ts, ENGINE_RANK, 9, "temporal", "B"),
        TrailEntry(ts, ENGINE_RANK, 1, "temporal", "A"),
    ]
    merged = merge_trail(ledger, engine)
    assert [e.event_type for e in merged] == ["A", "B", "plugin_resolved", "cost_incurred"]
    assert merge_trail(engine, ledger) == merged  # the order of sources does not matter


def test_trail_merges_the_ledger_and_the_engine(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "ledger")
    views = SQLiteViews(tmp_path / "views.db")
    try:
        for i, payload in enumerate(
            [
                CostIncurred(
                    tier="direct", amount_usd=Decimal("0.02"), source=CostSource("openai")
                ),
                MergeOutcome(pr_url="https://x/pr/1", decision="merged", reviewer=None),
            ]
        ):
            when = T0 + timedelta(seconds=i)  # 12:00:00 (ties Temporal's start) and 12:00:01
            store.append(
                "wf",
                [Event.create(payload, event_id=UUID(int=i + 1), timestamp=when, workflow_id="wf")],
            )
        store.append(
            "other",
            [
                Event.create(
                    MergeOutcome(pr_url="u", decision="closed", reviewer=None),
                    event_id=UUID(int=9),
                    timestamp=T0,
                    workflow_id="other",
                )
            ],
        )
        ProjectionRunner(store, views).run()
        views.import_engine_history(parse_temporal_history(TEMPORAL, workflow_id="wf"))
        graph = parse_langgraph_checkpoints(LANGGRAPH, workflow_id="wf")
        entries = trail(views, store, "wf", extra_engine_rows=graph)
        assert [(e.source, e.event_type) for e in entries] == [
            ("temporal", "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED"),  # engine first at a tie
            ("ledger", "cost_incurred"),
            ("temporal", "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED"),  # 500 ns later
            ("temporal", "EVENT_TYPE_ACTIVITY_TASK_FAILED"),
            ("ledger", "merge_outcome"),
            ("langgraph", "checkpoint.input"),
            ("langgraph", "checkpoint.loop"),
        ]
        assert entries[1].detail["amount_usd"] == "0.02"  # the payload, read from the ledger
        # importing again replaces, by key: no duplicates
        views.import_engine_history(parse_temporal_history(TEMPORAL, workflow_id="wf"))
        assert len(trail(views, None, "wf")) == 5
    finally:
        views.close()
        store.close()
