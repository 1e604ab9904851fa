"""Trust-gate observability: verdicts, score histograms, retry causes, failing signals.

"Why did the gate decide that?" is answered by the events themselves (their full signal sets
are in the log); this projection answers the aggregate questions: how often each gate
passes, where its scores fall, which signals fail most, and what retries and refusals were
caused by.

* ``gate_stats``: per gate, passed / failed / retries requested.
* ``gate_scores``: a histogram of scores per gate and verdict, in ten buckets of 1 000 basis
  points (``bucket`` is the bucket's lower bound; a perfect 10 000 falls in the 9 000 bucket).
* ``gate_causes``: counts by (``kind``, gate, cause), where ``kind`` is ``failing_signal``
  (a signal named by ``trust_gate_failed``), ``retry_signal`` (a signal that caused a
  ``retry_requested``) or ``refusal`` (an ``attempt_refused`` cause; gate ``""``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, TypeAlias

from tracebound.projections.base import Column, EventRecord, Rows, Table

__all__ = [
    "BUCKET_BP",
    "GATE_CAUSES",
    "GATE_SCORES",
    "GATE_STATS",
    "CauseKind",
    "TrustGateProjection",
    "bucket_of",
    "ranked",
]

BUCKET_BP: Final = 1_000
CauseKind: TypeAlias = Literal["failing_signal", "retry_signal", "refusal"]

GATE_STATS = Table(
    "gate_stats",
    (
        Column("gate"),
        Column("passed", "integer"),
        Column("failed", "integer"),
        Column("retries", "integer"),
    ),
    key=("gate",),
    narrow=True,
)
GATE_SCORES = Table(
    "gate_scores",
    (Column("gate"), Column("verdict"), Column("bucket", "integer"), Column("count", "integer")),
    key=("gate", "verdict", "bucket"),
    narrow=True,
)
GATE_CAUSES = Table(
    "gate_causes",
    (Column("kind"), Column("gate"), Column("cause"), Column("count", "integer")),
    key=("kind", "gate", "cause"),
    narrow=True,
)


def bucket_of(score: int) -> int:
    """The lower bound of the score's bucket: 0, 1 000, ... 9 000 (10 000 goes in 9 000)."""
    return min(score // BUCKET_BP, 9) * BUCKET_BP


def _bump(rows: Rows, table: Table, key: tuple[Any, ...], column: str) -> None:
    row = rows.get(table, key)
    if row is None:
        row = dict(zip(table.key, key, strict=True))
        for c in table.columns:
            if c.name not in row:
                row[c.name] = 0
    row[column] += 1
    rows.put(table, key, row)


class TrustGateProjection:
    """Rows of the three gate tables from gate, retry and refusal events."""

    name = "trust_gates"
    version = 1
    tables = (GATE_STATS, GATE_SCORES, GATE_CAUSES)
    kinds: frozenset[str] | None = frozenset(
        {"trust_gate_passed", "trust_gate_failed", "retry_requested", "attempt_refused"}
    )

    def apply(self, record: EventRecord, rows: Rows) -> None:
        p = record["payload"]
        kind = record["event_type"]
        if kind == "attempt_refused":
            _bump(rows, GATE_CAUSES, ("refusal", "", p["cause"]), "count")
            return
        gate = p["gate"]
        if kind == "retry_requested":
            _bump(rows, GATE_STATS, (gate,), "retries")
            for signal in p["failing_signals"]:
                _bump(rows, GATE_CAUSES, ("retry_signal", gate, signal), "count")
            return
        passed = kind == "trust_gate_passed"
        _bump(rows, GATE_STATS, (gate,), "passed" if passed else "failed")
        verdict = "passed" if passed else "failed"
        _bump(rows, GATE_SCORES, (gate, verdict, bucket_of(p["score"])), "count")
        if not passed:
            for signal in p["failing_signals"]:
                _bump(rows, GATE_CAUSES, ("failing_signal", gate, signal), "count")


def ranked(
    rows: Iterable[Mapping[str, Any]], kind: CauseKind, *, by_gate: bool = False
) -> list[tuple[str, int]]:
    """Causes of one kind, most frequent first (ties by name), summed over gates.

    With ``by_gate`` the cause is ``gate/cause``, so one gate's flaky signal stands apart.
    """
    counts: dict[str, int] = {}
    for row in rows:
        if row["kind"] != kind:
            continue
        cause = f"{row['gate']}/{row['cause']}" if by_gate and row["gate"] else row["cause"]
        counts[cause] = counts.get(cause, 0) + row["count"]
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
