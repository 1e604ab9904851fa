"""The retry loop: plan, verify, and on failure plan again with a fenced summary (ADR-0002).

One call to :meth:`RetryLoop.run` makes at most ``1 + max_retries`` attempts (three retries
by default, ADR-0014). Each attempt is:

1. ``FallbackTier.run(ctx, prior_attempts=summaries, verify=gates.anchor_hook(target))``: the
   planning side plans (recipe, retrieval, LLM), the GateRunner verifies the patch in a
   sandbox *inside* that call, and the attempt closes with exactly one
   ``AttemptAnchorRecorded`` carrying the trust outcome;
2. ``gates.record_attempt(plan)``: the verifying side's RetryLedger line, chained onto the
   planning side's head (ADR-0005);
3. the anchor is projected to its JSONL file (ADR-04-0017);
4. if the gates passed, the solved example feeds retrieval (``on_validated``) and the loop
   ends; if not, an :class:`AttemptSummary` is built from the *structured* failing signals
   only, sanitised and fenced, its text kept as a blob, ``RetryRequested`` is recorded, and
   the next attempt receives it. After the last attempt, or on a planning-side refusal,
   ``AttemptRefused`` closes the run.

If ``FallbackTier.run`` raises instead of returning a plan (the tier's own failure as
``PlanningFailed``, an interrupt, a gate's error) after it recorded the attempt's anchor and
moved ``chain_head.bin``, the verifying side still closes that attempt: its attempts-log
line (what the anchor says: the plan's tag, no verdict), its cost and learning rows, its
anchor file line, and ``AttemptRefused(cause="not_retryable")`` (``budget_exceeded`` for a
budget refusal), whose ``reason`` names the step and the error type. Only then is the
original error re-raised, so an interrupt still interrupts. An attempt without an anchor
(the tier failed before its first event, or a ledger write failed) gets nothing: there is
no planning record for it to answer.

But the remediation still ends on the record. If the loop raises between two attempts,
after ``RetryRequested`` for attempt N and before attempt N+1 is anchored (in the tier
before its first event, in the loop's clock...), attempt N, the last attempt made, gets
``AttemptRefused(cause="not_retryable")`` with a ``reason`` of ``<kind> (<type>) before
attempt N+1 was anchored: the retry requested after attempt N was not made; the loop
stopped`` (``kind``: ``interrupted``, ``tier_error`` for ``PlanningFailed``, else
``error``), unless it has its refusal already; then the original error is re-raised
unchanged. So a remediation that stops without a passing attempt ends with one
``AttemptRefused`` (a write that fails is noted on the error), never on a retry request
that nothing followed. A run stopped before attempt 0 was anchored asked for nothing and
writes nothing.

If ``FallbackTier.run`` returned and the loop itself then raises (an interrupt, or a failure
of its own bookkeeping: the attempts log, the cost row, the retry request...), the attempt
is closed the same way, as what it was (the plan, with its verdict): whichever of those
records is not in its store yet, then ``AttemptRefused`` with the same causes and a
``reason`` of ``interrupted (<type>) during <step>`` or ``record_error (<type>) during
<step>``, unless the attempt passed the gates or the loop had already written its refusal
(each attempt has at most one). Then an interrupt or a tracebound error surfaces as itself,
anything else as :class:`BookkeepingFailed` (the original is its ``__cause__``).

No raw sandbox output can reach a prompt: the only thing that flows back is the summary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal, Protocol
from uuid import UUID

from tracebound.canonical import canonical_bytes
from tracebound.errors import ConfigError, StorageError, TraceboundError, ValidationFailed
from tracebound.events.anchor import AttemptAnchor, PlanOutcomeTag
from tracebound.events.catalog import (
    AttemptAnchorRecorded,
    AttemptCompleted,
    AttemptRefused,
    CostIncurred,
    CostSource,
    LeafReturned,
    RetryRequested,
    SolutionFound,
    TransformBuilt,
)
from tracebound.events.envelope import Payload
from tracebound.ids import AdvisoryId, AttemptId, PatchDigest
from tracebound.ledger import Ledger
from tracebound.pipeline.fallback import (
    ApplyContext,
    FallbackTier,
    FenceWrapper,
    PlanningFailed,
    PlanOutcome,
    SolvedExampleStore,
    attempt_stream,
    build_attempt_summary,
)
from tracebound.pipeline.retry.anchors import AnchorWriter
from tracebound.pipeline.retry.gates import GateRunner, PlanLike, RefusalCause, gate_stream
from tracebound.pipeline.retry.models import AttemptSummary
from tracebound.store.blobs import BlobStore

__all__ = ["BookkeepingFailed", "LoopResult", "RetryLoop"]

DEFAULT_MAX_RETRIES = 3


class _Closed(PlanLike, Protocol):
    """An attempt the planning side closed by its anchor: a ``PlanOutcome``, or what the
    ledger says about an attempt whose ``FallbackTier.run`` raised (:class:`_Raised`). What
    the gates read (:class:`PlanLike`), with its outcome tag and anchor."""

    @property
    def tag(self) -> PlanOutcomeTag: ...

    @property
    def anchor(self) -> AttemptAnchor: ...


@dataclass(frozen=True, slots=True)
class _Raised:
    """An anchored attempt whose ``FallbackTier.run`` raised, rebuilt from the ledger.

    Everything comes from the recorded anchor (and the attempt's ``TransformBuilt`` for the
    patch digest): the patch text itself was never handed back, and no verdict was reached
    (the anchor carries no trust fields on these paths), so ``trust`` is None.
    """

    anchor: AttemptAnchor
    patch_blake3: str | None
    patch: None = None
    trust: None = None

    @property
    def tag(self) -> PlanOutcomeTag:
        return self.anchor.validator_outcome

    @property
    def attempt_id(self) -> UUID:
        return self.anchor.attempt_id

    @property
    def attempt_index(self) -> int:
        return self.anchor.attempt_index

    @property
    def workflow_id(self) -> str:
        return self.anchor.workflow_id

    @property
    def refusal_reason(self) -> str | None:
        return self.anchor.refusal_reason


class BookkeepingFailed(StorageError):
    """The loop's own bookkeeping failed after ``FallbackTier.run`` returned an attempt: a
    storage error, for what failed is recording the attempt (the branch of the tree).

    Raised for an error that is not a tracebound error (those, and interrupts, surface as
    themselves), once the attempt has been closed on the verifying side (see the module
    docstring). ``step`` is what the loop was recording, ``cause`` the original error's
    type; the original is the ``__cause__``. Only its type name is in the message, which
    could otherwise quote a prompt or a credential.
    """

    def __init__(self, attempt_id: UUID, workflow_id: str, step: str, cause: str) -> None:
        self.attempt_id = attempt_id
        self.workflow_id = workflow_id
        self.step = step
        self.cause = cause
        super().__init__(
            f"attempt {attempt_id} of workflow {workflow_id!r}: the retry loop failed with "
            f"{cause} during {step}; the attempt is closed on the verifying side"
        )

    def __reduce__(self) -> tuple[type[BookkeepingFailed], tuple[UUID, str, str, str]]:
        return (type(self), (self.attempt_id, self.workflow_id, self.step, self.cause))


@dataclass
class LoopResult:
    """How the loop ended, and every attempt it made, in order."""

    status: Literal["passed", "refused"]
    attempts: list[PlanOutcome] = field(default_factory=list)
    summaries: list[AttemptSummary] = field(default_factory=list)
    reason: str | None = None

    @property
    def final(self) -> PlanOutcome:
        if not self.attempts:
            raise ConfigError("the loop made no attempt")
        return self.attempts[-1]


class RetryLoop:
    """Drives the planning side and the verifying side for one remediation.

    Args:
        tier: the planning side.
        gates: the verifying side (its RetryLedger lives under its ``runs_root``).
        ledger: the ledger both sides write to (costs are recorded here too).
        fence: the FenceWrapper the summaries are sanitised with (the tier's own).
        blobs: where summaries are kept (``RetryRequested`` points at them by digest).
        anchors: the JSONL anchor projection, or None to skip it.
        retrieval: the solved-example store to grow when a patch validates, if any.
        max_retries: retries after the first attempt (the record allows three).
    """

    def __init__(
        self,
        tier: FallbackTier,
        gates: GateRunner,
        *,
        ledger: Ledger,
        fence: FenceWrapper,
        blobs: BlobStore,
        anchors: AnchorWriter | None = None,
        retrieval: SolvedExampleStore | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> None:
        if max_retries < 0:
            raise ConfigError("max_retries cannot be negative")
        self.tier = tier
        self.gates = gates
        self.ledger = ledger
        self.fence = fence
        self.blobs = blobs
        self.anchors = anchors
        self.retrieval = retrieval
        self.max_retries = max_retries

    def run(self, ctx: ApplyContext, *, workflow_id: str, target: Path) -> LoopResult:
        """Remediate ``target`` until a patch passes the gates or the attempts run out.

        One call is one whole remediation: its attempts are numbered from 0 in a workflow
        of their own.

        Raises:
            ValidationFailed: ``workflow_id`` already has attempts (an earlier run, or one
                that was interrupted); nothing is planned, paid for or run.
            BaseException: whatever ``FallbackTier.run`` raised (``PlanningFailed``, an
                interrupt, a gate's error), unchanged, once the verifying side has closed
                the attempt if the planning side anchored it, or else refused the previous
                attempt whose retry was requested (see the module docstring);
                an interrupt or tracebound error raised by the loop's own bookkeeping,
                unchanged, once the attempt is closed.
            BookkeepingFailed: any other error of the loop's own bookkeeping, once the
                attempt is closed.
        """
        if self.ledger.store.stream_head(attempt_stream(workflow_id)) is not None:
            raise ValidationFailed(
                "workflow_id",
                f"{workflow_id!r} already has attempts in {attempt_stream(workflow_id)}; "
                "a RetryLoop run is one whole remediation: start it under a new workflow id",
            )
        result = LoopResult("refused")
        try:
            return self._attempts(ctx, workflow_id, target, result)
        except BaseException as exc:
            # Each attempt the tier anchored is closed by _attempts. What no attempt closes
            # is a retry that was requested and never made: the error came between two
            # attempts (in the tier before its first event, in the loop's clock, ...), so
            # the remediation would end on RetryRequested, as if it were still running.
            self._close_unmade_retry(workflow_id, result, exc)
            raise

    def _attempts(
        self, ctx: ApplyContext, workflow_id: str, target: Path, result: LoopResult
    ) -> LoopResult:
        """The attempts of :meth:`run`, each closed on the verifying side if it raises."""
        hook = self.gates.anchor_hook(target)
        for index in range(self.max_retries + 1):
            started = self.ledger.clock.now()
            plan: PlanOutcome | None = None
            doing = "the attempts log line"
            # One try for the whole attempt, so that no bytecode between the tier's return
            # and the end of the loop's own writes is unguarded: once ``plan`` is bound the
            # tier has anchored and settled the attempt, and whatever raises from there on
            # (an interrupt, a failing write of the loop's own) must still close it.
            try:
                plan = self.tier.run(
                    ctx,
                    workflow_id=workflow_id,
                    attempt_index=index,
                    prior_attempts=list(result.summaries),
                    verify=hook,
                )
                result.attempts.append(plan)
                for what, step in self._closing_steps(ctx, plan, workflow_id, started):
                    doing = what
                    step()
                if plan.trust is None:  # the planning side refused: nothing was verified
                    doing = "AttemptRefused"
                    reason = plan.refusal_reason or "refused by the planner"
                    self.gates.refuse(plan, cause=_refusal_cause(plan), reason=reason)
                    result.reason = reason
                    return result
                if plan.trust.passed:
                    doing = "the solved example"
                    if self.retrieval is not None:
                        # The advisory's text is kept for later searches: redacted, as
                        # the prompt that showed it was.
                        self.retrieval.on_validated(ctx, plan, redactor=self.gates.redactor)
                    result.status = "passed"
                    return result
                if index == self.max_retries:
                    doing = "AttemptRefused"
                    reason = f"no patch passed the gates in {index + 1} attempts"
                    self.gates.refuse(plan, cause="retry_limit", reason=reason)
                    result.reason = reason
                    return result
                doing = "the retry request"
                summary = self._summary(plan)
                result.summaries.append(summary)
                pointer = self.blobs.put(canonical_bytes(summary.model_dump(mode="json"))).digest
                self.gates.request_retry(plan, plan.trust, pointer)
            except BaseException as exc:
                if plan is None:  # the tier raised: closed as its anchor says, re-raised as is
                    self._close_raised(ctx, workflow_id, index, started, exc)
                    raise
                # The tier returned, then the loop failed: an interrupt and a tracebound
                # error surface as themselves, anything else typed (BookkeepingFailed).
                typed = exc
                if isinstance(exc, Exception) and not isinstance(exc, TraceboundError):
                    typed = BookkeepingFailed(
                        plan.attempt_id, workflow_id, doing, type(exc).__name__
                    )
                kind = "interrupted" if not isinstance(exc, Exception) else "record_error"
                reason = (
                    f"{kind} ({type(exc).__name__}) during {doing}: the tier returned the "
                    "attempt, then the loop raised; the loop stopped without retrying"
                )
                self._close(ctx, plan, workflow_id, started, exc=typed, reason=reason)
                if typed is exc:
                    raise
                raise typed from exc
        raise AssertionError(
            "unreachable: the loop returns on its last attempt"
        )  # pragma: no cover

    def _closing_steps(
        self,
        ctx: ApplyContext,
        closed: _Closed,
        workflow_id: str,
        started: datetime,
        *,
        once: bool = False,
    ) -> list[tuple[str, Callable[[], object]]]:
        """The verifying side's records of one attempt, in order, named for notes.

        With ``once``, each step first asks the record's own store whether it is there
        already and does nothing if so: after an error it is unknown how far the loop got,
        and a second attempts line is refused (``LedgerAttemptOutOfOrder``), a second cost
        row would count the money twice. The anchors file checks for itself.
        """
        attempt_id = str(closed.attempt_id)

        def attempt_line() -> None:
            retry = self.gates.retry_ledger(workflow_id) if once else None
            if retry is None or not retry.has_attempt(AttemptId(closed.attempt_id)):
                self.gates.record_attempt(closed)

        def cost_row() -> None:
            if not (once and self._has(f"costs/{workflow_id}", attempt_id, CostIncurred)):
                self._record_cost(closed, workflow_id)

        def learning_rows() -> None:
            if not (once and self._has(f"learning/{workflow_id}", attempt_id, AttemptCompleted)):
                self._record_learning(ctx, closed, workflow_id, started)

        steps: list[tuple[str, Callable[[], object]]] = [
            ("the attempts log line", attempt_line),
            ("the cost row", cost_row),
            ("the learning rows", learning_rows),
        ]
        if self.anchors is not None:
            anchors = self.anchors
            steps.append(("the anchor file line", lambda: anchors.write(closed.anchor)))
        return steps

    def _has(self, stream: str, attempt_id: str, kind: type[Payload]) -> bool:
        """Whether ``stream`` holds a ``kind`` event of this attempt (by ``attempt_id`` in
        the payload, else by ``correlation_id``)."""
        return any(
            isinstance(e.payload, kind)
            and str(getattr(e.payload, "attempt_id", e.correlation_id)) == attempt_id
            for e in self.ledger.store.read_stream(stream)
        )

    def _close(
        self,
        ctx: ApplyContext,
        closed: _Closed,
        workflow_id: str,
        started: datetime,
        *,
        exc: BaseException,
        reason: str,
    ) -> None:
        """Close an attempt the planning side anchored, after an error: whichever of its
        records is missing (see :meth:`_closing_steps`), then ``AttemptRefused`` unless the
        attempt passed the gates or already has one (a passed attempt did not end without
        success; a refusal the loop already wrote is the attempt's one refusal).

        Each step runs through the usual checks (``RetryLedger`` re-verifies the chain and
        refuses a line out of order); a step that fails is noted on ``exc`` and the next
        one still runs, since the caller raises ``exc`` whatever happens here. An interrupt
        arriving during these writes propagates (a second Ctrl-C stops them).
        """
        steps = self._closing_steps(ctx, closed, workflow_id, started, once=True)
        if closed.trust is None or not closed.trust.passed:
            cause = _refusal_cause(closed)
            attempt_id = str(closed.attempt_id)

            def refusal() -> None:
                if not self._has(gate_stream(workflow_id), attempt_id, AttemptRefused):
                    self.gates.refuse(closed, cause=cause, reason=reason)

            steps.append(("AttemptRefused", refusal))
        for what, step in steps:
            try:
                step()
            except Exception as failed:  # noqa: BLE001 - noted; the original error is what surfaces
                detail = str(failed) if isinstance(failed, TraceboundError) else ""
                exc.add_note(
                    f"the verifying side could not record {what} for attempt "
                    f"{closed.attempt_index} of {workflow_id!r}: {type(failed).__name__}"
                    + (f": {detail}" if detail else "")
                )

    def _close_raised(
        self,
        ctx: ApplyContext,
        workflow_id: str,
        index: int,
        started: datetime,
        exc: BaseException,
    ) -> None:
        """The verifying side's record of an attempt whose ``FallbackTier.run`` raised.

        If the planning side anchored the attempt (and so moved ``chain_head.bin``), record
        what a planning-side refusal gets (:meth:`_close`), as the ledger says the attempt
        ended (:class:`_Raised`).
        """
        raised = self._raised_attempt(workflow_id, index, exc)
        if raised is None:
            return  # nothing anchored: the attempt left no planning record to answer
        reason = _raised_reason(raised.anchor, exc)
        self._close(ctx, raised, workflow_id, started, exc=exc, reason=reason)

    def _close_unmade_retry(self, workflow_id: str, result: LoopResult, exc: BaseException) -> None:
        """End a remediation whose last attempt asked for a retry that was not made.

        The loop raised after ``RetryRequested`` for attempt N and before the planning side
        anchored attempt N+1 (the tier failed before its first event, or was never called).
        Attempt N+1 left no planning record to answer, and attempt N was settled; but the
        run's last word would be that it retries. So attempt N, the last attempt made, gets
        the run's one ``AttemptRefused`` (``not_retryable``: the loop does not retry after
        an error), whose reason names the error and the retry not made.

        The ledger decides: nothing is written unless attempt N has its ``RetryRequested``
        and no ``AttemptRefused`` yet, and no attempt N+1 is anchored (an anchored attempt
        is closed as itself, by :meth:`_close_raised` or :meth:`_close`). A failed write or
        read is noted on ``exc``, which the caller raises either way.
        """
        if not result.attempts:
            return  # attempt 0 was never anchored: nothing was requested, nothing to close
        last = result.attempts[-1]
        attempt_id = str(last.attempt_id)
        index = last.attempt_index + 1
        try:
            if not self._has(gate_stream(workflow_id), attempt_id, RetryRequested):
                return  # the attempt was closed as itself (or passed): no retry is pending
            if self._has(gate_stream(workflow_id), attempt_id, AttemptRefused):
                return  # its refusal is written already: an attempt has at most one
            if any(
                isinstance(e.payload, AttemptAnchorRecorded)
                and e.payload.anchor.attempt_index == index
                for e in self.ledger.store.read_stream(attempt_stream(workflow_id))
            ):
                return  # the retry was made: that attempt's own closing ends the run
            self.gates.refuse(last, cause="not_retryable", reason=_unmade_reason(index, exc))
        except Exception as failed:  # noqa: BLE001 - noted; the original error is what surfaces
            detail = str(failed) if isinstance(failed, TraceboundError) else ""
            exc.add_note(
                f"the verifying side could not record AttemptRefused for attempt "
                f"{last.attempt_index} of {workflow_id!r} (its retry was not made): "
                f"{type(failed).__name__}" + (f": {detail}" if detail else "")
            )

    def _raised_attempt(self, workflow_id: str, index: int, exc: BaseException) -> _Raised | None:
        """The attempt's anchor as the ledger holds it, if the planning side recorded one.

        The ledger is the authority: whatever ``exc`` is, the attempt counts as anchored iff
        ``attempts/<workflow_id>`` holds an ``AttemptAnchorRecorded`` with this index (a
        ``RetryLoop`` run starts on an empty stream and uses each index once).
        """
        try:
            events = list(self.ledger.store.read_stream(attempt_stream(workflow_id)))
        except Exception as failed:  # noqa: BLE001 - the store itself is failing: noted, nothing more to record
            exc.add_note(
                f"the verifying side could not read {attempt_stream(workflow_id)} to close "
                f"attempt {index}: {type(failed).__name__}"
            )
            return None
        anchor = next(
            (
                e.payload.anchor
                for e in events
                if isinstance(e.payload, AttemptAnchorRecorded)
                and e.payload.anchor.attempt_index == index
            ),
            None,
        )
        if anchor is None:
            return None
        digest = next(
            (
                e.payload.patch_digest_blake3
                for e in events
                if isinstance(e.payload, TransformBuilt)
                and e.payload.attempt_id == anchor.attempt_id
            ),
            None,
        )
        return _Raised(anchor, None if anchor.validator_outcome == "Refused" else digest)

    def _record_cost(self, plan: _Closed, workflow_id: str) -> None:
        """What the attempt spent, for the cost ledger (cached and reasoning tokens apart).

        The token breakdown is read back from the attempt's own ``LeafReturned`` event, so
        the cost row and the planning record can never disagree.
        """
        anchor = plan.anchor
        if anchor.cost_usd <= 0:
            return  # a recipe or retrieval attempt called no model
        returned = [
            e.payload
            for e in self.ledger.store.read_stream(attempt_stream(workflow_id))
            if isinstance(e.payload, LeafReturned) and e.payload.attempt_id == plan.attempt_id
        ]
        cost = CostIncurred(
            tier="direct",
            amount_usd=anchor.cost_usd,
            source=CostSource("llm"),
            tokens_in=sum(r.tokens_in for r in returned),
            tokens_out=sum(r.tokens_out for r in returned),
            cached_input_tokens=sum(r.cached_input_tokens for r in returned),
            reasoning_tokens=sum(r.reasoning_tokens for r in returned),
            model=returned[-1].model if returned else None,
            role="Executor",
            # LeafReturned has no cache-write fields: the tier keeps them on the anchor.
            cache_write_input_tokens=_extra_count(anchor, "phase4.cache_write_input_tokens"),
            cache_write_long_input_tokens=_extra_count(
                anchor, "phase4.cache_write_long_input_tokens"
            ),
        )
        # correlation_id: the row names its attempt, so a close after an error can tell
        # whether it was written already (CostIncurred itself carries no attempt id).
        self.ledger.record(
            f"costs/{workflow_id}",
            [cost],
            workflow_id=workflow_id,
            correlation_id=str(plan.attempt_id),
        )

    def _record_learning(
        self, ctx: ApplyContext, plan: _Closed, workflow_id: str, started: datetime
    ) -> None:
        """Stage 7's inputs: every attempt completed, and the patch that solved it, if any.

        They go to ``learning/<workflow_id>``, not to the attempt stream: an attempt's frame
        ends with its anchor, and these are about the remediation as a whole.
        """
        trust = plan.trust
        elapsed = self.ledger.clock.now() - started
        events: list[Payload] = [
            AttemptCompleted(
                attempt_id=AttemptId(plan.attempt_id),
                attempt_index=plan.attempt_index,
                advisory_id=AdvisoryId(ctx.advisory.id),
                outcome=plan.tag,
                trust_outcome_passed=None if trust is None else trust.passed,
                cost_usd=plan.anchor.cost_usd,
                duration_ms=max(0, int(elapsed.total_seconds() * 1000)),
            )
        ]
        if trust is not None and trust.passed and plan.patch_blake3 and plan.tag != "Refused":
            events.append(
                SolutionFound(
                    attempt_id=AttemptId(plan.attempt_id),
                    attempt_index=plan.attempt_index,
                    advisory_id=AdvisoryId(ctx.advisory.id),
                    patch_digest_blake3=PatchDigest(plan.patch_blake3),
                    outcome=plan.tag,
                )
            )
        self.ledger.record(f"learning/{workflow_id}", events, workflow_id=workflow_id)

    def _summary(self, plan: PlanOutcome) -> AttemptSummary:
        trust = plan.trust
        assert trust is not None
        report = self.gates.report(trust.sandbox_run_id)
        return build_attempt_summary(
            attempt_id=plan.attempt_id,
            sandbox_run_id=trust.sandbox_run_id,
            failing_signals=trust.failing_signals,
            fence=self.fence,
            evidence_paths=tuple(report.evidence_paths) if report else (),
            redactor=self.gates.redactor,
        )


def _extra_count(anchor: AttemptAnchor, key: str) -> int | None:
    """A token count the tier kept in the anchor's extras; None when it kept none (a plan
    from another tier may not have them, so anything but digits is none too)."""
    text = anchor.extras.get(key)
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


def _refusal_cause(plan: _Closed) -> RefusalCause:
    """``AttemptRefused.cause`` for an attempt that ended without a verdict: the planner
    refused for money (``budget_exceeded``), or anything else the loop does not retry."""
    return "budget_exceeded" if plan.refusal_reason == "budget" else "not_retryable"


def _unmade_reason(index: int, exc: BaseException) -> str:
    """``AttemptRefused.reason`` for the attempt before ``index`` when the loop raised before
    attempt ``index`` was anchored (its retry requested, never made).

    ``<kind> (<error type>)``: ``interrupted`` for Ctrl-C, ``CancelledError`` or
    ``SystemExit``; ``tier_error`` for ``PlanningFailed`` (with the original error's type,
    as for an anchored attempt); else ``error``. Type names only, as in
    :func:`_raised_reason`.
    """
    if not isinstance(exc, Exception):
        kind, name = "interrupted", type(exc).__name__
    elif isinstance(exc, PlanningFailed):
        kind, name = "tier_error", exc.cause
    else:
        kind, name = "error", type(exc).__name__
    return (
        f"{kind} ({name}) before attempt {index} was anchored: the retry requested after "
        f"attempt {index - 1} was not made; the loop stopped"
    )


def _raised_reason(anchor: AttemptAnchor, exc: BaseException) -> str:
    """``AttemptRefused.reason`` for an anchored attempt whose ``FallbackTier.run`` raised.

    ``<step> (<error type>)``: ``interrupted`` for Ctrl-C or ``SystemExit``; else
    ``verify_error`` when the gates raised, else the anchor's refusal reason
    (``tier_error``, ``leaf_error``, ...). Type names only: a message may quote a prompt or
    a credential (for ``PlanningFailed``, the type of the original error, as
    ``phase4.tier_error`` records it).
    """
    name = exc.cause if isinstance(exc, PlanningFailed) else type(exc).__name__
    if not isinstance(exc, Exception):
        step = "interrupted"
    elif "phase4.verify_error" in anchor.extras:
        step = "verify_error"
    else:
        step = anchor.refusal_reason or "tier_error"
    return (
        f"{step} ({name}): the attempt was closed by its anchor, then raised; "
        "the loop stopped without retrying"
    )
