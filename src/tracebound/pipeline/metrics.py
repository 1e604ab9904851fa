"""Blame, repair and harm metrics, plus cost and latency per step, computed from the ledger.

Nothing here is kept in memory between calls: every number is a fold over recorded events
(``RunStarted``, ``StepRecorded``, ``BlameAssigned``, ``RepairAttempted``,
``CostIncurred``), so two readers of the same ledger always agree.

* ``repair_rate(role)`` = repaired failures / failures, for failures of steps of that role;
  a failure is repaired when a later ``RepairAttempted`` for its origin succeeded.
* ``harm_rate(role)`` = harmful outputs / outputs; harmful means the output broke a
  constraint or introduced a regression (a failed test), not merely that the step crashed.
  An output with several harmful findings is one harmful output.
* A rate over nothing (no failures, no outputs) is ``None``, not 0.
* ``unresolved_origin(role)`` = failures of that role's steps with no attributed origin.
* SLO guardrails: a *critical* pipeline with harm_rate > 0 or unresolved_origin > 0 is in
  violation (:func:`slo_violations`).

A run taken over (``resume --take-over``) holds two sets of records after its gate: the dead
claimant's, abandoned by the take-over, and the take-over's (:mod:`tracebound.events.takeover`).
Outputs, failures, blame, repairs, harm and latency come from the take-over's alone, so a run
is counted once. Costs count both: ``cost_usd`` (``CostIncurred``) is never dropped, and
``cost_est_usd`` adds each abandoned *execution*'s estimate (the dead claimant's record of
the gated step re-applied the approved artifact, whose cost the take-over's record carries).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final

from tracebound.events.anchor import MONEY_CONTEXT
from tracebound.events.catalog import (
    BlameAssigned,
    CostIncurred,
    RepairAttempted,
    RunStarted,
    StepRecorded,
)
from tracebound.events.envelope import RecordedEvent
from tracebound.events.record import RawRecord, decode_known
from tracebound.events.takeover import TAKE_OVER_KINDS, TakeOvers
from tracebound.store.port import LogStore, RecordFilter, read_matching

__all__ = [
    "METRICS_KINDS",
    "SLO_KINDS",
    "GroupMetrics",
    "RunMetrics",
    "SloViolation",
    "compute_metrics",
    "ledger_metrics",
    "shown",
    "slo_violations",
    "store_metrics",
    "store_slo_violations",
]

METRICS_KINDS: Final = TAKE_OVER_KINDS | {
    "run_started",
    "step_recorded",
    "blame_assigned",
    "repair_attempted",
    "cost_incurred",
}
"""The event types :func:`compute_metrics` reads: the rest of a log changes none of its
numbers, so a reader of a big log decodes only these (:func:`ledger_metrics`)."""

SLO_KINDS: Final = METRICS_KINDS - {"cost_incurred"}
"""What :func:`slo_violations` depends on: harm and blame, not what was spent (costs are
most of an LLM pipeline's log)."""

_MICRO = Decimal("0.000001")  # what the report shows of a rate or an amount


@dataclass
class GroupMetrics:
    """Counters for one group of steps (a role, a pipeline type, or everything)."""

    outputs: int = 0
    failures: int = 0
    repaired: int = 0
    harmful: int = 0
    unresolved: int = 0
    cost_est_usd: Decimal = Decimal(0)
    cost_usd: Decimal = Decimal(0)
    latencies_ms: list[int] = field(default_factory=list)

    # Every ratio is divided in MONEY_CONTEXT, not the caller's thread context: the SLO
    # alert's value is hashed into the ledger and must not depend on who computed it.
    @property
    def repair_rate(self) -> Decimal | None:
        return _ratio(Decimal(self.repaired), self.failures)

    @property
    def harm_rate(self) -> Decimal | None:
        return _ratio(Decimal(self.harmful), self.outputs)

    @property
    def mean_latency_ms(self) -> Decimal | None:
        return _ratio(Decimal(sum(self.latencies_ms)), len(self.latencies_ms))

    @property
    def cost_per_step_usd(self) -> Decimal | None:
        return _ratio(self.cost_usd, self.outputs)

    @property
    def cost_est_per_step_usd(self) -> Decimal | None:
        return _ratio(self.cost_est_usd, self.outputs)

    def as_dict(self) -> dict[str, object]:
        return {
            "outputs": self.outputs,
            "failures": self.failures,
            "repaired": self.repaired,
            "harmful": self.harmful,
            "unresolved_origin": self.unresolved,
            "repair_rate": shown(self.repair_rate),
            "harm_rate": shown(self.harm_rate),
            "cost_usd": str(self.cost_usd),
            "cost_est_usd": str(self.cost_est_usd),
            "cost_per_step_usd": shown(self.cost_per_step_usd),
            "cost_est_per_step_usd": shown(self.cost_est_per_step_usd),
            "mean_latency_ms": shown(self.mean_latency_ms),
        }


def _ratio(num: Decimal, den: int) -> Decimal | None:
    """``num / den``, or None over nothing (0/0 is no rate, not a rate of 0)."""
    return None if not den else MONEY_CONTEXT.divide(num, den)


def shown(value: Decimal | None) -> str | None:
    """A rate or an amount as the report writes it: to the micro-unit, plain notation."""
    if value is None:
        return None
    exact = value.quantize(_MICRO, context=MONEY_CONTEXT).normalize(MONEY_CONTEXT)
    return format(exact, "f")  # 100, never 1E+2


@dataclass
class PipelineInfo:
    name: str
    pipeline_type: str
    critical: bool


@dataclass
class RunMetrics:
    """All metrics, by role, by pipeline type, by pipeline, and overall."""

    overall: GroupMetrics = field(default_factory=GroupMetrics)
    by_role: dict[str, GroupMetrics] = field(default_factory=lambda: defaultdict(GroupMetrics))
    by_pipeline_type: dict[str, GroupMetrics] = field(
        default_factory=lambda: defaultdict(GroupMetrics)
    )
    by_pipeline: dict[str, GroupMetrics] = field(default_factory=lambda: defaultdict(GroupMetrics))
    unresolved_by_pipeline_role: dict[tuple[str, str], int] = field(
        default_factory=lambda: defaultdict(int)
    )
    pipelines: dict[str, PipelineInfo] = field(default_factory=dict)

    def unresolved_origin(self, role: str) -> int:
        return self.by_role[role].unresolved if role in self.by_role else 0

    def as_dict(self) -> dict[str, object]:
        return {
            "overall": self.overall.as_dict(),
            "by_role": {k: v.as_dict() for k, v in sorted(self.by_role.items())},
            "by_pipeline_type": {k: v.as_dict() for k, v in sorted(self.by_pipeline_type.items())},
            "by_pipeline": {k: v.as_dict() for k, v in sorted(self.by_pipeline.items())},
        }


@dataclass
class _Scan:
    """The events metrics need, gathered in one pass over the log."""

    runs: dict[str, PipelineInfo] = field(default_factory=dict)
    # by position, so that what a take-over abandons can be left out at the end
    steps: list[tuple[int, StepRecorded]] = field(default_factory=list)
    blames: list[tuple[int, BlameAssigned]] = field(default_factory=list)
    repairs: list[tuple[int, RepairAttempted]] = field(default_factory=list)
    # Spent, abandoned or not: always counted. Summed per (run, role) as it is read, not
    # kept per event (the log's bulk: 309 MB at 500,000 events); which pipeline a run
    # belongs to is known only at the end, and exact sums regroup to the same totals.
    costs: dict[tuple[str, str], Decimal] = field(default_factory=dict)
    take_overs: TakeOvers = field(default_factory=TakeOvers)

    def add(self, e: RecordedEvent) -> None:
        self.take_overs.add(e)
        p = e.payload
        if isinstance(p, RunStarted):
            self.runs[p.run_id] = PipelineInfo(p.pipeline, p.pipeline_type, p.critical)
        elif isinstance(p, StepRecorded):
            self.steps.append((e.position, p))
        elif isinstance(p, BlameAssigned):
            self.blames.append((e.position, p))
        elif isinstance(p, RepairAttempted) and p.succeeded:
            self.repairs.append((e.position, p))
        elif isinstance(p, CostIncurred):
            key = (e.workflow_id or "", p.role or "unattributed")
            self.costs[key] = MONEY_CONTEXT.add(self.costs.get(key, Decimal(0)), p.amount_usd)

    def final_steps(self) -> dict[tuple[str, str], StepRecorded]:
        """Each step's last record, the abandoned ones left out: a later entry (after a
        gate) wins, and a take-over's record is the one that counts, not the dead
        claimant's (nor a step id only the dead claimant recorded, e.g. its repair)."""
        gone = self.take_overs.abandoned
        return {(p.run_id, p.step_id): p for pos, p in self.steps if pos not in gone}

    def abandoned_executions(self) -> list[StepRecorded]:
        """Abandoned records of steps that really ran: their cost was spent. The dead
        claimant's record of the gated step itself re-applied the approved artifact (the
        step's function is not called again), whose estimate the take-over's record of
        the same step carries: counting it would count one artifact twice."""
        gone = self.take_overs.abandoned
        return [
            p
            for pos, p in self.steps
            if pos in gone and p.status in {"success", "error"} and p.step_id != gone[pos].step_id
        ]


def compute_metrics(events: Iterable[RecordedEvent]) -> RunMetrics:
    """Fold recorded events into metrics (one pass; repairs matched at the end)."""
    scan = _Scan()
    for e in events:
        scan.add(e)
    m = RunMetrics()
    run_pipeline = scan.runs
    for info in run_pipeline.values():
        m.pipelines[info.name] = info

    def groups(run_id: str, role: str) -> list[GroupMetrics]:
        out = [m.overall, m.by_role[role]]
        info = run_pipeline.get(run_id)
        if info is not None:
            out += [m.by_pipeline_type[info.pipeline_type], m.by_pipeline[info.name]]
        return out

    for step in scan.final_steps().values():
        if step.status in {"success", "error"}:
            for g in groups(step.run_id, step.role):
                g.outputs += 1
                g.cost_est_usd = MONEY_CONTEXT.add(g.cost_est_usd, step.cost_est.compute_usd_est)
                g.latencies_ms.append(step.latency_ms)
    for step in scan.abandoned_executions():
        for g in groups(step.run_id, step.role):
            # spent, though not an output
            g.cost_est_usd = MONEY_CONTEXT.add(g.cost_est_usd, step.cost_est.compute_usd_est)
    _count_blames(m, scan, groups)
    for (run_id, role), amount in scan.costs.items():
        for g in groups(run_id, role):
            g.cost_usd = MONEY_CONTEXT.add(g.cost_usd, amount)
    return m


def ledger_metrics(raws: Iterable[RawRecord], kinds: frozenset[str] = METRICS_KINDS) -> RunMetrics:
    """:func:`compute_metrics` of stored records, decoding only the ``kinds`` it reads
    (:data:`SLO_KINDS` is enough for :func:`slo_violations`), one record at a time."""
    return compute_metrics(decode_known(raws, kinds=kinds))


def store_metrics(
    store: LogStore,
    kinds: frozenset[str] = METRICS_KINDS,
    *,
    workflows: frozenset[str] | None = None,
) -> RunMetrics:
    """:func:`ledger_metrics` of a store's whole log (only the records of these workflows,
    given), the records of other types left in the store: SQLite and PostgreSQL filter by
    their event type column (the one :func:`decode_known` reads), so a big log's costs and
    a team's own events never reach Python."""
    where = RecordFilter(kinds=kinds, workflows=workflows)
    return ledger_metrics(read_matching(store, where), kinds)


def store_slo_violations(store: LogStore) -> list[SloViolation]:
    """:func:`slo_violations` of :func:`store_metrics` over :data:`SLO_KINDS`, the steps
    read only when a blame could break an SLO.

    Only a harmful or unresolved blame makes a violation, and a log of a year's runs holds
    few blames but every run's steps: the runner checks the SLOs after every critical run,
    and folding all the steps each time (38 s and 900 MB at 70,000 runs) bought nothing
    while no such blame exists. When one does, the whole fold runs, as before, for the
    rates the alert states.
    """
    blames = read_matching(store, RecordFilter(kinds=_BLAME_KINDS))
    if not any(
        isinstance(p := e.payload, BlameAssigned) and (p.harmful or p.origin_step_id is None)
        for e in decode_known(blames, kinds=_BLAME_KINDS)
    ):
        return []
    return slo_violations(store_metrics(store, SLO_KINDS))


_BLAME_KINDS: Final = frozenset({"blame_assigned"})


def _count_blames(
    m: RunMetrics, scan: _Scan, groups: Callable[[str, str], list[GroupMetrics]]
) -> None:
    """Failures, repairs, harmful outputs and unresolved origins, from the counted blames."""
    gone = scan.take_overs.abandoned
    repaired_origins = {(p.run_id, p.origin_step_id) for pos, p in scan.repairs if pos not in gone}
    blames = [b for pos, b in scan.blames if pos not in gone]
    # harm_rate is harmful *outputs* / outputs: two findings in one output make one harmful
    # output, not two (the rate would pass 1).
    harmful = {(b.run_id, b.failed_step_id): b.failed_role for b in blames if b.harmful}
    for (run_id, _), role in harmful.items():
        for g in groups(run_id, role):
            g.harmful += 1
    for b in blames:
        for g in groups(b.run_id, b.failed_role):
            g.failures += 1
            g.unresolved += int(b.origin_step_id is None)
            repaired = (
                b.origin_step_id is not None and (b.run_id, b.origin_step_id) in repaired_origins
            )
            g.repaired += int(repaired)
        if b.origin_step_id is None and b.run_id in scan.runs:
            m.unresolved_by_pipeline_role[(scan.runs[b.run_id].name, b.failed_role)] += 1


@dataclass(frozen=True)
class SloViolation:
    pipeline: str
    pipeline_type: str
    metric: str
    value: str
    role: str | None = None

    def describe(self) -> str:
        where = f" ({self.role})" if self.role else ""
        return f"{self.pipeline}: {self.metric}{where} = {self.value} (must be 0)"


def slo_violations(m: RunMetrics) -> list[SloViolation]:
    """Critical pipelines with harm_rate > 0 or unresolved_origin > 0."""
    out: list[SloViolation] = []
    for name, info in sorted(m.pipelines.items()):
        if not info.critical:
            continue
        group = m.by_pipeline.get(name)
        if group is not None and group.harmful > 0:
            # the figure the report shows; a harmful output with no counted output (a blame
            # on a gated step) still breaks the SLO, and says what it counted
            rate = shown(group.harm_rate) or f"{group.harmful}/0"
            out.append(SloViolation(name, info.pipeline_type, "harm_rate", rate))
        for (pipeline, role), count in sorted(m.unresolved_by_pipeline_role.items()):
            if pipeline == name and count > 0:
                out.append(
                    SloViolation(name, info.pipeline_type, "unresolved_origin", str(count), role)
                )
    return out
