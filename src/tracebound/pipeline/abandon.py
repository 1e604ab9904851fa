"""Ending on the record a run whose process died (`tracebound abandon`, docs/adr/0018).

A run that never recorded its ``run_finished`` (its process killed, its host lost, a
database outage longer than ``give_up_after``) stays ``running`` for every reader, and
neither ``resume`` (no gate) nor a take-over (no claim) can end it. :func:`abandon` records
its end: ``run_finished`` with status ``failed`` and a reason that names the human who ended
it and why, appended at the run stream's version :func:`stale_run` read. That is the fence
of ADR 0013 turned round: a process that was in fact alive stops at its next write
(:class:`~tracebound.errors.RunEnded`), and when the run moved between the read and the
append, nothing is recorded here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracebound.errors import ConcurrencyConflict, ConcurrencyError, ConfigError
from tracebound.events.catalog import (
    FINAL_RUN_STATUSES,
    GateRequested,
    RunFinished,
    RunResumed,
    RunStarted,
)
from tracebound.events.envelope import RecordedEvent
from tracebound.ids import RunId
from tracebound.ledger import Ledger
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.runner import no_such_run, run_stream

__all__ = ["StaleRun", "abandon", "abandon_reason", "stale_run"]

_REASON_MAX = 2000  # what RunFinished.reason keeps, as the runner cuts it


@dataclass(frozen=True, slots=True)
class StaleRun:
    """A run that has not finished, as :func:`stale_run` read it: the stream version its
    end is appended at, its last event, and how long ago (by the ledger's clock) that was."""

    run_id: RunId
    pipeline: str
    version: int
    last_event: RecordedEvent
    idle_seconds: int


def stale_run(ledger: Ledger, run_id: str) -> StaleRun:
    """Read a run that may be abandoned: started, and neither ended nor waiting at a gate.

    Raises:
        ConfigError: no such run; the run ended (completed, failed, rejected); or it waits at
            a gate (a human ends that one with ``reject``, then ``resume``).
    """
    started: RunStarted | None = None
    finished: RunFinished | None = None
    gate: GateRequested | None = None
    last: RecordedEvent | None = None
    for e in ledger.store.read_stream(run_stream(run_id)):
        last, p = e, e.payload
        if isinstance(p, RunStarted):
            started = p
        elif isinstance(p, RunFinished):
            finished = p
        elif isinstance(p, RunResumed):  # a claim: the run runs again
            finished = None
        elif isinstance(p, GateRequested):
            gate = p
    if started is None or last is None:
        raise no_such_run(ledger.store, run_id)
    _refuse_ended(run_id, finished, gate)
    idle = (ledger.clock.now() - last.timestamp).total_seconds()
    return StaleRun(RunId(run_id), started.pipeline, last.stream_version, last, max(0, int(idle)))


def _refuse_ended(run_id: str, finished: RunFinished | None, gate: GateRequested | None) -> None:
    if finished is None:
        return
    if finished.status in FINAL_RUN_STATUSES:
        raise ConfigError(
            f"run {run_id} already ended ({finished.status}): there is nothing to abandon"
        )
    step = gate.step_id if gate is not None else "its gate"
    raise ConfigError(
        f"run {run_id} waits at a gate ({step}), not for a dead process: an owner ends it with "
        f"`tracebound reject {run_id} {step} --as NAME`, then `tracebound resume {run_id}`"
    )


def abandon_reason(stale: StaleRun, by: str, reason: str) -> str:
    """The ``run_finished`` reason: who ended the run and why, and what they saw."""
    last = stale.last_event
    seen = (
        f" (its last event, {last.event_type} at position {last.position}, was "
        f"{stale.idle_seconds}s old)"
    )
    text = f"abandoned by {by}: {reason}"
    return text[: _REASON_MAX - len(seen)] + seen


def abandon(
    ledger: Ledger, stale: StaleRun, by: str, reason: str, *, redactor: Redactor
) -> RecordedEvent:
    """Record the end of a run whose process is taken for dead: ``run_finished`` (failed),
    its reason naming ``by`` and saying ``reason``, at the stream version ``stale`` read.

    ``by`` and ``reason`` are free text a human typed: redacted before they are recorded.

    Raises:
        ConfigError: ``by`` or ``reason`` is empty.
        ConcurrencyError: the run's stream moved after ``stale`` was read (its process is
            alive, or someone else ended it); nothing was recorded.
    """
    by, reason = redactor.redact_text(by).value.strip(), redactor.redact_text(reason).value.strip()
    if not by:
        raise ConfigError("abandoning a run names the human who ends it (--as NAME)")
    if not reason:
        raise ConfigError("abandoning a run says why (--reason TEXT): an auditor reads it")
    text = abandon_reason(stale, by, reason)
    end = RunFinished(run_id=stale.run_id, status="failed", reason=text)
    stream = run_stream(stale.run_id)
    try:
        (recorded,) = ledger.record(
            stream, [end], workflow_id=stale.run_id, expected_version=stale.version
        )
    except ConcurrencyConflict:
        moved = list(ledger.store.read_stream(stream, from_version=stale.version + 1))
        latest = moved[-1] if moved else None
        what = f", the latest {latest.event_type} at position {latest.position}" if latest else ""
        raise ConcurrencyError(
            f"run {stale.run_id} moved while it was being abandoned ({len(moved)} new "
            f"event(s){what}): its process is alive, or someone else ended it; nothing was "
            "recorded (`tracebound runs` shows where it stands)"
        ) from None
    return recorded
