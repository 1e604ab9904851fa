"""ROI (ADR-0026): cost joined with merge outcomes, per workflow; ratios computed on read.

The materialised table holds, per workflow, what it cost and what became of its pull
requests. The headline ratios are computed from those rows by :func:`roi_summary` rather
than stored, because a ratio of sums cannot be updated row by row and the rows are few.

Definitions (also in docs/projections.md):

* a PR *landed* if its decision is ``merged`` or ``modified`` (merged after a reviewer
  changed it); ``closed`` did not land;
* **merge rate** = landed / decided; **modification rate** = modified / landed;
  **closed rate** = closed / decided;
* **cost per merged PR** = all cost (workflow-scoped and portfolio overhead) / landed PRs;
* **cost of unmerged work** = cost of workflows whose PRs were all closed; workflows with
  no outcome yet are reported apart as **pending cost**.

Ratios are :class:`~decimal.Decimal` rounded half-even to 4 places (money to 6), once, from
the exact quotient; a ratio with a zero denominator is ``None``, not zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any, Final

from tracebound.events.anchor import MONEY_CONTEXT
from tracebound.projections.base import Column, EventRecord, Rows, Table
from tracebound.projections.cost import NO_WORKFLOW

__all__ = ["ROI_WORKFLOWS", "RoiProjection", "RoiSummary", "roi_summary", "rounded_quotient"]

ROI_WORKFLOWS = Table(
    "roi_workflows",
    (
        Column("workflow_id"),
        Column("cost_usd", "decimal"),
        Column("prs", "integer"),
        Column("merged", "integer"),
        Column("modified", "integer"),
        Column("closed", "integer"),
        Column("last_decision", nullable=True),
    ),
    key=("workflow_id",),
    narrow=True,
)

RATIO_PLACES: Final = 4
MONEY_PLACES: Final = 6


def _new_row(wf: str) -> dict[str, Any]:
    return {
        "workflow_id": wf,
        "cost_usd": Decimal(0),
        "prs": 0,
        "merged": 0,
        "modified": 0,
        "closed": 0,
        "last_decision": None,
    }


class RoiProjection:
    """Rows of ``roi_workflows`` from ``cost_incurred`` and ``merge_outcome`` events."""

    name = "roi"
    version = 1
    tables = (ROI_WORKFLOWS,)
    kinds: frozenset[str] | None = frozenset({"cost_incurred", "merge_outcome"})

    def apply(self, record: EventRecord, rows: Rows) -> None:
        wf = record["workflow_id"] or NO_WORKFLOW
        row = rows.get(ROI_WORKFLOWS, (wf,))
        if row is None:
            row = _new_row(wf)
        p = record["payload"]
        if record["event_type"] == "cost_incurred":
            row["cost_usd"] = MONEY_CONTEXT.add(row["cost_usd"], Decimal(p["amount_usd"]))
        else:
            decision = p["decision"]
            row["prs"] += 1
            row[decision] += 1
            row["last_decision"] = decision
        rows.put(ROI_WORKFLOWS, (wf,), row)


def rounded_quotient(num: Decimal | int, den: int, places: int) -> Decimal | None:
    """``num / den`` rounded half-even to ``places`` decimals, exactly; ``None`` if ``den`` is 0.

    Computed as a fraction, not in a decimal context: dividing in MONEY_CONTEXT and then
    quantizing raised InvalidOperation once the result had more than its 200 digits (a
    cost of 1E+196 USD per PR), and rounded twice (to 200 digits, then to ``places``).
    """
    if den == 0:
        return None
    scaled = round(Fraction(num) * 10**places / den)  # round() of a Fraction is half-even
    return Decimal(f"{scaled}E-{places}")  # the constructor is exact, whatever the length


def _ratio(num: int, den: int) -> Decimal | None:
    return rounded_quotient(num, den, RATIO_PLACES)


@dataclass(frozen=True)
class RoiSummary:
    """Headline ratios and the diagnostics behind them."""

    workflows: int
    decided_prs: int
    merged: int
    modified: int
    closed: int
    total_cost_usd: Decimal
    overhead_cost_usd: Decimal
    cost_per_merged_pr_usd: Decimal | None
    merge_rate: Decimal | None
    modification_rate: Decimal | None
    closed_rate: Decimal | None
    unmerged_cost_usd: Decimal
    pending_cost_usd: Decimal
    unattributed_prs: int = 0
    """Merge outcomes recorded with no ``workflow_id``: ROI joins outcomes to cost by
    workflow, so these are in no rate; counted so that they are seen, not lost."""

    def to_dict(self) -> dict[str, Any]:
        def text(v: Decimal | None) -> str | None:
            return None if v is None else format(v, "f")

        return {
            "workflows": self.workflows,
            "decided_prs": self.decided_prs,
            "merged": self.merged,
            "modified": self.modified,
            "closed": self.closed,
            "total_cost_usd": text(self.total_cost_usd),
            "overhead_cost_usd": text(self.overhead_cost_usd),
            "cost_per_merged_pr_usd": text(self.cost_per_merged_pr_usd),
            "merge_rate": text(self.merge_rate),
            "modification_rate": text(self.modification_rate),
            "closed_rate": text(self.closed_rate),
            "unmerged_cost_usd": text(self.unmerged_cost_usd),
            "pending_cost_usd": text(self.pending_cost_usd),
            "unattributed_prs": self.unattributed_prs,
        }


def roi_summary(rows: Iterable[Mapping[str, Any]]) -> RoiSummary:
    """The headline ratios over ``roi_workflows`` rows (all of them, or a filtered set)."""
    with localcontext(MONEY_CONTEXT):
        return _roi_summary(rows)


def _roi_summary(rows: Iterable[Mapping[str, Any]]) -> RoiSummary:
    workflows = merged = modified = closed = unattributed = 0
    total = overhead = unmerged = pending = Decimal(0)
    for row in rows:
        cost = Decimal(row["cost_usd"])
        total += cost
        if row["workflow_id"] == NO_WORKFLOW:
            overhead += cost
            unattributed += row["prs"]
            continue
        workflows += 1
        merged += row["merged"]
        modified += row["modified"]
        closed += row["closed"]
        if row["prs"] == 0:
            pending += cost
        elif row["merged"] + row["modified"] == 0:
            unmerged += cost
    landed = merged + modified
    decided = landed + closed
    per_pr = rounded_quotient(total, landed, MONEY_PLACES)
    return RoiSummary(
        workflows=workflows,
        decided_prs=decided,
        merged=merged,
        modified=modified,
        closed=closed,
        total_cost_usd=total,
        overhead_cost_usd=overhead,
        cost_per_merged_pr_usd=per_pr,
        merge_rate=_ratio(landed, decided),
        modification_rate=_ratio(modified, landed),
        closed_rate=_ratio(closed, decided),
        unmerged_cost_usd=unmerged,
        pending_cost_usd=pending,
        unattributed_prs=unattributed,
    )
