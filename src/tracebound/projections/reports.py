"""Reading the views: the queries behind ``tracebound report`` and the dashboard.

Each function reads materialised rows (never the log, except the trail's payloads, which
stay in the ledger under the chain) and returns plain data that renders as a table or JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

from tracebound.errors import ContractError
from tracebound.events.anchor import MONEY_CONTEXT
from tracebound.projections.base import EventRecord, Row, Table
from tracebound.projections.cost import COST_BY_ROLE, COST_LEDGER, UNATTRIBUTED
from tracebound.projections.fold import WORKFLOW_STATE, WorkflowState
from tracebound.projections.gates import GATE_CAUSES, GATE_SCORES, GATE_STATS, ranked
from tracebound.projections.learning import KG_EDGES, KG_NODES
from tracebound.projections.plugins import PLUGIN_WORKFLOWS, PluginStats, plugin_summary
from tracebound.projections.records import RecordDecoder
from tracebound.projections.roi import ROI_WORKFLOWS, RoiSummary, roi_summary
from tracebound.projections.runner import default_projections
from tracebound.projections.sqlite_views import SQLiteViews
from tracebound.projections.trail import (
    AUDIT_TRAIL,
    ENGINE_HISTORY,
    TrailEntry,
    engine_entry,
    ledger_entries,
    merge_trail,
)
from tracebound.store.port import LogStore

__all__ = [
    "all_tables",
    "cost_over_time",
    "cost_rows",
    "gate_report",
    "json_rows",
    "knowledge_graph",
    "plugin_report",
    "roi_report",
    "trail",
    "views_snapshot",
    "workflow_state",
]


def all_tables() -> list[Table]:
    """Every built-in projection's tables, in a fixed order."""
    return [t for p in default_projections() for t in p.tables]


def _json_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, WorkflowState):
        return value.to_dict()
    return value


def json_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows as JSON data: money as decimal strings."""
    return [{k: _json_value(v) for k, v in r.items()} for r in rows]


def views_snapshot(views: SQLiteViews, tables: Sequence[Table] | None = None) -> dict[str, Any]:
    """Every row of every view, ordered by key, as JSON data: what golden files compare."""
    return {
        name: json_rows(rows)
        for name, rows in views.snapshot(tables if tables is not None else all_tables()).items()
    }


def workflow_state(views: SQLiteViews, workflow_id: str) -> WorkflowState | None:
    """The folded state of one workflow, as of the projection's position."""
    rows = views.select(WORKFLOW_STATE, where={"workflow_id": workflow_id})
    return WorkflowState.from_dict(rows[0]["state"]) if rows else None


def cost_rows(views: SQLiteViews, workflow_id: str | None = None) -> list[Row]:
    """Cost ledger rows, optionally of one workflow."""
    where = None if workflow_id is None else {"workflow_id": workflow_id}
    return views.select(COST_LEDGER, where=where)


def cost_over_time(
    views: SQLiteViews, workflow_id: str | None = None, store: LogStore | None = None
) -> list[Row]:
    """Cost by hour and role, oldest first: of every workflow, or of one.

    The ``cost_by_role`` view sums over workflows. One workflow's is summed here, the way
    the view sums, from the workflow's ``cost_incurred`` events: their positions from its
    audit trail, their payloads from the ledger (``store``, required then).
    """
    if workflow_id is None:
        return views.select(COST_BY_ROLE, order_by=("hour", "role"))
    if store is None:
        raise ContractError("one workflow's cost over time is read from the ledger: pass store")
    positions = [
        e.position
        for e in ledger_entries(views.select(AUDIT_TRAIL, where={"workflow_id": workflow_id}))
        if e.event_type == "cost_incurred" and e.position is not None
    ]
    acc: dict[tuple[str, str], Row] = {}
    for record in _ledger_records(store, positions):
        p = record["payload"]
        hour, role = record["timestamp"][:13], p.get("role") or UNATTRIBUTED
        row = acc.setdefault(
            (hour, role), {"hour": hour, "role": role, "amount_usd": Decimal(0), "events": 0}
        )
        row["amount_usd"] = MONEY_CONTEXT.add(row["amount_usd"], Decimal(p["amount_usd"]))
        row["events"] += 1
    return [acc[k] for k in sorted(acc)]


def _ledger_records(store: LogStore, positions: Iterable[int]) -> Iterator[EventRecord]:
    """The records at these positions (each read and decoded alone), in the given order."""
    decoder = RecordDecoder()
    for position in positions:
        for raw in store.read_raw(start=position, stop=position):
            yield decoder.decode_raw(raw)


def roi_report(views: SQLiteViews, workflow_id: str | None = None) -> RoiSummary:
    """Headline ROI ratios, over every workflow or one."""
    where = None if workflow_id is None else {"workflow_id": workflow_id}
    return roi_summary(views.select(ROI_WORKFLOWS, where=where))


def plugin_report(views: SQLiteViews, workflow_id: str | None = None) -> list[PluginStats]:
    """Per-plugin telemetry, over every workflow or one."""
    where = None if workflow_id is None else {"workflow_id": workflow_id}
    return plugin_summary(views.select(PLUGIN_WORKFLOWS, where=where))


def gate_report(views: SQLiteViews) -> dict[str, Any]:
    """Gate verdicts, score histograms, ranked failing signals, retry and refusal causes."""
    causes = views.select(GATE_CAUSES)
    return {
        "gates": views.select(GATE_STATS),
        "scores": views.select(GATE_SCORES),
        "failing_signals": ranked(causes, "failing_signal"),
        "retry_causes": ranked(causes, "retry_signal"),
        "refusal_causes": ranked(causes, "refusal"),
    }


def knowledge_graph(views: SQLiteViews) -> dict[str, list[Row]]:
    """The learning write-back, as node and edge rows."""
    return {"nodes": views.select(KG_NODES), "edges": views.select(KG_EDGES)}


def trail(
    views: SQLiteViews,
    store: LogStore | None,
    workflow_id: str,
    *,
    extra_engine_rows: Iterable[Mapping[str, Any]] = (),
) -> list[TrailEntry]:
    """One workflow's audit trail: ledger and engine events merged in the one total order.

    With ``store`` given, each ledger entry's detail is its payload, read from the ledger
    (not copied into the views). ``extra_engine_rows`` merges an engine history that was
    parsed but not imported.
    """
    ledger = ledger_entries(views.select(AUDIT_TRAIL, where={"workflow_id": workflow_id}))
    if store is not None:
        decoder = RecordDecoder()
        with_detail = []
        for entry in ledger:
            assert entry.position is not None
            raws = list(store.read_raw(start=entry.position, stop=entry.position))
            payload = decoder.decode_raw(raws[0])["payload"] if raws else None
            with_detail.append(
                TrailEntry(
                    entry.timestamp,
                    entry.rank,
                    entry.seq,
                    entry.source,
                    entry.event_type,
                    entry.position,
                    payload,
                )
            )
        ledger = with_detail
    engine = [
        engine_entry(r) for r in views.select(ENGINE_HISTORY, where={"workflow_id": workflow_id})
    ]
    engine += [engine_entry(r) for r in extra_engine_rows if r["workflow_id"] == workflow_id]
    return merge_trail(ledger, engine)
