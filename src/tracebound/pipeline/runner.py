"""Running a pipeline: every step validated, redacted, stored, gated and recorded.

For each step the :class:`Runner`:

1. validates the incoming handoff envelope (middleware: a violation aborts the run with
   :class:`~tracebound.errors.ValidationFailed` naming the field and why);
2. calls the step with least privilege (read-only scopes until a gate is lifted);
3. redacts the artifact it returned, then validates it against the TPC contract (again:
   a violation aborts the run), and stores it in the blob store by ``sha256:`` digest;
4. for an Executor, runs the envelope's required validations (registered checks and real
   test commands in subprocesses);
5. for a Critic, checks the parent's output against the constraints it was handed, and
   collects what the Critic itself reports;
6. asks the policy: a matching step is recorded ``gated`` and the run pauses durably (the
   ledger is the state; :meth:`Runner.resume` continues after a human approved, once it
   has claimed the run with ``RunResumed``: of two resumes, one goes on);
7. records one ARL entry (``StepRecorded``) with every field the record lists.

A failure (the step raised, a required validation failed, the Critic found a violation) is
blamed: ``BlameAssigned`` names the step that caused it (``error_origin``), following
parent links, or none (unresolved). A failure with an origin is repaired by re-running the
chain from the origin through the failed step, up to ``Pipeline.max_repairs`` times, each
recorded as ``RepairAttempted``.

Every event of a run goes to the stream ``run/<run_id>`` with ``workflow_id = run_id``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple
from uuid import UUID

import orjson

from tracebound.canonical import canonical_bytes
from tracebound.contract import HandoffEnvelope, TPCArtifact, validate_envelope, validate_tpc
from tracebound.errors import (
    ConcurrencyConflict,
    ConfigError,
    ConnectionLost,
    KeyRotationRefused,
    PolicyError,
    RunAlreadyResumed,
    RunEnded,
    RunTakenOver,
    ValidationFailed,
)
from tracebound.events.catalog import (
    FINAL_RUN_STATUSES,
    ApprovalRecorded,
    BlameAssigned,
    CostEstimate,
    GateRequested,
    RepairAttempted,
    RouteChosen,
    RunFinished,
    RunResumed,
    RunStarted,
    SloAlertRaised,
    StepRecorded,
    ValidationRecorded,
    Validations,
)
from tracebound.events.envelope import Payload, RecordedEvent
from tracebound.ids import RunId, Sha256Digest, StepId
from tracebound.ledger import Ledger
from tracebound.pipeline.codeowners import CodeOwners
from tracebound.pipeline.critic import Finding, check_constraints
from tracebound.pipeline.metrics import store_metrics, store_slo_violations
from tracebound.pipeline.policy import Policy, normalise_path, request_from_artifact
from tracebound.pipeline.redaction import Redaction, Redactor
from tracebound.pipeline.runtime import Pipeline, RoleName, StepContext, StepSpec
from tracebound.pipeline.validations import ValidationInput, ValidationRegistry
from tracebound.store.blobs import BlobStore
from tracebound.store.port import LedgerStore
from tracebound.store.reconnect import DEFAULT_GIVE_UP_AFTER, Outage

__all__ = ["RunResult", "Runner", "StepOutcome", "no_such_run", "run_stream"]

RunStatus = Literal["completed", "failed", "gated", "rejected"]


def run_stream(run_id: str) -> str:
    """The ledger stream that holds one run's events."""
    return f"run/{run_id}"


# The streams named after a run: its events, and its spend (the evidence file's costs/RUN).
_RUN_STREAM_PREFIXES: Final = ("run/", "costs/")


def no_such_run(store: LedgerStore, run_id: str) -> ConfigError:
    """The refusal of a run id the ledger has no run of.

    `log`, `inspect` and `verify-evidence` print a run's streams (run/RUN, costs/RUN), and
    that is what gets pasted into a run command: then the message names the run id itself,
    so that "no run" is not read as "the run is not there"."""
    for prefix in _RUN_STREAM_PREFIXES:
        inner = run_id.removeprefix(prefix)
        if inner != run_id and store.stream_head(run_stream(inner)) is not None:
            return ConfigError(
                f"no run {run_id!r} in this ledger: that is a stream of run {inner}; "
                f"the run id is {inner}"
            )
    return ConfigError(f"no run {run_id!r} in this ledger (`tracebound runs` lists them)")


@dataclass
class StepOutcome:
    """What happened to one execution of one step."""

    step_id: StepId
    name: str
    role: RoleName
    status: Literal["success", "error", "skipped", "gated"]
    # Out of repr: asyncio.run (3.11) builds the finished task's repr, result included,
    # each time a run ends, and the artifacts' reprs cost ~1 ms a run; the hash names them.
    artifact: TPCArtifact | None = field(default=None, repr=False)
    artifact_hash: Sha256Digest | None = None
    error_origin: StepId | None = None
    latency_ms: int = 0
    validations_failed: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    reason: str | None = None


@dataclass
class RunResult:
    """The run as it stands: completed, failed, paused at a gate, or rejected."""

    run_id: RunId
    status: RunStatus
    steps: list[StepOutcome] = field(default_factory=list)
    gated_step: StepId | None = None
    failed_step: StepId | None = None
    reason: str | None = None

    def artifact(self, name: str) -> TPCArtifact:
        for outcome in reversed(self.steps):
            if outcome.name == name and outcome.artifact is not None:
                return outcome.artifact
        raise KeyError(name)


@dataclass
class _Run:
    """The in-memory view of one run; always reconstructible from its ledger stream."""

    run_id: RunId
    pipeline: Pipeline
    inputs: Mapping[str, Any]
    result: RunResult
    accepted: dict[str, StepOutcome] = field(default_factory=dict)  # latest good outcome
    version: int = 0  # of the run's stream, as this process last wrote or read it
    approved: set[str] = field(default_factory=set)  # step names whose gate was lifted
    # ids of artifacts validate_tpc accepted in this process (envelope included); kept alive
    # by the outcomes that hold them, so an id is never reused within the run
    contract_checked: set[int] = field(default_factory=set)
    current: StepId | None = None  # the execution this process is at (_begin)
    gate_requested: bool = False  # past this, an interrupted run is a take-over's to end
    finishing: bool = False  # its run_finished is being written: that end stands
    stopped: bool = False  # its end is recorded after an error: tried once, never waited for

    def artifacts(self) -> dict[str, TPCArtifact]:
        return {k: v.artifact for k, v in self.accepted.items() if v.artifact is not None}


@dataclass
class _StepRun:
    """One execution of one step, while it runs."""

    run: _Run
    spec: StepSpec
    step_id: StepId
    parent: StepOutcome | None
    gated: StepOutcome | None  # the gated execution an approval lets go on, if any
    scopes: tuple[str, ...]
    started: datetime
    outcome: StepOutcome
    ran: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    unchecked: tuple[str, ...] = ()
    redactions: tuple[Redaction, ...] = ()  # what redacting the step's artifact took out

    @property
    def handoff(self) -> HandoffEnvelope | None:
        p = self.parent
        return p.artifact.handoff_envelope if p is not None and p.artifact is not None else None


class _Abort(Exception):
    """Internal: a contract violation stops the run (re-raised as ValidationFailed)."""

    def __init__(self, error: ValidationFailed) -> None:
        self.error = error


class Runner:
    """Runs pipelines against a ledger, a blob store, a policy and a redactor.

    Args:
        ledger: where every event goes (its clock and id source are used for everything).
        blobs: where artifacts, inputs and validation output go, by digest.
        policy: the governance gate (policies fail closed: see :class:`Policy`).
        redactor: applied to inputs, artifacts and command output before any write.
        validations: the Executor's registered validations and test commands.
        codeowners: who may approve gated paths; without it nobody can approve.
        workspace: the directory steps and test commands work in.
        storage: the ARL ``storage`` sink this runner writes to (``db`` for a database).
        evidence: called with (ledger, blobs, run_id) each time a run stops (completed,
            failed, rejected or gated), after its last event; e.g.
            ``tracebound.export.evidence.EvidenceWriter(dir)``. Injected rather than a
            directory because the writer lives in ``export/``, a layer above this one.
        on_event: called with every event this runner records, right after it is durable
            (live metrics, e.g. ``tracebound.export.otel.OtelRunHook``). A hook that raises
            stops the run; a run not yet at a gate then ends failed (``error (<type>)``).
        give_up_after: seconds a run waits for a database server it lost (a PostgreSQL
            restart or failover still under way when a step ends) before it ends with
            :class:`~tracebound.errors.ConnectionLost`; None: for ever. Such an append
            wrote nothing, so it is made again once the server answers.
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        blobs: BlobStore,
        policy: Policy,
        redactor: Redactor,
        validations: ValidationRegistry | None = None,
        codeowners: CodeOwners | None = None,
        workspace: Path | None = None,
        storage: Literal["console", "file", "db"] = "db",
        evidence: Callable[[Ledger, BlobStore, RunId], object] | None = None,
        on_event: Callable[[RecordedEvent], object] | None = None,
        give_up_after: float | None = DEFAULT_GIVE_UP_AFTER,
    ) -> None:
        self.ledger = ledger
        self.give_up_after = give_up_after
        self.blobs = blobs
        self.policy = policy
        self.redactor = redactor
        self.validations = validations or ValidationRegistry()
        self.codeowners = codeowners
        self.workspace = workspace
        self.storage = storage
        self.evidence = evidence
        self.on_event = on_event

    # -- public API --------------------------------------------------------------------

    def run(
        self, pipeline: Pipeline, inputs: Mapping[str, Any], *, run_id: str | None = None
    ) -> RunResult:
        """Run a pipeline to completion, failure, or its first gate (blocking).

        Raises:
            ConfigError: called inside a running event loop (``await`` :meth:`arun` there).
        """
        _outside_a_loop("run", "arun")
        return asyncio.run(self.arun(pipeline, inputs, run_id=run_id))

    async def arun(
        self, pipeline: Pipeline, inputs: Mapping[str, Any], *, run_id: str | None = None
    ) -> RunResult:
        """The async form of :meth:`run`; async steps are awaited.

        Raises:
            ConfigError: ``run_id`` is not a lower-case UUID (the ARL's run id), or is a
                run already in the ledger.
        """
        if run_id is not None and not _is_arl_run_id(run_id):
            raise ConfigError(
                f"run_id {run_id!r} is not a lower-case UUID, as an ARL run id is "
                "(str(uuid.uuid4()), or leave it out)"
            )
        self._check_evidence_signable()
        rid = RunId(run_id or str(self.ledger.ids.new_id()))
        redacted = self.redactor.redact(dict(inputs)).value
        ref = self.blobs.put(canonical_bytes(redacted))
        run = _Run(rid, pipeline, redacted, RunResult(rid, "completed"))
        started = RunStarted(
            run_id=rid,
            pipeline=pipeline.name,
            pipeline_type=pipeline.pipeline_type,
            critical=pipeline.critical,
            pipeline_ref=pipeline.ref,
            inputs_digest=ref.digest,
            inputs_pointer=ref.pointer,
        )
        try:  # at version 0: the run's stream must not exist yet
            self._emit(run, started, read_past_decisions=False)
        except ConcurrencyConflict:
            raise ConfigError(f"run {rid} is already in this ledger; run ids are unique") from None
        try:
            return await self._drive(run, 0)
        except BaseException as exc:
            self._end_stopped(run, exc)
            raise

    def _check_evidence_signable(self) -> None:
        """The evidence sink signs a checkpoint when the run ends: refused then (a retired
        key, a key rotation unfinished), the run's steps and apply hooks had run, and it
        had ended on the record, with no evidence and an error. So refuse before.

        Raises:
            KeyRotationRefused: no checkpoint can be signed now; nothing was run or written.
        """
        if self.evidence is None:
            return
        try:
            self.ledger.check_signing_key()
        except KeyRotationRefused as exc:
            raise KeyRotationRefused(
                f"{exc}. The run's evidence could not be signed, so nothing ran"
            ) from exc

    def _end_stopped(self, run: _Run, exc: BaseException) -> None:
        """End a fresh run that an interrupt (Ctrl-C, SystemExit, a cancelled task) or an
        error stopped (an ``on_event`` hook that raised, a blob store that failed) on the
        record, failed, before ``exc`` goes on: nothing else could end it, since ``resume``
        needs a gate and a take-over a claim. Once a gate was requested the run is left as
        it stands, for a take-over (docs/pipeline.md, section 4); once its end is being
        written, that end stands. Only the type of ``exc`` is recorded: its message may
        quote anything. What goes wrong meanwhile is noted on ``exc``.
        """
        if run.gate_requested or run.finishing or isinstance(exc, RunEnded):
            return  # (a run someone else ended has its end: nothing more may be written)
        stopped = "interrupted" if not isinstance(exc, Exception) else "error"
        where = ""
        if run.current is not None:
            done = any(o.step_id == run.current for o in run.result.steps)
            where = f" {'after' if done else 'during'} step {run.current}"
        version = run.version
        run.stopped = True
        try:
            self._finish(run, "failed", run.current, f"{stopped} ({type(exc).__name__}){where}")
        except Exception as failed:  # noqa: BLE001 - exc is what surfaces
            said = "could not be recorded" if run.version == version else "was recorded, then"
            exc.add_note(f"the run's end {said}: {type(failed).__name__}")

    def resume(
        self, pipeline: Pipeline, run_id: str, *, take_over_by: str | None = None
    ) -> RunResult:
        """Continue a run paused at a gate, once a human approved or rejected it.

        The run is claimed first (``run_resumed``, appended at the stream version just
        read), so two resumes started together cannot both run the step's apply hook: the
        second raises :class:`~tracebound.errors.RunAlreadyResumed` having done nothing.

        ``take_over_by`` names a human who takes over a run whose claiming process died
        before it finished: the run is claimed again (the claim records the name) and the
        gated step's apply hook runs again. Only for a claimant known to be dead: nothing
        stops a live one (docs/pipeline.md).

        Raises:
            ConfigError: called inside a running event loop (``await`` :meth:`aresume` there).
        """
        _outside_a_loop("resume", "aresume")
        return asyncio.run(self.aresume(pipeline, run_id, take_over_by=take_over_by))

    async def aresume(
        self, pipeline: Pipeline, run_id: str, *, take_over_by: str | None = None
    ) -> RunResult:
        """The async form of :meth:`resume`.

        Raises:
            RunAlreadyResumed: another process claimed the run first (its ``run_resumed``
                is in the stream); this one ran no step or hook and wrote nothing.
            ConfigError: no such run, another pipeline's run, or not waiting at a gate;
                a gate its process has not finished recording (still writing, or dead:
                then only a take-over continues it); a take-over of a run nobody claimed,
                or without a name; an approved gate whose gated artifact was never
                recorded (the process died in between), unless taken over: the take-over
                then ends the run ``failed`` at that gate, applying nothing.
        """
        if take_over_by is not None and not take_over_by.strip():
            raise ConfigError("a take-over names the human who takes the run over")
        if take_over_by is not None:
            # The name goes to the ledger (run_resumed.taken_over_by) and nothing checks it
            # against CODEOWNERS (a take-over lifts no gate): redacted like any free text,
            # or a token pasted as `--as` would be written as it is.
            take_over_by = self._scrub(take_over_by)
        loaded = self._load(pipeline, run_id)
        run, gate, decision = loaded.run, loaded.gate, loaded.decision
        if gate is None:
            raise ConfigError(f"run {run_id} is not waiting at a gate ({run.result.status})")
        if not loaded.settled and take_over_by is None:
            raise ConfigError(
                f"run {run_id} recorded a gate at {gate.step_id} but not that it stopped there "
                "(no run_finished after it): its process is still writing, or died. If it is "
                "known to be dead: tracebound resume RUN --take-over --as NAME"
            )
        if loaded.claimed is not None and take_over_by is None:
            raise RunAlreadyResumed(run.run_id, gate.step_id, _claimed(loaded.claimed))
        if loaded.claimed is None and take_over_by is not None and loaded.settled:
            raise ConfigError(
                f"run {run_id} was not claimed by another resume: there is nothing to take "
                "over; resume it without a take-over"
            )
        if decision is None:
            run.result.status, run.result.gated_step = "gated", gate.step_id
            return run.result
        self._check_evidence_signable()
        name = gate.step_id.split("~", 1)[0]
        # Before the claim: a pipeline without the step fails here, leaving the run unclaimed.
        start = pipeline.index(name) if decision.decision == "approved" else 0
        paused = None
        if decision.decision == "approved":
            gated = run.accepted.get(name)
            if gated is None or gated.status != "gated" or gated.step_id != gate.step_id:
                # The process died (or is still writing) between gate_requested and the
                # gated step_recorded: there is no artifact the approval could cover.
                missing = (
                    "the artifact that gate was requested for was never recorded: an approval "
                    "cannot apply it"
                )
                if take_over_by is None:
                    raise ConfigError(f"run {run_id} waits at {gate.step_id}, but {missing}")
                # Known dead, by name: the approval (approve judges the gate, not its
                # artifact) covers nothing, and a gate is decided once, so a reject is
                # refused too; ending the run is the only way out left (ADR 0015).
                self._claim(run, gate, decision, loaded.version, taken_over_by=take_over_by)
                self._finish(run, "failed", gate.step_id,
                             f"approved by {decision.approver}, but {missing}; nothing was "
                             f"applied, and the run was ended by {take_over_by}")  # fmt: skip
                return run.result
            paused = _paused_repair(run_id, gate, loaded.repair)
        self._claim(run, gate, decision, loaded.version, taken_over_by=take_over_by)
        if decision.decision == "rejected":
            self._finish(run, "rejected", gate.step_id, f"rejected by {decision.approver}")
            return run.result
        run.approved.add(name)
        return await self._drive(run, start, paused=paused)

    def _claim(
        self,
        run: _Run,
        gate: GateRequested,
        decision: ApprovalRecorded,
        version: int,
        *,
        taken_over_by: str | None,
    ) -> None:
        """Record ``run_resumed`` at the stream version :meth:`_load` read, before anything
        else: an apply hook is a side effect, so of two resumes (or take-overs) exactly one
        may go on."""
        claim = RunResumed(
            run_id=run.run_id,
            step_id=gate.step_id,
            decision=decision.decision,
            taken_over_by=taken_over_by,
        )
        try:
            self._emit(run, claim, read_past_decisions=False)
        except ConcurrencyConflict:
            stream = run_stream(run.run_id)
            for e in self.ledger.store.read_stream(stream, from_version=version + 1):
                if isinstance(e.payload, RunResumed) and e.payload.step_id == gate.step_id:
                    raise RunAlreadyResumed(run.run_id, gate.step_id, _claimed(e)) from None
            raise  # something else moved the run's stream: the conflict, typed, as it is

    # -- driving -----------------------------------------------------------------------

    async def _drive(
        self, run: _Run, start: int, *, paused: RepairAttempted | None = None
    ) -> RunResult:
        """Run the steps from ``start``; ``paused`` is the repair a gate at ``start`` paused,
        which is finished first (from the gated step through the step that failed)."""
        specs = run.pipeline.steps
        try:
            i = start
            if paused is not None:
                # The failed step is the furthest the run got: a repair only re-runs steps
                # up to it, and nothing after it ran before its failure stopped the pass.
                last = max(run.pipeline.index(o.name) for o in run.result.steps)
                failed = next(o for o in reversed(run.result.steps) if o.name == specs[last].name)
                status = await self._repair(run, failed, last, paused=paused, resume_at=start)
                if status != "completed":
                    if status == "failed":
                        self._finish(run, "failed", failed.step_id, failed.reason)
                    return run.result
                i = last + 1
            while i < len(specs):
                outcome = await self._execute(run, specs[i])
                if outcome.status == "gated":
                    self._finish(run, "gated", outcome.step_id, "waiting for approval")
                    return run.result
                if outcome.status == "error" or outcome.findings:
                    status = await self._repair(run, outcome, i)
                    if status != "completed":
                        if status == "failed":
                            self._finish(run, "failed", outcome.step_id, outcome.reason)
                        return run.result
                i += 1
        except _Abort as abort:
            # A field name can be the artifact's own key (keys are not redacted), so the
            # error is redacted as a whole before it is recorded or raised.
            error = ValidationFailed(
                self._scrub(abort.error.field), self._scrub(abort.error.reason)
            )
            self._finish(run, "failed", run.result.steps[-1].step_id, str(error))
            raise error from None
        self._finish(run, "completed")
        return run.result

    async def _repair(
        self,
        run: _Run,
        failed: StepOutcome,
        failed_index: int,
        *,
        paused: RepairAttempted | None = None,
        resume_at: int = 0,
    ) -> RunStatus:
        """Re-run from the blamed origin through the failed step; a Critic's finding
        re-runs through the Critic too, so the repair is judged by the same check.

        A resume continues the attempt a gate ``paused`` from the gated step (``resume_at``),
        with that attempt's number, origin and first step; later attempts start at the origin.
        """
        origin = paused.origin_step_id if paused is not None else failed.error_origin
        if origin is None:
            return "failed"
        base = origin.split("~", 1)[0]
        first = run.pipeline.index(base)
        last = failed_index
        for attempt in range(paused.attempt if paused else 1, run.pipeline.max_repairs + 1):
            ok, first_id = True, paused.repair_step_id if paused else None
            start, paused = (resume_at if paused else first), None
            for spec in run.pipeline.steps[start : last + 1]:
                notes = tuple(f.reason for f in failed.findings) or (failed.reason or "",)
                outcome = await self._execute(run, spec, attempt=attempt, notes=notes)
                first_id = first_id or outcome.step_id
                if outcome.status == "gated":
                    self._emit(run, RepairAttempted(
                        run_id=run.run_id, origin_step_id=origin, repair_step_id=first_id,
                        attempt=attempt, succeeded=False,
                    ))  # fmt: skip
                    self._finish(run, "gated", outcome.step_id, "waiting for approval")
                    return "gated"
                if outcome.status != "success" or outcome.findings:
                    ok = False
                    failed = outcome
                    break
            assert first_id is not None
            self._emit(
                run,
                RepairAttempted(
                    run_id=run.run_id,
                    origin_step_id=origin,
                    repair_step_id=first_id,
                    attempt=attempt,
                    succeeded=ok,
                ),
            )
            if ok:
                return "completed"
        return "failed"

    # -- one step ----------------------------------------------------------------------

    async def _execute(
        self, run: _Run, spec: StepSpec, *, attempt: int = 0, notes: tuple[str, ...] = ()
    ) -> StepOutcome:
        # A step boundary: under asyncio.run a Ctrl-C only cancels the task, which a step
        # that never awaits would not see, so without this a run of sync steps went on to
        # its end (apply hooks included) and only then stopped.
        await asyncio.sleep(0)
        sr = self._begin(run, spec, attempt)
        self._check_incoming(sr)  # 1
        findings = self._critic_checks(sr)  # 5, the runtime's half
        ctx = self._context(sr, notes, findings)
        if sr.gated is not None:
            return self._after_gate(sr, ctx, sr.gated)
        raw = await self._call(sr, ctx)  # 2
        if raw is None:
            return sr.outcome
        artifact, redaction_reason = self._accept(sr, raw)  # 3
        self._validate(sr, artifact)  # 4
        # 5, the Critic's own half; its words go to the ledger (blame) and to repair notes
        findings = (*findings, *(replace(f, reason=self._scrub(f.reason)) for f in ctx.reported))
        if ctx.route is not None:
            chosen, alternatives, why = ctx.route
            chosen, why = self._scrub(chosen), self._scrub(why)
            alternatives = [self._scrub(a) for a in alternatives]
            self._emit(run, RouteChosen(run_id=run.run_id, step_id=sr.step_id, chosen=chosen,
                                        alternatives=tuple(alternatives), reason=why))  # fmt: skip
        # 6: a step its own required checks refused is an error, not a question for a human
        if not sr.failed and self._gate(sr, artifact, redaction_reason):
            return sr.outcome
        outcome = sr.outcome
        if sr.failed:
            outcome.status, outcome.error_origin = "error", sr.step_id
            outcome.reason = f"required validations failed: {', '.join(sr.failed)}"
        if outcome.status == "success" and spec.apply is not None:
            self._apply(sr, ctx, artifact)
        blames = self._attribute(run, findings) if findings else []
        if blames:
            outcome.findings = findings
            outcome.error_origin = next(
                (b.origin_step_id for b in blames if b.origin_step_id), None
            )
            outcome.reason = "; ".join(f.reason for f in findings)
        self._record_step(sr, redaction_reason=redaction_reason)  # 7
        for blame in blames:
            self._emit(run, replace_detected(blame, sr.step_id))
        if outcome.status == "error":
            self._blame(run, sr.step_id, spec.role, outcome.reason or "failed", sr.step_id,
                        harmful=bool(sr.failed))  # fmt: skip
        else:
            run.accepted[spec.name] = outcome
        return outcome

    def _begin(self, run: _Run, spec: StepSpec, attempt: int) -> _StepRun:
        # An approval lets the gated execution go on, under its own id (once: _after_gate
        # spends it); any other execution of the step is a new one, gated afresh.
        gated = run.accepted.get(spec.name) if spec.name in run.approved else None
        if gated is not None and gated.status != "gated":
            gated = None
        if gated is not None:
            step_id = gated.step_id
        else:
            step_id = StepId(spec.name if attempt == 0 else _rerun_id(run, spec.name))
        run.current = step_id
        parent = run.accepted.get(spec.after) if spec.after else None
        return _StepRun(
            run=run,
            spec=spec,
            step_id=step_id,
            parent=parent,
            gated=gated,
            scopes=self.policy.granted(spec.role, approved=gated is not None),
            started=self.ledger.clock.now(),
            outcome=StepOutcome(step_id, spec.name, spec.role, "success"),
        )

    def _check_incoming(self, sr: _StepRun) -> None:
        """Middleware: the envelope handed over must be complete, or the run aborts."""
        handoff = sr.handoff
        if handoff is None:
            return
        parent = sr.parent.artifact if sr.parent is not None else None
        if id(parent) in sr.run.contract_checked:
            # validate_tpc checked this very (frozen) envelope against the same schema
            # ($defs/HandoffEnvelope) and model when the parent's artifact was accepted.
            # A resumed run's artifacts come from blobs and are checked here again.
            return
        try:
            validate_envelope(handoff.model_dump(mode="json"))
        except ValidationFailed as exc:
            origin = sr.parent.step_id if sr.parent else None
            self._record_error(sr, f"incoming handoff envelope: {exc}", origin=origin)
            raise _Abort(exc) from exc

    def _critic_checks(self, sr: _StepRun) -> tuple[Finding, ...]:
        """A Critic starts from the runtime's check of its parent against the constraints
        that parent was handed (by the parent's own parent)."""
        parent = sr.parent
        if sr.spec.role != "Critic" or parent is None or parent.artifact is None:
            return ()
        grand = sr.run.accepted.get(self._parent_of(sr.run, parent.name) or "")
        handed = grand.artifact.handoff_envelope.constraints if grand and grand.artifact else ()
        check = check_constraints(
            parent.artifact,
            handed,
            role=parent.role,
            latency_ms=parent.latency_ms,
            validations_failed=parent.validations_failed,
        )
        sr.unchecked = check.unchecked
        return tuple(
            Finding(parent.name, v, harmful=True, origin=parent.name) for v in check.violations
        )

    def _context(
        self, sr: _StepRun, notes: tuple[str, ...], findings: tuple[Finding, ...]
    ) -> StepContext:
        parent = sr.parent
        return StepContext(
            run_id=sr.run.run_id,
            step_id=sr.step_id,
            name=sr.spec.name,
            role=sr.spec.role,
            inputs=sr.run.inputs,
            parent=parent.artifact if parent else None,
            parent_name=parent.name if parent else None,
            handoff=sr.handoff,
            artifacts=sr.run.artifacts(),
            scopes=sr.scopes,
            attempt=int(sr.step_id.rsplit("~r", 1)[1]) if "~r" in sr.step_id else 0,
            repair_notes=notes,
            findings=findings,
            workspace=self.workspace,
            metrics_source=lambda: store_metrics(self.ledger.store),
        )

    async def _call(self, sr: _StepRun, ctx: StepContext) -> Mapping[str, Any] | None:
        """Run the step's function; None when it failed (the failure is recorded)."""
        try:
            # Typed as object: user code may return anything, and that is checked below.
            raw: object = sr.spec.fn(ctx)
            if inspect.isawaitable(raw):
                raw = await raw
        except Exception as exc:  # noqa: BLE001 - a step is user code; its failure is data
            self._record_error(sr, _describe(exc), origin=sr.step_id)
            return None
        # What the step reported is read after it returned (blame, repair notes): a report
        # the runner cannot use is the step's own failure, not a crash that leaves the run
        # without this step's record or its end.
        unusable = _unusable_report(sr.run.pipeline, ctx.reported)
        if unusable is not None:
            self._record_error(sr, unusable, origin=sr.step_id)
            return None
        data = raw.model_dump(mode="json") if isinstance(raw, TPCArtifact) else raw
        if isinstance(data, Mapping):
            return data
        error = ValidationFailed("$", f"a step returns a TPC artifact, not {type(raw).__name__}")
        self._record_error(sr, str(error), origin=sr.step_id)
        raise _Abort(error)

    def _accept(self, sr: _StepRun, data: Mapping[str, Any]) -> tuple[TPCArtifact, str | None]:
        """Redact, validate against the TPC contract, and store by digest."""
        try:
            # Inside the try: a value the redactor refuses (bytes, a set, nesting past
            # MAX_DEPTH) is a contract violation too, recorded and blamed like one, not a
            # crash that leaves the run without a StepRecorded or RunFinished.
            redaction = self.redactor.redact({str(k): v for k, v in data.items()})
            artifact = _validated(redaction.value, sr.spec.role)
        except ValidationFailed as exc:
            self._record_error(sr, f"TPC artifact: {exc}", origin=sr.step_id)
            raise _Abort(exc) from exc
        stored = self.blobs.put(canonical_bytes(artifact.model_dump(mode="json")))
        sr.outcome.artifact, sr.outcome.artifact_hash = artifact, stored.digest
        sr.run.contract_checked.add(id(artifact))
        sr.redactions = redaction.redactions
        reasons = sorted({r.redaction_reason for r in redaction.redactions})
        return artifact, "; ".join(reasons) or None

    def _validate(self, sr: _StepRun, artifact: TPCArtifact) -> None:
        """An Executor runs the required validations it was handed."""
        if sr.spec.role != "Executor" or sr.handoff is None:
            return
        for name in sr.handoff.required_validations:
            inp = ValidationInput(artifact, self.workspace, self.redactor, sr.redactions)
            result = self.validations.run(name, inp)
            detail = None if result.detail is None else self._scrub(result.detail)
            sr.ran.append(name)
            digest = self.blobs.put(result.output).digest if result.output else None
            self._emit(sr.run, ValidationRecorded(
                run_id=sr.run.run_id, step_id=sr.step_id, name=name,
                check="command" if result.check == "command" else "validator",
                passed=result.passed, exit_code=result.exit_code,
                duration_ms=result.duration_ms, output_digest=digest, detail=detail,
            ))  # fmt: skip
            if not result.passed:
                sr.failed.append(name)
        sr.outcome.validations_failed = tuple(sr.failed)

    def _gate(self, sr: _StepRun, artifact: TPCArtifact, redaction_reason: str | None) -> bool:
        """Ask the policy; a matching step is recorded gated and the run pauses.

        A reason that names no path (an ``exec:`` action, a scope the policy does not
        allow) makes the gate repository-wide: its approver must be a default owner as well
        as own every path. The record says so itself; its reason texts could not.
        """
        request = request_from_artifact(sr.spec.role, artifact, sr.spec.scopes)
        request = replace(request, paths=_through_links(request.paths, self.workspace))
        reasons = self.policy.evaluate(request)
        sr.outcome.latency_ms = _ms(sr.started, self.ledger.clock.now())
        if not reasons:  # an approved execution never gets here (_after_gate)
            return False
        paths = tuple(dict.fromkeys(p for r in reasons for p in r.paths))
        wide = any(not r.paths for r in reasons)
        owners = self.codeowners.approvers(paths, repository_wide=wide) if self.codeowners else ()
        gate = GateRequested(
            run_id=sr.run.run_id,
            step_id=sr.step_id,
            role=sr.spec.role,
            reasons=tuple(f"{r.rule}: {r.reason}" for r in reasons),
            paths=paths,
            owners=owners,
            repository_wide=wide,
        )
        sr.run.gate_requested = True
        self._emit(sr.run, gate)
        sr.outcome.status = "gated"
        self._record_step(sr, redaction_reason=redaction_reason)
        sr.run.accepted[sr.spec.name] = sr.outcome
        return True

    def _apply(self, sr: _StepRun, ctx: StepContext, artifact: TPCArtifact) -> None:
        """Run the step's side effects with the scopes its gate (if any) lifted."""
        assert sr.spec.apply is not None
        sr.scopes = self.policy.granted(sr.spec.role, approved=True)
        try:
            sr.spec.apply(replace(ctx, step_id=sr.outcome.step_id, scopes=sr.scopes), artifact)
        except Exception as exc:  # noqa: BLE001 - an apply hook is user code
            sr.outcome.status, sr.outcome.error_origin = "error", sr.outcome.step_id
            sr.outcome.reason = self._scrub(f"apply failed: {_describe(exc)}")

    def _after_gate(self, sr: _StepRun, ctx: StepContext, gated: StepOutcome) -> StepOutcome:
        """The gated step, approved: run its apply hook with the lifted scopes and record it.

        The approval is spent here: it covered this artifact, once. A repair that runs the
        step again produces another artifact, which the policy gates afresh.
        """
        sr.run.approved.discard(sr.spec.name)
        outcome = sr.outcome  # under the gated execution's id (_begin)
        outcome.artifact, outcome.artifact_hash = gated.artifact, gated.artifact_hash
        if sr.spec.apply is not None and gated.artifact is not None:
            self._apply(sr, ctx, gated.artifact)
        self._record_step(sr, redaction_reason=None)
        if outcome.status == "error":
            self._blame(sr.run, outcome.step_id, sr.spec.role, outcome.reason or "failed",
                        outcome.step_id, harmful=False)  # fmt: skip
        else:
            sr.run.accepted[sr.spec.name] = outcome
        return outcome

    # -- blame -------------------------------------------------------------------------

    def _parent_of(self, run: _Run, name: str) -> str | None:
        return run.pipeline.steps[run.pipeline.index(name)].after

    def _ancestors(self, run: _Run, name: str) -> list[str]:
        out, cur = [name], self._parent_of(run, name)
        while cur is not None:
            out.append(cur)
            cur = self._parent_of(run, cur)
        return out

    def _attribute(self, run: _Run, findings: tuple[Finding, ...]) -> list[BlameAssigned]:
        """Blame each finding on its origin if that is the failed step or an ancestor of it
        (blame follows parent links); any other origin, or none, is unresolved."""
        out = []
        for f in findings:
            failed = run.accepted.get(f.step)
            failed_spec = run.pipeline.steps[run.pipeline.index(f.step)]
            reason = f.reason
            origin_id: StepId | None = None
            origin_role: RoleName | None = None
            if f.origin is not None and f.origin in self._ancestors(run, f.step):
                src = run.accepted.get(f.origin)
                origin_id = src.step_id if src else StepId(f.origin)
                origin_role = run.pipeline.steps[run.pipeline.index(f.origin)].role
            elif f.origin is not None:
                # The origin is the Critic's words too (no step, so no step name).
                named = self._scrub(f.origin)
                reason += f" (named origin {named!r} is not {f.step!r} or an ancestor of it)"
            out.append(
                BlameAssigned(
                    run_id=run.run_id,
                    detected_by=StepId("pending"),
                    failed_step_id=failed.step_id if failed else StepId(f.step),
                    failed_role=failed_spec.role,
                    origin_step_id=origin_id,
                    origin_role=origin_role,
                    reason=reason[:2000],
                    harmful=f.harmful,
                )
            )
        return out

    def _blame(
        self,
        run: _Run,
        detected_by: StepId,
        failed_role: RoleName,
        reason: str,
        origin: StepId | None,
        *,
        harmful: bool,
        failed_step: StepId | None = None,
    ) -> None:
        origin_role = None
        if origin is not None:
            origin_role = run.pipeline.steps[run.pipeline.index(origin.split("~", 1)[0])].role
        self._emit(
            run,
            BlameAssigned(
                run_id=run.run_id,
                detected_by=detected_by,
                failed_step_id=failed_step or detected_by,
                failed_role=failed_role,
                origin_step_id=origin,
                origin_role=origin_role,
                reason=reason[:2000],
                harmful=harmful,
            ),
        )

    # -- recording ---------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        """Redact free text (an exception message, a Critic's or Router's words, a
        validator's detail) before it can reach an event, a blob or a caller."""
        return self.redactor.redact_text(text).value

    def _emit(
        self, run: _Run, payload: Payload, *, read_past_decisions: bool = True
    ) -> RecordedEvent:
        """Append to the run's stream at the version this process last wrote or read.

        That fences a claimant that was slow, not dead: once a human took the run over, its
        next write raises :class:`RunTakenOver` and it records nothing more. A decision a
        human recorded meanwhile (an approval of the gate just requested) is read past.
        """
        stream = run_stream(run.run_id)
        while True:
            try:
                recorded = self._record(run, stream, payload)
                break
            except ConcurrencyConflict:
                if not read_past_decisions:
                    raise
                moved = list(self.ledger.store.read_stream(stream, from_version=run.version + 1))
                for e in moved:
                    if isinstance(e.payload, RunResumed):
                        by = e.payload.taken_over_by or "another resume"
                        raise RunTakenOver(run.run_id, by, _claimed(e)) from None
                    end = e.payload if isinstance(e.payload, RunFinished) else None
                    if end is not None and end.status in FINAL_RUN_STATUSES:
                        # `tracebound abandon` ended the run, taking this process for dead.
                        raise RunEnded(
                            run.run_id, end.status, end.reason or "no reason given"
                        ) from None
                if not moved or not all(isinstance(e.payload, ApprovalRecorded) for e in moved):
                    raise
                run.version = moved[-1].stream_version
        run.version = recorded.stream_version
        if self.on_event is not None:
            self.on_event(recorded)
        return recorded

    def _record(self, run: _Run, stream: str, payload: Payload) -> RecordedEvent:
        """Append one event of the run; a lost server is waited for, then asked again.

        ConnectionLost means nothing of the append was written, and the append is fenced by
        the stream's version anyway, so making it again cannot write it twice. A run whose
        end is recorded after an error tries once: its error is what surfaces.
        """
        outage: Outage | None = None
        while True:
            try:
                (recorded,) = self.ledger.record(
                    stream, [payload], workflow_id=run.run_id, expected_version=run.version
                )
            except ConnectionLost as exc:
                if run.stopped:
                    raise
                outage = outage or Outage(self.give_up_after)
                outage.wait(exc)  # raises ConnectionLost past give_up_after
                continue
            if outage is not None:
                outage.over(f"run {run.run_id} goes on")
            return recorded

    def _record_error(self, sr: _StepRun, reason: str, *, origin: StepId | None) -> StepOutcome:
        """A step that produced no valid artifact: its error record is the artifact."""
        outcome = sr.outcome
        # Redacted once, here: the reason goes to the error blob, the StepOutcome, the
        # BlameAssigned and RunFinished events, and the CLI's output.
        reason = self._scrub(reason)
        error_doc = {"step": outcome.step_id, "error": reason}
        outcome.artifact_hash = self.blobs.put(canonical_bytes(error_doc)).digest
        outcome.status, outcome.error_origin, outcome.reason = "error", origin, reason
        outcome.latency_ms = _ms(sr.started, self.ledger.clock.now())
        self._record_step(sr, redaction_reason=None)
        self._blame(sr.run, outcome.step_id, sr.spec.role, reason, origin, harmful=False)
        return outcome

    def _record_step(self, sr: _StepRun, *, redaction_reason: str | None) -> None:
        """The ARL entry: every field the record lists."""
        outcome = sr.outcome
        sr.run.result.steps.append(outcome)
        finished = self.ledger.clock.now()
        artifact = outcome.artifact
        cost = artifact.cost_est if artifact is not None else None
        assert outcome.artifact_hash is not None
        self._emit(
            sr.run,
            StepRecorded(
                run_id=sr.run.run_id,
                step_id=outcome.step_id,
                parent_step_id=sr.parent.step_id if sr.parent else None,
                role=sr.spec.role,
                timestamp_start=sr.started,
                timestamp_end=finished,
                duration_ms=_ms(sr.started, finished),
                artifact_hash=outcome.artifact_hash,
                payload_pointer=f"blob://{outcome.artifact_hash}",
                status=outcome.status,
                error_origin=outcome.error_origin,
                cost_est=CostEstimate(
                    prompt_tokens=cost.prompt_tokens if cost else 0,
                    compute_usd_est=cost.compute_usd_est if cost else Decimal(0),
                ),
                latency_ms=outcome.latency_ms,
                validations=Validations(
                    ran=tuple(sr.ran), pending=sr.unchecked, failed=tuple(sr.failed)
                ),
                storage=self.storage,
                redaction_reason=redaction_reason,
                scopes_granted=sr.scopes,
            ),
        )

    def _finish(
        self,
        run: _Run,
        status: RunStatus,
        step: StepId | None = None,
        reason: str | None = None,
    ) -> None:
        run.finishing = True
        run.result.status = status
        run.result.gated_step = step if status == "gated" else None
        run.result.failed_step = step if status in {"failed", "rejected"} else None
        run.result.reason = reason
        self._emit(
            run,
            RunFinished(
                run_id=run.run_id,
                status=status,
                failed_step=run.result.failed_step,
                reason=None if reason is None else reason[:2000],
            ),
        )
        if status in {"completed", "failed"} and run.pipeline.critical:
            self._check_slo(run)
        if self.evidence is not None:
            self.evidence(self.ledger, self.blobs, run.run_id)

    def _check_slo(self, run: _Run) -> None:
        # This runs after every critical run, over the whole log: the steps read are those
        # of this pipeline's runs, and only when a blame could break its SLOs.
        for v in store_slo_violations(self.ledger.store, pipeline=run.pipeline.name):
            self._emit(
                run,
                SloAlertRaised(
                    pipeline=v.pipeline,
                    pipeline_type=v.pipeline_type,
                    metric=v.metric,  # type: ignore[arg-type]
                    role=v.role,  # type: ignore[arg-type]
                    value=v.value,
                    threshold="0",
                    run_id=run.run_id,
                ),
            )

    # -- resuming ----------------------------------------------------------------------

    def _load(self, pipeline: Pipeline, run_id: str) -> _Loaded:
        """Rebuild a run from its ledger stream and its blobs."""
        started: RunStarted | None = None
        gate: GateRequested | None = None
        decision: ApprovalRecorded | None = None
        claimed: RecordedEvent | None = None
        repair: RepairAttempted | None = None
        finished: RunFinished | None = None
        steps: list[StepRecorded] = []
        blames: list[BlameAssigned] = []
        at_claim: tuple[int, int] | None = None  # steps and blames recorded at the claim
        version = 0
        for e in self.ledger.store.read_stream(run_stream(run_id)):
            version = e.stream_version
            p = e.payload
            if isinstance(p, RunStarted):
                started = p
            elif isinstance(p, StepRecorded):
                steps.append(p)
            elif isinstance(p, GateRequested):
                # A run waits at this gate once its process records run_finished(gated)
                # after it; until then it is still writing (or died): not resumable.
                gate, decision, claimed, at_claim, repair, finished = p, *(None,) * 5
            elif isinstance(p, ApprovalRecorded) and gate and p.step_id == gate.step_id:
                decision = p
            elif isinstance(p, RunResumed) and gate and p.step_id == gate.step_id:
                claimed = e
                # The gate's first claim marks what it stood on. A later one is a take-over
                # (tracebound.events.takeover): what the claim before it recorded is
                # abandoned, here as in every reader of the run, so it is cut now (a no-op
                # at the first claim), not only for the gate the run waits at: after a
                # take-over the run can go on to another gate, and a resume there builds
                # on the take-over's steps alone, not a mix in which a dead claimant's step
                # ids, or a step it got further to, would count as the run's own.
                at_claim = at_claim or (len(steps), len(blames))
                del steps[at_claim[0] :], blames[at_claim[1] :]
            elif isinstance(p, RepairAttempted) and at_claim is None:
                # the attempt the gate paused; a claimant's own repairs come after its claim
                repair = p
            elif isinstance(p, BlameAssigned):
                blames.append(p)
            elif isinstance(p, RunFinished):
                finished = p
        begun = _started(self.ledger.store, started, pipeline, run_id)
        inputs = orjson.loads(self.blobs.get(begun.inputs_digest))
        if finished is None and gate is None:
            raise ConfigError(
                f"run {run_id} has not finished (no run_finished, and no gate): its process "
                "is still running, or died; it is not waiting at a gate"
            )
        status: RunStatus = finished.status if finished else "gated"
        rid = RunId(run_id)
        run = _Run(rid, pipeline, inputs, RunResult(rid, status), version=version)
        waiting = finished is None or finished.status == "gated"
        # A claimed run (what a take-over continues) is rebuilt as it stood at its gate:
        # whatever the dead claimant recorded after its claim stays in the ledger but is not
        # built on, so the gated step applies the artifact the human approved, not a new one.
        if at_claim is not None and waiting:
            steps, blames = steps[: at_claim[0]], blames[: at_claim[1]]
        self._restore_steps(run, steps, blames)
        if not waiting:
            return _Loaded(run, None, None, None, None, version, settled=True)
        return _Loaded(run, gate, decision, claimed, repair, version, settled=finished is not None)

    def _restore_steps(
        self, run: _Run, steps: list[StepRecorded], blames: list[BlameAssigned]
    ) -> None:
        """The recorded steps' outcomes, with their artifacts read back from the blobs and
        their failures from the blames they recorded: a Critic's findings, or the reason a
        step failed (its last blame), so a resumed repair hands the same notes on and a run
        that ends failed says why."""
        by_detector: dict[str, list[BlameAssigned]] = {}
        for b in blames:
            by_detector.setdefault(b.detected_by, []).append(b)
        for s in steps:
            artifact = None
            if s.status in {"success", "gated"}:
                artifact = TPCArtifact.model_validate(orjson.loads(self.blobs.get(s.artifact_hash)))
            found = list(by_detector.get(s.step_id, ())) if s.status != "gated" else []
            failure = found.pop() if s.status == "error" and found else None
            findings = tuple(Finding(b.failed_step_id, b.reason, b.harmful, b.origin_step_id)
                             for b in found)  # fmt: skip
            reason = failure.reason if failure else "; ".join(f.reason for f in findings)
            outcome = StepOutcome(s.step_id, s.step_id.split("~", 1)[0], s.role, s.status,
                                  artifact, s.artifact_hash, s.error_origin, s.latency_ms,
                                  tuple(s.validations.failed), findings,
                                  reason or None)  # fmt: skip
            run.result.steps.append(outcome)
            if s.status in {"success", "gated"}:
                run.accepted[outcome.name] = outcome


def _outside_a_loop(name: str, async_name: str) -> None:
    """Checked before the coroutine is made: asyncio.run inside a loop raises its own
    RuntimeError and leaves that coroutine never awaited (a second warning)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise ConfigError(
        f"runner.{name}() blocks, so it cannot run inside a running event loop; "
        f"use `await runner.{async_name}(...)` there"
    )


class _Loaded(NamedTuple):
    """A run rebuilt from its stream, with the gate it waits at (if it does), the human
    decision on that gate, the ``run_resumed`` that claimed it (if any), the
    ``repair_attempted`` recorded after that gate (the repair attempt it paused), and the
    stream version read: the one a claim must be appended at."""

    run: _Run
    gate: GateRequested | None
    decision: ApprovalRecorded | None
    claimed: RecordedEvent | None
    repair: RepairAttempted | None
    version: int
    settled: bool  # run_finished(gated) follows the gate: its process is done with it


def _paused_repair(
    run_id: str, gate: GateRequested, repair: RepairAttempted | None
) -> RepairAttempted | None:
    """The repair attempt a gate paused, when the gated step is a repair's re-run
    (``name~rN``): what a resume must finish before the pass goes on."""
    if "~r" not in gate.step_id:
        return None
    if repair is None or repair.succeeded:
        raise ConfigError(
            f"run {run_id} waits at {gate.step_id}, a repair's step, but its stream records "
            "no repair attempt the gate paused: it cannot be resumed"
        )
    return repair


def _through_links(paths: tuple[str, ...], workspace: Path | None) -> tuple[str, ...]:
    """``paths`` plus, for each that passes through a symlink in ``workspace``, the path it
    really names there (``../...`` when the link leads out of the workspace).

    The policy and CODEOWNERS compare spellings; an apply hook writes files. With
    ``docs/ci -> ../.github/workflows`` in the workspace, ``docs/ci/deploy.yml`` is
    ``.github/workflows/deploy.yml``, and a link to ``/etc`` is a path outside the root, so
    both spellings are judged and the gate's approver must own both. Only links present
    when the gate is decided are seen: one made later, before the apply hook runs, is not
    (docs/pipeline.md says so; an apply hook should write without following links).
    """
    if workspace is None:
        return paths
    root = workspace.resolve()
    out = list(paths)
    for p in paths:
        if not p or p == ".." or p.startswith("../"):
            continue  # outside already: gated whatever it links to
        try:
            real = (root / p).resolve()
        except (OSError, RuntimeError):  # a link loop: judge the spelling alone
            continue
        name = normalise_path(os.path.relpath(real, root).replace(os.sep, "/"))
        if name and name != p:
            out.append(name)
    return tuple(dict.fromkeys(out))


def _started(
    store: LedgerStore, started: RunStarted | None, pipeline: Pipeline, run_id: str
) -> RunStarted:
    """The run's ``run_started``, checked to be there and of this pipeline."""
    if started is None:
        raise no_such_run(store, run_id)
    if started.pipeline != pipeline.name:
        raise ConfigError(
            f"run {run_id} is of pipeline {started.pipeline!r}, not {pipeline.name!r}"
        )
    return started


def _rerun_id(run: _Run, name: str) -> str:
    """``name~rN``, N one past the step's last re-run in this run: ids stay unique when a
    second repair loop re-runs a step again (gates, approvals and blame name steps by id)."""
    prefix = f"{name}~r"
    done = (o.step_id[len(prefix) :] for o in run.result.steps if o.step_id.startswith(prefix))
    return f"{prefix}{max((int(n) for n in done if n.isdigit()), default=0) + 1}"


def _claimed(event: RecordedEvent) -> str:
    """Where, when and (for a take-over) by whom another process claimed a run, for
    RunAlreadyResumed's message."""
    by = event.payload.taken_over_by if isinstance(event.payload, RunResumed) else None
    return (
        f"run_resumed recorded at position {event.position}, "
        f"{event.timestamp:%Y-%m-%d %H:%M:%S} UTC" + (f", taken over by {by}" if by else "")
    )


def approve(
    ledger: Ledger,
    run_id: RunId,
    step_id: StepId,
    approver: str,
    *,
    codeowners: CodeOwners | None,
    decision: Literal["approved", "rejected"] = "approved",
) -> ApprovalRecorded:
    """Record a named human's decision on a gated step, checked against CODEOWNERS.

    The decision is appended at the version of the run stream it was judged on, so two
    decisions racing on one gate cannot both be recorded: the loser re-reads the run and is
    told the gate was decided. Anything else that moved the stream meanwhile (the gating
    process finishing its records) is judged again the same way.

    Raises:
        ConfigError: the step is not waiting at a gate, or was already decided.
        PolicyError: no CODEOWNERS file, or the approver does not own every path the gate
            names (or, for a repository-wide gate, is not a default owner as well).
        ConcurrencyConflict: the run's stream kept moving through every attempt.
    """
    left = _DECIDE_ATTEMPTS
    while True:
        try:
            return _decide(
                ledger, run_id, step_id, approver, codeowners=codeowners, decision=decision
            )
        except ConcurrencyConflict:
            left -= 1  # re-read: the other writer may have decided this gate
            if not left:
                raise


_DECIDE_ATTEMPTS: Final = 8  # a run's process writes a few records after its gate, then stops


def _decide(
    ledger: Ledger,
    run_id: RunId,
    step_id: StepId,
    approver: str,
    *,
    codeowners: CodeOwners | None,
    decision: Literal["approved", "rejected"],
) -> ApprovalRecorded:
    """One judged attempt of :func:`approve`, appended at the stream version it read."""
    gate: GateRequested | None = None
    decided: ApprovalRecorded | None = None  # a decision on the latest gate of this step
    version = 0
    for e in ledger.store.read_stream(run_stream(run_id)):
        version = e.stream_version
        if isinstance(e.payload, GateRequested) and e.payload.step_id == step_id:
            gate, decided = e.payload, None
        elif isinstance(e.payload, ApprovalRecorded) and gate and e.payload.step_id == step_id:
            decided = e.payload
    if gate is None:
        raise ConfigError(f"step {step_id!r} of run {run_id!r} is not waiting for approval")
    if decided is not None:
        raise ConfigError(f"{step_id} in run {run_id} was already {decided.decision}")
    # Rejecting is an owner's call too (docs/pipeline.md), and the check keeps the recorded
    # name one of CODEOWNERS' names: this function has no redactor, so an unchecked name (a
    # pasted token) would go to the ledger as it is.
    if codeowners is None:
        doing = "approving" if decision == "approved" else "rejecting"
        raise PolicyError(f"{doing} needs a CODEOWNERS file: a gate is decided by its owners")
    codeowners.check_approver(approver, gate.paths, repository_wide=gate.repository_wide)
    record = ApprovalRecorded(
        run_id=run_id,
        step_id=step_id,
        approver=approver,
        decision=decision,
        paths=gate.paths,
        timestamp=ledger.clock.now(),
    )
    ledger.record(run_stream(run_id), [record], workflow_id=run_id, expected_version=version)
    return record


def _is_arl_run_id(run_id: object) -> bool:
    """A UUID in its one lower-case, hyphenated spelling (``str(UUID(...))``)."""
    if not isinstance(run_id, str):
        return False
    try:
        return str(UUID(run_id)) == run_id
    except ValueError:
        return False


def _unusable_report(pipeline: Pipeline, reported: list[Finding]) -> str | None:
    """Why a step's ``ctx.report()`` calls cannot be recorded, or None when they can."""
    names = {spec.name for spec in pipeline.steps}
    for f in reported:
        # Typed as object: report() is called by user code, which may pass anything.
        step: object = f.step
        reason: object = f.reason
        harmful: object = f.harmful
        origin: object = f.origin
        if not isinstance(step, str) or step not in names:
            return f"report() names step {step!r}, which pipeline {pipeline.name!r} does not have"
        if not isinstance(reason, str):
            return f"report(): the reason must be text, not {type(reason).__name__}"
        if not isinstance(harmful, bool):
            return f"report(): harmful must be True or False, not {type(harmful).__name__}"
        if origin is not None and not isinstance(origin, str):
            return f"report(): origin must be a step name or None, not {type(origin).__name__}"
    return None


def _validated(data: Mapping[str, Any], role: str) -> TPCArtifact:
    artifact = validate_tpc(data)
    if artifact.role != role:
        raise ValidationFailed("role", f"is {artifact.role} but the step is a {role}")
    return artifact


def replace_detected(blame: BlameAssigned, detected_by: StepId) -> BlameAssigned:
    """The same blame, credited to the step that detected it."""
    return blame.model_copy(update={"detected_by": detected_by})


def _describe(exc: BaseException) -> str:
    """``Type: message`` for a failure in user code, even when its ``__str__`` raises."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not turn a step failure into a crash
        message = "<the exception's message could not be read>"
    return f"{type(exc).__name__}: {message}"


def _ms(start: datetime, end: datetime) -> int:
    return max(0, int((end - start).total_seconds() * 1000))
