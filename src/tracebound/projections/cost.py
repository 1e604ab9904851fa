"""The cost ledger (ADR-0024): ``fold(CostIncurred)`` into rows by workflow, tier and source.

Money is summed as :class:`~decimal.Decimal` from the ledger's decimal strings, so a million
sub-cent charges add up to the cent they should.

Tokens are split into disjoint columns that add up, because the common way to get LLM cost
wrong is to count a token twice or not at all (cached input reported beside the input and
charged twice, reasoning tokens left out of the output). The catalog fixes the reading:
``cached_input_tokens`` is a part of ``tokens_in`` and ``reasoning_tokens`` a part of
``tokens_out``. So::

    input_uncached + input_cached     == tokens_in
    output_visible + output_reasoning == tokens_out

Tokens written to a provider's prompt cache are uncached input (they were not read from
the cache) billed at a premium, so ``input_uncached`` is broken down further:
``input_cache_write`` (written for the short retention) and ``input_cache_write_long``
(Anthropic's 1-hour cache) are parts of it, from the catalog's
``cache_write_input_tokens`` and its part ``cache_write_long_input_tokens``.

A second table keeps cost by role and hour, for "who
spent it, and when" (the cost-over-time chart).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Final

from tracebound.events.anchor import MONEY_CONTEXT
from tracebound.projections.base import Column, EventRecord, Rows, Table

__all__ = ["COST_BY_ROLE", "COST_LEDGER", "NO_WORKFLOW", "UNATTRIBUTED", "CostLedgerProjection"]

NO_WORKFLOW: Final = ""
"""The workflow key of portfolio-level costs (``workflow_id`` null in the envelope)."""

UNATTRIBUTED: Final = "unattributed"
"""The role key of a cost whose producer did not name a role."""

_TOKEN_COLUMNS: Final = (
    "input_uncached",
    "input_cached",
    "input_cache_write",
    "input_cache_write_long",
    "output_visible",
    "output_reasoning",
)

COST_LEDGER = Table(
    "cost_ledger",
    (
        Column("workflow_id"),
        Column("tier"),
        Column("source"),
        Column("amount_usd", "decimal"),
        Column("events", "integer"),
        Column("events_without_tokens", "integer"),
        Column("tokens_in", "integer"),
        Column("tokens_out", "integer"),
        *(Column(name, "integer") for name in _TOKEN_COLUMNS),
        Column("first_at"),
        Column("last_at"),
    ),
    key=("workflow_id", "tier", "source"),
    narrow=True,
)

COST_BY_ROLE = Table(
    "cost_by_role",
    (
        Column("hour"),
        Column("role"),
        Column("amount_usd", "decimal"),
        Column("events", "integer"),
    ),
    key=("hour", "role"),
    narrow=True,
)


def _new_ledger_row(wf: str, tier: str, source: str, at: str) -> dict[str, Any]:
    row: dict[str, Any] = {
        "workflow_id": wf,
        "tier": tier,
        "source": source,
        "amount_usd": Decimal(0),
        "events": 0,
        "events_without_tokens": 0,
        "tokens_in": 0,
        "tokens_out": 0,
        "first_at": at,
        "last_at": at,
    }
    for name in _TOKEN_COLUMNS:
        row[name] = 0
    return row


class CostLedgerProjection:
    """Rows of ``cost_ledger`` and ``cost_by_role`` from ``cost_incurred`` events."""

    name = "cost_ledger"
    version = 2  # 2: the columns of cache writes, parts of input_uncached
    tables = (COST_LEDGER, COST_BY_ROLE)
    kinds: frozenset[str] | None = frozenset({"cost_incurred"})

    def apply(self, record: EventRecord, rows: Rows) -> None:
        p = record["payload"]
        wf = record["workflow_id"] or NO_WORKFLOW
        at: str = record["timestamp"]
        amount = Decimal(p["amount_usd"])
        tier, source = p["tier"], p["source"]
        row = rows.get(COST_LEDGER, (wf, tier, source))
        if row is None:
            row = _new_ledger_row(wf, tier, source, at)
        row["amount_usd"] = MONEY_CONTEXT.add(row["amount_usd"], amount)
        row["events"] += 1
        row["last_at"] = at
        tokens_in = p.get("tokens_in")
        tokens_out = p.get("tokens_out")
        if tokens_in is None and tokens_out is None:
            row["events_without_tokens"] += 1
        if tokens_in is not None:
            cached = p.get("cached_input_tokens") or 0
            written = p.get("cache_write_input_tokens") or 0
            written_long = p.get("cache_write_long_input_tokens") or 0
            row["tokens_in"] += tokens_in
            row["input_cached"] += cached
            row["input_uncached"] += tokens_in - cached
            row["input_cache_write"] += written - written_long
            row["input_cache_write_long"] += written_long
        if tokens_out is not None:
            reasoning = p.get("reasoning_tokens") or 0
            row["tokens_out"] += tokens_out
            row["output_reasoning"] += reasoning
            row["output_visible"] += tokens_out - reasoning
        rows.put(COST_LEDGER, (wf, tier, source), row)

        hour = at[:13]  # "YYYY-MM-DDTHH": the record's timestamp is always this form, in UTC
        role = p.get("role") or UNATTRIBUTED
        by_role = rows.get(COST_BY_ROLE, (hour, role))
        if by_role is None:
            by_role = {"hour": hour, "role": role, "amount_usd": Decimal(0), "events": 0}
        by_role["amount_usd"] = MONEY_CONTEXT.add(by_role["amount_usd"], amount)
        by_role["events"] += 1
        rows.put(COST_BY_ROLE, (hour, role), by_role)
