"""Re-execute a recorded run and compare it, step by step, with what the ledger says happened.

A rerun answers "would this pipeline, today, do what it did then?". It imports the pipeline
again, feeds it the run's recorded inputs (already redacted: a rerun never sees a secret
the original ledger did not store), and runs it into a *scratch* ledger and blob store in
a temporary directory, with a fixed clock and sequential ids so that nothing but the
pipeline's own behaviour can differ. Human decisions are replayed too: when the rerun stops
at a gate that a human approved or rejected in the recorded run, the same decision is
recorded in the scratch ledger and the rerun resumes.

The two step sequences are then compared in order (step id, status, artifact hash) and the
FIRST divergence is reported: later ones usually follow from it. Artifact hashes are
compared rather than timestamps or latencies, because they are what a step *produced*.

Only the steps that count are compared. A run that was taken over holds, after the steps
recorded before its first claim, the dead claimant's steps (abandoned by the take-over,
:mod:`tracebound.events.takeover`) and then the take-over's, under the same step ids. The
rerun executes the run once, as the take-over did, so it is compared with what the run
stands on: the steps before the first claim, then the last take-over's. The abandoned ones
are counted in :attr:`RerunReport.abandoned`, not compared (``replay`` lists them).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracebound.errors import ConfigError, ValidationFailed
from tracebound.events.catalog import StepRecorded
from tracebound.events.takeover import abandoned_events
from tracebound.ledger import Ledger
from tracebound.pipeline.codeowners import CodeOwners
from tracebound.pipeline.config import load_pipeline
from tracebound.pipeline.policy import Policy
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.runner import Runner, RunResult, run_stream
from tracebound.pipeline.runtime import Pipeline
from tracebound.pipeline.validations import ValidationRegistry
from tracebound.replay.rebuild import ReplayReport, replay_run
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.blobs import BlobStore
from tracebound.store.port import LedgerStore
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.sqlite_blobs import SQLiteBlobStore

__all__ = ["Divergence", "RerunReport", "StepKey", "first_divergence", "rerun_run"]

_SCRATCH_ORIGIN = "tracebound.local/rerun"
_MAX_GATES = 1000  # a pipeline that gates forever is a bug, not a reason to loop


@dataclass(frozen=True)
class StepKey:
    """What is compared for one step: its id, status and artifact digest."""

    step_id: str
    status: str
    artifact_hash: str

    def as_dict(self) -> dict[str, str]:
        return {"step_id": self.step_id, "status": self.status, "artifact_hash": self.artifact_hash}


@dataclass(frozen=True)
class Divergence:
    """The first place the rerun differs: the ``index``-th step, which field, both values.

    ``field`` is ``step_id``, ``status`` or ``artifact_hash``; ``run_status`` when every step
    matches but the run ended differently. A missing step on one side is ``None``.
    """

    index: int
    step_id: str | None
    field: str
    recorded: str | None
    rerun: str | None

    def describe(self) -> str:
        where = f"step {self.index + 1} ({self.step_id})" if self.step_id else "the run"
        return f"{where}: {self.field} was {self.recorded!r}, rerun gives {self.rerun!r}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "step_id": self.step_id,
            "field": self.field,
            "recorded": self.recorded,
            "rerun": self.rerun,
        }


@dataclass
class RerunReport:
    """Both step sequences and the first divergence (None: the rerun was identical).

    ``recorded`` holds the recorded steps that count; ``abandoned`` how many recorded steps
    a take-over abandoned, and were therefore not compared.
    """

    run_id: str
    recorded_status: str
    rerun_status: str
    recorded: list[StepKey] = field(default_factory=list)
    rerun: list[StepKey] = field(default_factory=list)
    divergence: Divergence | None = None
    abandoned: int = 0

    @property
    def identical(self) -> bool:
        return self.divergence is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "identical": self.identical,
            "run_id": self.run_id,
            "recorded_status": self.recorded_status,
            "rerun_status": self.rerun_status,
            "recorded": [s.as_dict() for s in self.recorded],
            "rerun": [s.as_dict() for s in self.rerun],
            "abandoned": self.abandoned,
            "divergence": None if self.divergence is None else self.divergence.as_dict(),
        }


def _keys(store: LedgerStore, run_id: str) -> list[StepKey]:
    """The steps of the rerun's scratch stream that count, by the rule the recorded side is
    read with (a scratch rerun takes nothing over, so today this leaves nothing out)."""
    events = list(store.read_stream(run_stream(run_id)))
    gone = abandoned_events(events)
    return [
        StepKey(e.payload.step_id, e.payload.status, e.payload.artifact_hash)
        for e in events
        if isinstance(e.payload, StepRecorded) and e.position not in gone
    ]


def first_divergence(
    recorded: list[StepKey], rerun: list[StepKey], recorded_status: str, rerun_status: str
) -> Divergence | None:
    """The first differing (step, field), in step order, then the run's final status."""
    for i in range(max(len(recorded), len(rerun))):
        a = recorded[i] if i < len(recorded) else None
        b = rerun[i] if i < len(rerun) else None
        if a is None or b is None:
            present = a or b
            assert present is not None
            return Divergence(
                i,
                present.step_id,
                "step_id",
                None if a is None else a.step_id,
                None if b is None else b.step_id,
            )
        for name in ("step_id", "status", "artifact_hash"):
            if getattr(a, name) != getattr(b, name):
                return Divergence(i, a.step_id, name, getattr(a, name), getattr(b, name))
    if recorded_status != rerun_status:
        return Divergence(len(recorded), None, "run_status", recorded_status, rerun_status)
    return None


def _replay_decisions(
    runner: Runner, pipeline: Pipeline, result: RunResult, recorded: ReplayReport
) -> RunResult:
    """Resume the rerun past each gate a human decided on in the recorded run."""
    decisions = list(recorded.approvals)
    for _ in range(_MAX_GATES):
        if result.status != "gated" or result.gated_step is None:
            return result
        match = next((d for d in decisions if d.step_id == result.gated_step), None)
        if match is None:
            return result  # the recorded run is still waiting here too (or never got here)
        decisions.remove(match)
        runner.ledger.record(
            run_stream(result.run_id),
            [match.model_copy(update={"timestamp": runner.ledger.clock.now()})],
            workflow_id=result.run_id,
        )
        result = runner.resume(pipeline, result.run_id)
    raise ConfigError(f"the rerun of {result.run_id} gated more than {_MAX_GATES} times")


def rerun_run(
    ledger: Ledger | LedgerStore,
    blobs: BlobStore,
    run_id: str,
    *,
    policy: Policy,
    redactor: Redactor,
    pipeline: Pipeline | str | None = None,
    validations: ValidationRegistry | None = None,
    codeowners: CodeOwners | None = None,
    workspace: Path | None = None,
    scratch: Path | None = None,
) -> RerunReport:
    """Re-execute ``run_id`` into a scratch ledger and report the first divergence.

    Args:
        pipeline: the pipeline, or a ``module:attr`` reference; default: the run's recorded
            ``pipeline_ref``.
        policy / redactor / validations / codeowners / workspace: as the original Runner
            had them. Use the same redaction key, or every redacted value will differ.
        scratch: where the scratch ledger and blobs go (default: a temporary directory,
            removed afterwards).

    Raises:
        ConfigError: no such run, no pipeline to import, a pipeline of another name, or the
            recorded inputs are gone (erased blobs cannot be rerun).
        LedgerDamaged: the recorded run's chain is broken.
    """
    recorded = replay_run(ledger, blobs, run_id)
    if recorded.inputs is None:
        raise ConfigError(f"run {run_id}'s inputs ({recorded.inputs_digest}) are not available")
    if pipeline is None:
        if recorded.pipeline_ref is None:
            raise ConfigError(
                f"run {run_id} recorded no pipeline_ref; name the pipeline (module:attr)"
            )
        pipeline = recorded.pipeline_ref
    pipe = load_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    if pipe.name != recorded.pipeline:
        raise ConfigError(f"run {run_id} is of pipeline {recorded.pipeline!r}, not {pipe.name!r}")
    with tempfile.TemporaryDirectory(prefix="tracebound-rerun-", dir=scratch) as tmp:
        root = Path(tmp)
        scratch_store = SQLiteStore(root / "store", synchronous="NORMAL")
        scratch_ledger = Ledger(
            scratch_store,
            clock=FixedClock(),
            ids=SequentialIds(namespace=0x7E),
            origin=_SCRATCH_ORIGIN,
        )
        # Scratch blobs in the scratch ledger's file, as a SQLite ledger keeps them by
        # default (ADR 0009); neither is synced, since both are thrown away.
        with scratch_ledger, SQLiteBlobStore(scratch_store) as scratch_blobs:
            runner = Runner(
                scratch_ledger,
                blobs=scratch_blobs,
                policy=policy,
                redactor=redactor,
                validations=validations,
                codeowners=codeowners,
                workspace=workspace,
            )
            try:
                result = runner.run(pipe, recorded.inputs, run_id=run_id)
                result = _replay_decisions(runner, pipe, result, recorded)
                rerun_status: str = result.status
            except ValidationFailed:
                rerun_status = "failed"  # an aborted run: its error step is in the stream
            rerun_keys = _keys(scratch_ledger.store, run_id)
    # A taken-over run's dead claimant recorded the steps after the gate too, under the
    # same ids; comparing them would report a divergence where the rerun repeats the
    # take-over exactly. The rerun is compared with what counts: the steps before the first
    # claim, then the (last) take-over's.
    counted = [s for s in recorded.steps if s.abandoned_by is None]
    recorded_keys = [StepKey(s.step_id, s.status, s.artifact_hash) for s in counted]
    return RerunReport(
        run_id=run_id,
        recorded_status=recorded.status,
        rerun_status=rerun_status,
        recorded=recorded_keys,
        rerun=rerun_keys,
        divergence=first_divergence(recorded_keys, rerun_keys, recorded.status, rerun_status),
        abandoned=len(recorded.steps) - len(counted),
    )
