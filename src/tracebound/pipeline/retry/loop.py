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

No raw sandbox output can reach a prompt: the only thing that flows back is the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from tracebound.canonical import canonical_bytes
from tracebound.errors import ConfigError, ValidationFailed
from tracebound.events.catalog import (
    AttemptCompleted,
    CostIncurred,
    CostSource,
    LeafReturned,
    SolutionFound,
)
from tracebound.events.envelope import Payload
from tracebound.ids import AdvisoryId, AttemptId, PatchDigest
from tracebound.ledger import Ledger
from tracebound.pipeline.fallback import (
    ApplyContext,
    FallbackTier,
    FenceWrapper,
    PlanOutcome,
    SolvedExampleStore,
    attempt_stream,
    build_attempt_summary,
)
from tracebound.pipeline.retry.anchors import AnchorWriter
from tracebound.pipeline.retry.gates import GateRunner
from tracebound.pipeline.retry.models import AttemptSummary
from tracebound.store.blobs import BlobStore

__all__ = ["LoopResult", "RetryLoop"]

DEFAULT_MAX_RETRIES = 3


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
        """
        if self.ledger.store.stream_head(attempt_stream(workflow_id)) is not None:
            raise ValidationFailed(
                "workflow_id",
                f"{workflow_id!r} already has attempts in {attempt_stream(workflow_id)}; "
                "a RetryLoop run is one whole remediation: start it under a new workflow id",
            )
        result = LoopResult("refused")
        hook = self.gates.anchor_hook(target)
        for index in range(self.max_retries + 1):
            started = self.ledger.clock.now()
            plan = self.tier.run(
                ctx,
                workflow_id=workflow_id,
                attempt_index=index,
                prior_attempts=list(result.summaries),
                verify=hook,
            )
            result.attempts.append(plan)
            self.gates.record_attempt(plan)
            self._record_cost(plan, workflow_id)
            self._record_learning(ctx, plan, workflow_id, started)
            if self.anchors is not None:
                self.anchors.write(plan.anchor)
            if plan.trust is None:  # the planning side refused: nothing was verified
                reason = plan.refusal_reason or "refused by the planner"
                if reason == "budget":
                    self.gates.refuse(plan, cause="budget_exceeded", reason=reason)
                else:
                    self.gates.refuse(plan, cause="not_retryable", reason=reason)
                result.reason = reason
                return result
            if plan.trust.passed:
                if self.retrieval is not None:
                    self.retrieval.on_validated(ctx, plan)
                result.status = "passed"
                return result
            if index == self.max_retries:
                reason = f"no patch passed the gates in {index + 1} attempts"
                self.gates.refuse(plan, cause="retry_limit", reason=reason)
                result.reason = reason
                return result
            summary = self._summary(plan)
            result.summaries.append(summary)
            pointer = self.blobs.put(canonical_bytes(summary.model_dump(mode="json"))).digest
            self.gates.request_retry(plan, plan.trust, pointer)
        raise AssertionError(
            "unreachable: the loop returns on its last attempt"
        )  # pragma: no cover

    def _record_cost(self, plan: PlanOutcome, workflow_id: str) -> None:
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
        )
        self.ledger.record(f"costs/{workflow_id}", [cost], workflow_id=workflow_id)

    def _record_learning(
        self, ctx: ApplyContext, plan: PlanOutcome, workflow_id: str, started: datetime
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
        )
