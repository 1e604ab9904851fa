"""Plugin telemetry (ADR-0031): per plugin, merge rate, fallback rate and cost per PR.

The join is on ``workflow_id``: ``plugin_resolved`` says which plugin a workflow used,
``merge_outcome`` what became of its PRs, ``cost_incurred`` what it cost. Those events can
arrive in any order (a cost before the resolution, say), so the table is kept per workflow
and the per-plugin figures are grouped on read by :func:`plugin_summary`; a workflow that
re-resolves counts under the plugin it resolved to last.

Rates use ROI's definitions (:mod:`tracebound.projections.roi`): a PR landed if it was
``merged`` or ``modified``; merge rate is landed / decided; cost per PR is the plugin's
workflows' cost / landed PRs. Fallback rate is the share of the plugin's workflows that
resolved through the universal fallback.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Any, Final

from tracebound.events.anchor import MONEY_CONTEXT
from tracebound.projections.base import Column, EventRecord, Rows, Table
from tracebound.projections.roi import MONEY_PLACES, RATIO_PLACES, rounded_quotient

__all__ = ["PLUGIN_WORKFLOWS", "UNRESOLVED", "PluginStats", "PluginTelemetry", "plugin_summary"]

UNRESOLVED: Final = "(unresolved)"
"""The plugin key of workflows that spent money or merged without a ``plugin_resolved``."""

PLUGIN_WORKFLOWS = Table(
    "plugin_workflows",
    (
        Column("workflow_id"),
        Column("plugin_id", nullable=True),
        Column("fallback_used", "integer", nullable=True),
        Column("extends_chain", "json", nullable=True),
        Column("cost_usd", "decimal"),
        Column("prs", "integer"),
        Column("merged", "integer"),
        Column("modified", "integer"),
        Column("closed", "integer"),
    ),
    key=("workflow_id",),
    narrow=True,
    indexes=(("plugin_id",),),
)


class PluginTelemetry:
    """Rows of ``plugin_workflows`` from plugin, merge and cost events."""

    name = "plugin_telemetry"
    version = 1
    tables = (PLUGIN_WORKFLOWS,)
    kinds: frozenset[str] | None = frozenset({"plugin_resolved", "merge_outcome", "cost_incurred"})

    def apply(self, record: EventRecord, rows: Rows) -> None:
        wf = record["workflow_id"]
        if wf is None:
            return  # a plugin is resolved per workflow; portfolio costs are ROI's overhead
        row = rows.get(PLUGIN_WORKFLOWS, (wf,))
        if row is None:
            row = {
                "workflow_id": wf,
                "plugin_id": None,
                "fallback_used": None,
                "extends_chain": None,
                "cost_usd": Decimal(0),
                "prs": 0,
                "merged": 0,
                "modified": 0,
                "closed": 0,
            }
        p = record["payload"]
        kind = record["event_type"]
        if kind == "plugin_resolved":
            row["plugin_id"] = p["plugin_id"]
            row["fallback_used"] = int(p["fallback_used"])
            row["extends_chain"] = list(p["extends_chain"])
        elif kind == "merge_outcome":
            row["prs"] += 1
            row[p["decision"]] += 1
        else:
            row["cost_usd"] = MONEY_CONTEXT.add(row["cost_usd"], Decimal(p["amount_usd"]))
        rows.put(PLUGIN_WORKFLOWS, (wf,), row)


@dataclass(frozen=True)
class PluginStats:
    """One plugin's telemetry."""

    plugin_id: str
    workflows: int
    fallback_workflows: int
    decided_prs: int
    landed_prs: int
    cost_usd: Decimal
    merge_rate: Decimal | None
    fallback_rate: Decimal | None
    cost_per_pr_usd: Decimal | None

    def to_dict(self) -> dict[str, Any]:
        def text(v: Decimal | None) -> str | None:
            return None if v is None else format(v, "f")

        return {
            "plugin_id": self.plugin_id,
            "workflows": self.workflows,
            "fallback_workflows": self.fallback_workflows,
            "decided_prs": self.decided_prs,
            "landed_prs": self.landed_prs,
            "cost_usd": text(self.cost_usd),
            "merge_rate": text(self.merge_rate),
            "fallback_rate": text(self.fallback_rate),
            "cost_per_pr_usd": text(self.cost_per_pr_usd),
        }


def plugin_summary(rows: Iterable[Mapping[str, Any]]) -> list[PluginStats]:
    """Per-plugin figures from ``plugin_workflows`` rows, sorted by plugin id."""
    with localcontext(MONEY_CONTEXT):
        return _plugin_summary(rows)


def _plugin_summary(rows: Iterable[Mapping[str, Any]]) -> list[PluginStats]:
    acc: dict[str, list[Any]] = {}
    for row in rows:
        plugin = row["plugin_id"] or UNRESOLVED
        a = acc.setdefault(plugin, [0, 0, 0, 0, Decimal(0)])
        a[0] += 1
        a[1] += 1 if row["fallback_used"] else 0
        landed = row["merged"] + row["modified"]
        a[2] += landed + row["closed"]
        a[3] += landed
        a[4] += Decimal(row["cost_usd"])
    out = []
    for plugin in sorted(acc):
        workflows, fallback, decided, landed, cost = acc[plugin]
        out.append(
            PluginStats(
                plugin_id=plugin,
                workflows=workflows,
                fallback_workflows=fallback,
                decided_prs=decided,
                landed_prs=landed,
                cost_usd=cost,
                merge_rate=rounded_quotient(landed, decided, RATIO_PLACES),
                fallback_rate=None
                if plugin == UNRESOLVED
                else rounded_quotient(fallback, workflows, RATIO_PLACES),
                cost_per_pr_usd=rounded_quotient(cost, landed, MONEY_PLACES),
            )
        )
    return out
