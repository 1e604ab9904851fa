"""OpenTelemetry metrics for pipelines: from the ledger after the fact, or live from a Runner.

The design record's metrics hooks: counters for steps, gate triggers and redactions,
histograms of latency and cost, exported to the telemetry sink a team already runs. The
instruments (names are this package's, under ``tracebound.pipeline.*``):

============================================ ========= =========================================
instrument                                   kind      attributes
============================================ ========= =========================================
``tracebound.pipeline.steps``                counter   role, status, pipeline_type
``tracebound.pipeline.gate_triggers``        counter   role, pipeline_type
``tracebound.pipeline.resumes``              counter   decision, take_over, pipeline_type
``tracebound.pipeline.abandoned_steps``      counter   role, status, pipeline_type
``tracebound.pipeline.redacted_steps``       counter   reason, role, pipeline_type
``tracebound.pipeline.repairs``              counter   role (of the origin), succeeded,
                                                       pipeline_type
``tracebound.pipeline.slo_alerts``           counter   metric, role, pipeline_type
``tracebound.pipeline.step.latency``         histogram role, pipeline_type (unit ms)
``tracebound.pipeline.step.cost``            histogram role, pipeline_type (unit USD)
``tracebound.redactions``                    counter   reason (observed from RedactionStats)
============================================ ========= =========================================

Attribute keys are ``tracebound.role``, ``tracebound.step.status``,
``tracebound.pipeline.type`` and so on. A step's latency and cost are recorded once per
output (``success`` or ``error``); a ``gated`` record is a pause, not an output, so it
counts as a step but is not measured. A resume is counted once per run it claimed: one
that found the run claimed already recorded nothing.

A take-over (``resume --take-over``, ``tracebound.resume.take_over`` true on its resume)
abandons what the dead claimant recorded after its claim, and records those steps again
(:mod:`tracebound.events.takeover`). A counter cannot un-count, and the dead claimant's
steps did run (their latency and cost were real, and a live hook in its process counted
them), so ``steps`` and the histograms keep them; ``abandoned_steps`` counts them again when
the take-over is recorded, by the role and status they were recorded with. The run's own
step outcomes are ``steps - abandoned_steps``. With a ``store``, the abandoned steps are read
from the run's stream (a take-over runs in another process than the claimant it replaces);
without one, only those this fold saw are counted.

Two modes, one fold (:class:`_Fold`), so they cannot disagree:

* :func:`export_ledger_metrics` reads the ledger and feeds every event to the instruments
  (the numbers of a past period, or a backfill);
* :class:`OtelRunHook` is a Runner's ``on_event``: each event is counted as it becomes
  durable.

The fold keeps two small caches per run (its pipeline type, its steps' roles) and drops a
run's entries when the run finishes for good (``run_finished`` ``completed``, ``failed`` or
``rejected``), so a long-running process does not grow with every run. A ``gated`` finish is
a pause: the run may be resumed in this process, and its steps, resume and repairs still need
the type and the roles. With a ``store`` the entries are dropped at ``gated`` too and read
back from the run's stream on resume; without one they are kept until the run's final
finish (nothing else could tell them again).

Redactions happen before anything is written, so the ledger holds only which steps were
redacted and why; exact counts per span come from
:class:`~tracebound.pipeline.redaction.RedactionStats`, observed by :func:`observe_redactions`.
This module needs the optional extra: ``pip install 'tracebound[otel]'``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

from tracebound.errors import ConfigError, UnknownEventType
from tracebound.events.catalog import (
    FINAL_RUN_STATUSES,
    GateRequested,
    RepairAttempted,
    RunFinished,
    RunResumed,
    RunStarted,
    SloAlertRaised,
    StepRecorded,
)
from tracebound.events.envelope import RecordedEvent
from tracebound.events.record import RawRecord, decode_known
from tracebound.events.takeover import TAKE_OVER_KINDS, TakeOver, TakeOvers
from tracebound.pipeline.redaction import RedactionStats
from tracebound.pipeline.runner import run_stream
from tracebound.store.port import LedgerStore

try:
    from opentelemetry.metrics import (
        CallbackOptions,
        MeterProvider,
        Observation,
        get_meter_provider,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ConfigError(
        f"OpenTelemetry export needs the otel extra: pip install 'tracebound[otel]' ({exc})"
    ) from exc

__all__ = [
    "FOLDED_KINDS",
    "METER_NAME",
    "OtelRunHook",
    "PipelineInstruments",
    "export_ledger_metrics",
    "observe_redactions",
]

METER_NAME: Final = "tracebound"
UNKNOWN: Final = "unknown"

ROLE: Final = "tracebound.role"
STATUS: Final = "tracebound.step.status"
PIPELINE_TYPE: Final = "tracebound.pipeline.type"
REASON: Final = "tracebound.redaction.reason"
SUCCEEDED: Final = "tracebound.repair.succeeded"
METRIC: Final = "tracebound.slo.metric"
DECISION: Final = "tracebound.gate.decision"
TAKE_OVER: Final = "tracebound.resume.take_over"


class PipelineInstruments:
    """The pipeline instruments on one meter; create once per provider and share."""

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        meter = (meter_provider or get_meter_provider()).get_meter(METER_NAME)
        self.steps = meter.create_counter(
            "tracebound.pipeline.steps", unit="{step}", description="Steps recorded in the ARL"
        )
        self.gate_triggers = meter.create_counter(
            "tracebound.pipeline.gate_triggers",
            unit="{gate}",
            description="Steps the policy gate paused for human approval",
        )
        self.redacted_steps = meter.create_counter(
            "tracebound.pipeline.redacted_steps",
            unit="{step}",
            description="Steps whose artifact had something redacted, by reason",
        )
        self.resumes = meter.create_counter(
            "tracebound.pipeline.resumes",
            unit="{resume}",
            description="Gated runs a process took over after the human decision",
        )
        self.abandoned_steps = meter.create_counter(
            "tracebound.pipeline.abandoned_steps",
            unit="{step}",
            description="Steps a dead claimant recorded that a take-over abandoned and ran again",
        )
        self.repairs = meter.create_counter(
            "tracebound.pipeline.repairs", unit="{repair}", description="Repair attempts"
        )
        self.slo_alerts = meter.create_counter(
            "tracebound.pipeline.slo_alerts",
            unit="{alert}",
            description="SLO guardrail alerts of critical pipelines",
        )
        self.latency = meter.create_histogram(
            "tracebound.pipeline.step.latency", unit="ms", description="Step latency"
        )
        self.cost = meter.create_histogram(
            "tracebound.pipeline.step.cost", unit="USD", description="Step cost estimate"
        )


FOLDED_KINDS: Final = TAKE_OVER_KINDS | {
    "run_started",
    "step_recorded",
    "repair_attempted",
    "slo_alert_raised",
}
"""The event types :class:`_Fold` counts or reads: :func:`export_ledger_metrics` skips the
rest of a log undecoded (most of an LLM pipeline's log is costs and a team's own events)."""


class _Fold:
    """Turns recorded events into instrument updates; the one place both modes share.

    It remembers each run's pipeline type (from ``run_started``) and each step's role (to
    attribute a repair to the role it repairs). A run resumed in a new process has no
    ``run_started`` in this process's stream of events, and an export that starts past a
    run's first events has not seen them either, so ``store`` is asked for what is missing.

    Both caches are per run and a run's entries are dropped when it finishes (see the module
    docstring): at a final status always, at ``gated`` only when ``store`` can tell them
    again on resume.
    """

    def __init__(self, instruments: PipelineInstruments, store: LedgerStore | None) -> None:
        self.i = instruments
        self._store = store
        self._types: dict[str, str] = {}
        self._roles: dict[str, dict[str, str]] = {}  # run_id -> step_id -> role
        # what a take-over abandoned: from the run's stream with a store, else from the
        # events this fold saw (kept per run since its latest claim, until it finishes)
        self._seen = TakeOvers() if store is None else None

    @property
    def runs(self) -> frozenset[str]:
        """The runs the fold holds cached state for."""
        return frozenset(self._types) | frozenset(self._roles)

    def _forget(self, run_id: str) -> None:
        self._types.pop(run_id, None)
        self._roles.pop(run_id, None)

    def _type(self, run_id: str | None) -> str:
        if run_id is None:
            return UNKNOWN
        found = self._types.get(run_id)
        if found is None and self._store is not None:
            for e in self._store.read_stream(run_stream(run_id), to_version=1):
                if isinstance(e.payload, RunStarted):
                    found = e.payload.pipeline_type
            self._types[run_id] = found = found or UNKNOWN
        return found or UNKNOWN

    def _role(self, run_id: str, step_id: str) -> str:
        roles = self._roles.setdefault(run_id, {})
        found = roles.get(step_id)
        if found is None and self._store is not None:
            try:
                for e in self._store.read_stream(run_stream(run_id)):
                    if isinstance(e.payload, StepRecorded):
                        roles.setdefault(e.payload.step_id, e.payload.role)
            except UnknownEventType:
                pass  # a type registered only elsewhere, in the run's stream: not a step
            found = roles.setdefault(step_id, UNKNOWN)
        return found or UNKNOWN

    def add(self, event: RecordedEvent) -> None:
        taken = self._seen.add(event) if self._seen is not None else None
        p = event.payload
        if isinstance(p, RunStarted):
            self._types[p.run_id] = p.pipeline_type
        elif isinstance(p, StepRecorded):
            self._step(p)
        elif isinstance(p, GateRequested):
            self.i.gate_triggers.add(1, {ROLE: p.role, PIPELINE_TYPE: self._type(p.run_id)})
        elif isinstance(p, RunResumed):
            ptype = self._type(p.run_id)
            take_over = p.taken_over_by is not None
            self.i.resumes.add(
                1, {DECISION: p.decision, TAKE_OVER: take_over, PIPELINE_TYPE: ptype}
            )
            if take_over and self._store is not None:
                taken = self._take_over_in_store(event)
            for s in taken.steps if taken is not None else ():
                self.i.abandoned_steps.add(
                    1, {ROLE: s.role, STATUS: s.status, PIPELINE_TYPE: ptype}
                )
        elif isinstance(p, RepairAttempted):
            role = self._role(p.run_id, p.origin_step_id)
            self.i.repairs.add(
                1, {ROLE: role, SUCCEEDED: p.succeeded, PIPELINE_TYPE: self._type(p.run_id)}
            )
        elif isinstance(p, SloAlertRaised):
            attrs = {METRIC: p.metric, ROLE: p.role or "any", PIPELINE_TYPE: p.pipeline_type}
            self.i.slo_alerts.add(1, attrs)
        elif isinstance(p, RunFinished) and (
            p.status in FINAL_RUN_STATUSES or self._store is not None
        ):
            self._forget(p.run_id)  # at gated only if the store can tell the resume again

    def _take_over_in_store(self, claim: RecordedEvent) -> TakeOver | None:
        """The take-over ``claim`` is, read from its run's stream up to it (None for a
        first claim, e.g. a take-over of a gate whose process never finished recording)."""
        assert self._store is not None
        found = TakeOvers()
        taken = None
        try:
            stream = self._store.read_stream(claim.stream_id, to_version=claim.stream_version)
            for e in stream:
                taken = found.add(e)
        except UnknownEventType:
            return None  # a type registered only elsewhere in the run's stream: cannot tell
        return taken

    def _step(self, p: StepRecorded) -> None:
        ptype = self._type(p.run_id)
        self._roles.setdefault(p.run_id, {})[p.step_id] = p.role
        self.i.steps.add(1, {ROLE: p.role, STATUS: p.status, PIPELINE_TYPE: ptype})
        group = {ROLE: p.role, PIPELINE_TYPE: ptype}
        if p.redaction_reason:
            for reason in p.redaction_reason.split("; "):
                self.i.redacted_steps.add(1, {REASON: reason, **group})
        if p.status != "gated":
            self.i.latency.record(p.latency_ms, group)
            self.i.cost.record(float(p.cost_est.compute_usd_est), group)


def export_ledger_metrics(
    store: LedgerStore,
    meter_provider: MeterProvider | None = None,
    *,
    start: int = 1,
    instruments: PipelineInstruments | None = None,
) -> int:
    """Feed every event of the ledger (from ``start``) into the pipeline instruments.

    Only the event types the instruments fold (:data:`FOLDED_KINDS`) are decoded; the rest,
    a user's own types (registered only in the code that wrote them) included, are read and
    skipped: none of them is a pipeline metric.
    Returns the number of events read, so a caller can continue from ``start + n`` later
    and get the same numbers as one export of the whole range.
    """
    fold = _Fold(instruments or PipelineInstruments(meter_provider), store)
    read = 0

    def counted() -> Iterator[RawRecord]:
        nonlocal read
        for raw in store.read_raw(start=start):
            read += 1  # the skipped records too: the caller continues after them
            yield raw

    for event in decode_known(counted(), kinds=FOLDED_KINDS):
        fold.add(event)
    return read


class OtelRunHook:
    """A Runner's ``on_event``: count each event as it is recorded.

    Args:
        meter_provider: the provider (default: the global one).
        store: the ledger's store, to find the pipeline type of a run resumed in this
            process (its ``run_started`` was recorded by another). With it, a run's cached
            entries are also dropped when it pauses at a gate (they are read back on
            resume); without it, they are kept until the run finishes for good.
    """

    def __init__(
        self,
        meter_provider: MeterProvider | None = None,
        *,
        store: LedgerStore | None = None,
        instruments: PipelineInstruments | None = None,
    ) -> None:
        self._fold = _Fold(instruments or PipelineInstruments(meter_provider), store)

    def __call__(self, event: RecordedEvent) -> None:
        self._fold.add(event)

    @property
    def tracked_runs(self) -> frozenset[str]:
        """The runs this hook holds cached state for (runs not finished for good, or gated
        without a ``store`` to re-read them from); empty once every run has finished."""
        return self._fold.runs


def observe_redactions(stats: RedactionStats, meter_provider: MeterProvider | None = None) -> None:
    """Register ``tracebound.redactions``: the redactor's own counts, per reason.

    An observable counter: the SDK reads :meth:`RedactionStats.snapshot` at each
    collection, so the hot path of redaction pays nothing for telemetry.
    """
    meter = (meter_provider or get_meter_provider()).get_meter(METER_NAME)

    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        by_reason = stats.snapshot()["by_reason"]
        return [Observation(count, {REASON: reason}) for reason, count in by_reason.items()]

    meter.create_observable_counter(
        "tracebound.redactions",
        callbacks=[observe],
        unit="{redaction}",
        description="Spans redacted before any write, by reason",
    )
