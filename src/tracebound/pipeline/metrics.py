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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Final, NamedTuple

from tracebound.canonical import canonical_bytes
from tracebound.events.anchor import MONEY_CONTEXT
from tracebound.events.catalog import (
    FINAL_RUN_STATUSES,
    BlameAssigned,
    CostIncurred,
    RepairAttempted,
    RunFinished,
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
            # Exact, in plain notation: str() writes a sum below a micro-dollar as "2E-8".
            "cost_usd": format(self.cost_usd, "f"),
            "cost_est_usd": format(self.cost_est_usd, "f"),
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


class _Step(NamedTuple):
    """What the metrics read of a ``step_recorded``: a few numbers, not its payload (the
    payloads of a year's steps held to the end of a pass took 900 MB at 70,000 runs)."""

    position: int
    stream: str
    step_id: str
    role: str
    output: bool  # success or error: an output (a gated or skipped step is not)
    latency_ms: int
    cost_est: Decimal


class _Blame(NamedTuple):
    position: int
    run_id: str
    failed_step_id: str
    failed_role: str
    origin_step_id: str | None
    harmful: bool


_OUTPUTS: Final = frozenset({"success", "error"})


@dataclass
class _Scan:
    """The events metrics need, gathered in one pass over the log.

    A run's steps are counted when the run is done with: at the end of the pass, or, with
    ``close_finished``, when it finishes for good (``FINAL_RUN_STATUSES``: it records
    nothing more, and no take-over can abandon what it recorded), so that a pass over a
    year's runs holds the steps of the runs still open, not all of them. A log in which a
    run records a step (or starts again) after it finished sets :attr:`reopened`: what was
    counted of it cannot be taken back, and the caller reads the log again without closing.
    """

    close_finished: bool = False
    m: RunMetrics = field(default_factory=RunMetrics)
    runs: dict[str, PipelineInfo] = field(default_factory=dict)
    # by position, so that what a take-over abandons can be left out when counted
    open: dict[str, list[_Step]] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    reopened: bool = False
    blames: list[_Blame] = field(default_factory=list)
    repairs: list[tuple[int, str, str]] = field(default_factory=list)
    # Spent, abandoned or not: always counted. Summed per (run, role) as it is read, not
    # kept per event (the log's bulk: 309 MB at 500,000 events); which pipeline a run
    # belongs to is known only at the end, and exact sums regroup to the same totals.
    costs: dict[tuple[str, str], Decimal] = field(default_factory=dict)
    take_overs: TakeOvers = field(default_factory=TakeOvers)

    def add(self, e: RecordedEvent) -> None:
        self.take_overs.add(e)
        p = e.payload
        if isinstance(p, RunStarted | StepRecorded) and p.run_id in self.closed:
            self.reopened = True
        if isinstance(p, RunStarted):
            self.runs[p.run_id] = PipelineInfo(p.pipeline, p.pipeline_type, p.critical)
        elif isinstance(p, StepRecorded):
            step = _Step(
                e.position, e.stream_id, p.step_id, p.role, p.status in _OUTPUTS,
                p.latency_ms, p.cost_est.compute_usd_est,
            )  # fmt: skip
            self.open.setdefault(p.run_id, []).append(step)
        elif isinstance(p, BlameAssigned):
            self.blames.append(
                _Blame(e.position, p.run_id, p.failed_step_id, p.failed_role,
                       p.origin_step_id, p.harmful)
            )  # fmt: skip
        elif isinstance(p, RepairAttempted) and p.succeeded:
            self.repairs.append((e.position, p.run_id, p.origin_step_id))
        elif isinstance(p, CostIncurred):
            key = (e.workflow_id or "", p.role or "unattributed")
            self.costs[key] = MONEY_CONTEXT.add(self.costs.get(key, Decimal(0)), p.amount_usd)
        elif isinstance(p, RunFinished) and self.close_finished:
            self._finished(p, e.stream_id)

    def _finished(self, p: RunFinished, stream: str) -> None:
        held = self.open.get(p.run_id, [])
        # Only the run's own stream is settled by its end (a take-over abandons events of
        # the stream it claims): steps recorded elsewhere keep the run open to the end.
        if p.status not in FINAL_RUN_STATUSES or any(s.stream != stream for s in held):
            return
        self.open.pop(p.run_id, None)
        self.closed.add(p.run_id)
        self._count_steps(p.run_id, held)

    def groups(self, run_id: str, role: str) -> list[GroupMetrics]:
        m = self.m
        out = [m.overall, m.by_role[role]]
        info = self.runs.get(run_id)
        if info is not None:
            out += [m.by_pipeline_type[info.pipeline_type], m.by_pipeline[info.name]]
        return out

    def _count_steps(self, run_id: str, held: list[_Step]) -> None:
        """Count a run's steps: each step's last record, the abandoned ones left out (a later
        entry, after a gate, wins, and a take-over's record is the one that counts, not the
        dead claimant's, nor a step id only the dead claimant recorded, e.g. its repair).

        Abandoned records of steps that really ran add their estimate (it was spent), but
        not the dead claimant's record of the gated step itself: it re-applied the approved
        artifact (the step's function is not called again), whose estimate the take-over's
        record of the same step carries, and counting it would count one artifact twice.
        """
        gone = self.take_overs.abandoned
        final = {s.step_id: s for s in held if s.position not in gone}
        for s in final.values():
            if s.output:
                for g in self.groups(run_id, s.role):
                    g.outputs += 1
                    g.cost_est_usd = MONEY_CONTEXT.add(g.cost_est_usd, s.cost_est)
                    g.latencies_ms.append(s.latency_ms)
        for s in held:
            if s.position in gone and s.output and s.step_id != gone[s.position].step_id:
                for g in self.groups(run_id, s.role):  # spent, though not an output
                    g.cost_est_usd = MONEY_CONTEXT.add(g.cost_est_usd, s.cost_est)

    def finish(self) -> RunMetrics:
        """The metrics of everything read: the runs still open counted, then the blames and
        costs (a run's pipeline is the one its last ``run_started`` names)."""
        m = self.m
        for info in self.runs.values():
            m.pipelines[info.name] = info
        for run_id, held in self.open.items():
            self._count_steps(run_id, held)
        self.open.clear()
        _count_blames(m, self)
        for (run_id, role), amount in self.costs.items():
            for g in self.groups(run_id, role):
                g.cost_usd = MONEY_CONTEXT.add(g.cost_usd, amount)
        return m


def compute_metrics(events: Iterable[RecordedEvent]) -> RunMetrics:
    """Fold recorded events into metrics (one pass; repairs matched at the end)."""
    scan = _Scan()
    for e in events:
        scan.add(e)
    return scan.finish()


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
    a team's own events never reach Python.

    Each run's steps are counted when it finishes, so the pass holds the open runs' steps,
    not the log's; a log in which a finished run records again is read a second time,
    every run's steps kept to the end (the same numbers either way).
    """
    where = RecordFilter(kinds=kinds, workflows=workflows)
    scan = _Scan(close_finished=True)
    for e in decode_known(read_matching(store, where), kinds=kinds):
        scan.add(e)
        if scan.reopened:
            return ledger_metrics(read_matching(store, where), kinds)
    return scan.finish()


def store_slo_violations(store: LogStore, *, pipeline: str | None = None) -> list[SloViolation]:
    """:func:`slo_violations` of :func:`store_metrics` over :data:`SLO_KINDS` (only
    ``pipeline``'s, given: the runner's check after one of its runs), folding only the runs
    of the critical pipelines a blame could put in violation.

    Only a harmful or unresolved blame makes a violation, and a log of a year's runs holds
    few blames but every run's steps: the runner checks the SLOs after every critical run,
    and folding all the steps each time took 30 s and 900 MB at 70,000 runs. The blames are
    read first (none that could break an SLO: no violation), then the blamed runs' starts
    (which pipelines they are of), then the starts that name one of those pipelines, and
    then the records of those pipelines' runs alone: a violation's figures are its
    pipeline's, over all of that pipeline's runs, and nothing else changes them. Like
    ``metrics --pipeline``, this takes a run's records to carry its run id as their
    workflow id, as the runner writes them.
    """
    suspects = {
        p.run_id
        for e in decode_known(read_matching(store, _BLAMES), kinds=_BLAMES.kinds)
        if isinstance(p := e.payload, BlameAssigned) and (p.harmful or p.origin_step_id is None)
    }
    if not suspects:
        return []
    blamed = _starts(read_matching(store, replace(_STARTS, workflows=frozenset(suspects))))
    names = {info.name for run_id, info in blamed.items() if run_id in suspects}
    if pipeline is not None:
        names &= {pipeline}
    if not names:
        return []
    runs = _runs_of(store, frozenset(names))
    last = {info.name: info for info in runs.values()}  # the last run's says critical
    workflows = frozenset(run_id for run_id, info in runs.items() if last[info.name].critical)
    if not workflows:
        return []
    return slo_violations(store_metrics(store, SLO_KINDS, workflows=workflows))


_BLAMES: Final = RecordFilter(kinds=frozenset({"blame_assigned"}))
_STARTS: Final = RecordFilter(kinds=frozenset({"run_started"}))


def _starts(raws: Iterable[RawRecord]) -> dict[str, PipelineInfo]:
    """Each run's pipeline, by its last ``run_started`` (in the order the runs started)."""
    return {
        p.run_id: PipelineInfo(p.pipeline, p.pipeline_type, p.critical)
        for e in decode_known(raws, kinds=_STARTS.kinds)
        if isinstance(p := e.payload, RunStarted)
    }


def _runs_of(store: LogStore, names: frozenset[str]) -> dict[str, PipelineInfo]:
    """The runs of these pipelines, decoding only the starts whose bytes name one of them
    (a year's starts are 70,000 records; decoding them took most of 3 s). A run started
    twice (not what the runner writes) could be named by a start that is not decoded: the
    starts are then all decoded."""
    needles = tuple(b'"pipeline":' + canonical_bytes(name) for name in sorted(names))
    seen: set[str | None] = set()
    twice = False

    def naming() -> Iterator[RawRecord]:
        nonlocal twice
        for raw in read_matching(store, _STARTS):
            twice = twice or raw.workflow_id in seen
            seen.add(raw.workflow_id)
            if any(n in raw.body for n in needles):
                yield raw

    runs = _starts(naming())
    if twice:
        runs = _starts(read_matching(store, _STARTS))
    return {run_id: info for run_id, info in runs.items() if info.name in names}


def _count_blames(m: RunMetrics, scan: _Scan) -> None:
    """Failures, repairs, harmful outputs and unresolved origins, from the counted blames."""
    gone = scan.take_overs.abandoned
    repaired_origins = {(run_id, origin) for pos, run_id, origin in scan.repairs if pos not in gone}
    blames = [b for b in scan.blames if b.position not in gone]
    # harm_rate is harmful *outputs* / outputs: two findings in one output make one harmful
    # output, not two (the rate would pass 1).
    harmful = {(b.run_id, b.failed_step_id): b.failed_role for b in blames if b.harmful}
    for (run_id, _), role in harmful.items():
        for g in scan.groups(run_id, role):
            g.harmful += 1
    for b in blames:
        for g in scan.groups(b.run_id, b.failed_role):
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
