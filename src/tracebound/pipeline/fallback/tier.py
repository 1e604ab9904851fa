"""``FallbackTier``: one planning attempt, recipe → retrieval → LLM, closed by its anchor.

``run`` is the planning side of the retry loop ("Phase 4"). One call is one attempt: it
mints an ``attempt_id``, plans, lets the verifying side judge the plan (the ``verify``
hook), and closes the attempt with exactly one ``AttemptAnchorRecorded``, the last event of
the attempt on every path, refusals included (ADR-04-0017).

Tiers, in order:

1. **Recipe** (:class:`RecipeBook`): deterministic, free. Not used directly on the retry
   path (``attempt_index >= 1`` with prior attempts): the recipe's patch either already
   failed or was chosen without knowing why the last attempt failed, so re-applying it
   would be blind. Its candidates are shown to the model instead.
2. **Retrieval** (:class:`SolvedExampleStore`): a verified patch for a similar advisory;
   if it applies as-is the plan is ``RagOnlyApplicable``; otherwise the examples are
   evidence for the model. Bypassed on the retry path (ADR-0011: the retry is driven by the
   failure summary, and the evidence head is then ``None``).
3. **LLM leaf**: prompt built with every untrusted text fenced, budget prechecked,
   precharged and reconciled, the answer canary-checked and its diff checked for secrets
   as the model wrote them (redaction could hide either), then dry-run.

Events per path (each path keeps ``PHASE4_ATTEMPT_TYPES`` order; a step that did not run
emits nothing; docs/retry.md has the table, and the tests pin each sequence):

* recipe: ProvenanceClassified, BudgetPrechecked, RagMiss(bypassed), TransformBuilt,
  PlanOutcomeEmitted, AttemptAnchorRecorded
* retrieval: ProvenanceClassified, BudgetPrechecked, RagHit, TransformBuilt,
  PlanOutcomeEmitted, AttemptAnchorRecorded
* LLM: ProvenanceClassified, BudgetPrechecked, Rag*, PromptBuilt, BudgetPrecharged,
  LeafInvoked, LeafReturned, BudgetReconciled, TransformBuilt, PlanOutcomeEmitted,
  AttemptAnchorRecorded (a refusal after the call has no TransformBuilt; a failed call has
  no LeafReturned; a precheck refusal stops after Rag*).

If the tier's own machinery fails once the attempt has its first event (the redactor, the
patch parser or dry run, pricing an answer; anything but the model call and the gates,
which have their own paths), the attempt is closed the same way: the events written so far,
``PlanOutcomeEmitted`` refusing with ``tier_error``, the anchor. Only then does the error
surface: a tracebound error as itself, an interrupt as itself, anything else as
:class:`PlanningFailed` with the original as its ``__cause__``. A budget reservation is
settled on every path. A failure before the first event records nothing; a failed ledger
write stops the attempt where it is (writing on would not be trusted).

After the anchor, ``<workdir>/<workflow_id>/chain_head.bin`` receives the stream's last
``hash`` (32 bytes, atomic, fsync'd, 0600): the head the RetryLedger continues (ADR-0005).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from os import PathLike
from pathlib import Path
from typing import Final, Literal
from uuid import UUID

from blake3 import blake3

from tracebound.errors import (
    AttemptRefusedError,
    AuditChainCorrupted,
    BudgetExceeded,
    ConfigError,
    LedgerAttemptOutOfOrder,
    StorageError,
    TraceboundError,
    ValidationFailed,
)
from tracebound.events.anchor import AttemptAnchor, PlanOutcomeTag, PlanProposalKind
from tracebound.events.catalog import (
    AttemptAnchorRecorded,
    BudgetPrecharged,
    BudgetPrechecked,
    BudgetReconciled,
    FallbackTierName,
    LeafInvoked,
    LeafReturned,
    PlanOutcomeEmitted,
    PromptBuilt,
    ProvenanceClassified,
    RagDegraded,
    RagHit,
    RagMiss,
    TransformBuilt,
)
from tracebound.ids import (
    AdvisoryId,
    AttemptId,
    ChainHead,
    PatchDigest,
    PromptDigest,
    RagRecordId,
    ResponseDigest,
    WorkflowId,
)
from tracebound.ledger import Ledger
from tracebound.pipeline.fallback.budget import Budget, PricingTable
from tracebound.pipeline.fallback.eventlog import AttemptEventLog
from tracebound.pipeline.fallback.fence import FenceWrapper, SanitizedText, merge_reports
from tracebound.pipeline.fallback.leaf import LeafCallFailed, LeafResponse, LLMLeaf
from tracebound.pipeline.fallback.models import (
    WORKFLOW_ID_PATTERN,
    AnchorHook,
    ApplyContext,
    PlanOutcome,
    RefusalReason,
)
from tracebound.pipeline.fallback.patch import (
    PatchRejected,
    apply_patch,
    extract_patch,
    parse_patch,
)
from tracebound.pipeline.fallback.prompt import build_prompt
from tracebound.pipeline.fallback.recipes import RecipeBook, RecipeProposal
from tracebound.pipeline.fallback.retrieval import SolvedExample, SolvedExampleStore
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.retry.models import AttemptSummary, TrustOutcome
from tracebound.store.files import make_private_dir, write_file_atomic

__all__ = ["CHAIN_HEAD_FILENAME", "EMPTY_DIGEST", "FallbackTier", "PlanningFailed"]

CHAIN_HEAD_FILENAME: Final = "chain_head.bin"
EMPTY_DIGEST: Final = blake3(b"").hexdigest()
"""The digest recorded for a prompt or response that does not exist (no model call):
BLAKE3 of zero bytes, "nothing was sent", rather than a made-up value."""
_WORKFLOW_ID = re.compile(WORKFLOW_ID_PATTERN)
_MARKER = re.compile(r"\[neutralised:([a-z-]+)\]")
_UNMARKED_RULES = frozenset(
    {"invisible-char", "combining-mark", "homoglyph", "datamark-char", "decoded"}
)


class PlanningFailed(AttemptRefusedError):
    """The planning tier's own machinery failed during an attempt (not the model, not a gate).

    Raised by :meth:`FallbackTier.run` for an error that is not a tracebound error (a bug in
    a redactor, a recipe, a parser...); the original is the ``__cause__``. Only its type
    name is in the message, because a message may quote a prompt or a credential. When
    ``anchored`` is true the attempt was closed first, refused with ``tier_error``; when it
    is false the failure came before the attempt's first event and nothing was recorded.
    """

    def __init__(self, attempt_id: UUID, workflow_id: str, cause: str, anchored: bool) -> None:
        self.attempt_id = attempt_id
        self.workflow_id = workflow_id
        self.cause = cause
        self.anchored = anchored
        outcome = (
            "the attempt is closed by its anchor as refused (tier_error)"
            if anchored
            else "it failed before the attempt's first event, and nothing was recorded for it"
        )
        super().__init__(
            f"attempt {attempt_id} of workflow {workflow_id!r}: the planning tier failed with "
            f"{cause}; {outcome}"
        )

    def __reduce__(self) -> tuple[type[PlanningFailed], tuple[UUID, str, str, bool]]:
        return (type(self), (self.attempt_id, self.workflow_id, self.cause, self.anchored))


@dataclass
class _Frame:
    """What one attempt accumulates for its anchor while it runs."""

    attempt_id: AttemptId
    attempt_index: int
    workflow_id: str
    retry: bool
    canary: str | None = None
    prior_attempt_count: int = 0
    closed_at: datetime | None = None
    prompt: str | None = None
    prompt_digest: str = EMPTY_DIGEST
    response_digest: str = EMPTY_DIGEST
    model: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost: Decimal = Decimal(0)
    evidence_head: ChainHead | None = None
    record_ids: tuple[RagRecordId, ...] = ()
    reports: list[SanitizedText] = field(default_factory=list)
    extras: dict[str, str] = field(default_factory=dict)
    failure: BaseException | None = None  # raised once the anchor is recorded
    draft: _Draft | None = None  # what PlanOutcomeEmitted says; set just before it is written
    settled: tuple[Decimal, Decimal] | None = None  # (precharged, remaining), not yet recorded


@dataclass(frozen=True, slots=True)
class _Draft:
    """The plan before the anchor: what ``PlanOutcomeEmitted`` said."""

    tag: PlanOutcomeTag
    kind: PlanProposalKind
    patch: str | None = None
    refusal_reason: RefusalReason | None = None


@dataclass(frozen=True, slots=True)
class _Rag:
    """What the retrieval step found, decided before any event is written."""

    status: Literal["bypassed", "miss", "hit", "degraded"]
    examples: tuple[SolvedExample, ...] = ()
    head: ChainHead | None = None
    reason: str = ""
    applicable: SolvedExample | None = None


class FallbackTier:
    """The planning side: recipe, then retrieval, then the LLM leaf, one attempt per ``run``.

    Args:
        ledger: where attempt events go (stream ``attempts/<workflow_id>``); its clock and
            id source are the attempt's (ids for ``attempt_id`` and, via the fence, canaries).
        recipes: the deterministic first tier.
        retrieval: the solved-example store, or ``None`` to go without retrieval.
        leaf: the model, or ``None`` (then only recipes and retrieval can plan).
        budget: the spending limit model calls are checked against and charged to.
        pricing: per-model token prices; an unpriced model is never called.
        fence: sanitises, delimits and datamarks untrusted text; draws the canary.
        redactor: applied to the prompt before it is sent and to the answer and the patch
            before anything uses them.
        workdir: ``.tracebound/remediation/``; each workflow's ``chain_head.bin`` goes in
            ``<workdir>/<workflow_id>/``.

    Raises:
        ValidationFailed: an argument is not of the kind named above (``field`` says which),
            so that a misconfigured tier fails here, not inside an attempt.
    """

    def __init__(
        self,
        *,
        ledger: Ledger,
        recipes: RecipeBook,
        retrieval: SolvedExampleStore | None,
        leaf: LLMLeaf | None,
        budget: Budget,
        pricing: PricingTable,
        fence: FenceWrapper,
        redactor: Redactor,
        workdir: Path,
    ) -> None:
        for name, value, kind, what in (
            ("ledger", ledger, Ledger, "a Ledger"),
            ("recipes", recipes, RecipeBook, "a RecipeBook"),
            ("budget", budget, Budget, "a Budget"),
            ("pricing", pricing, PricingTable, "a PricingTable"),
            ("fence", fence, FenceWrapper, "a FenceWrapper"),
            ("redactor", redactor, Redactor, "a Redactor"),
            ("workdir", workdir, str | PathLike, "a path"),
        ):
            if not isinstance(value, kind):
                raise ValidationFailed(name, f"expected {what}, got {type(value).__name__}")
        if retrieval is not None and not isinstance(retrieval, SolvedExampleStore):
            raise ValidationFailed("retrieval", "expected a SolvedExampleStore or None")
        if leaf is not None and not isinstance(leaf, LLMLeaf):
            raise ValidationFailed("leaf", "expected an LLMLeaf (model, complete) or None")
        self._ledger = ledger
        self._recipes = recipes
        self._retrieval = retrieval
        self._leaf = leaf
        self._budget = budget
        self._pricing = pricing
        self._fence = fence
        self._redactor = redactor
        self.workdir = Path(workdir)

    # -- the attempt -----------------------------------------------------------------------

    def run(
        self,
        ctx: ApplyContext,
        *,
        workflow_id: str,
        attempt_index: int = 0,
        prior_attempts: list[AttemptSummary] = [],  # noqa: B006 - ADR-0002 fixes this signature; never mutated (tests/unit/fallback/test_fallback_tier.py)
        verify: AnchorHook | None = None,
    ) -> PlanOutcome:
        """Run one attempt and return its plan, with the anchor as recorded.

        Refusals (budget, no plan, a bad answer) are returned as ``tag="Refused"`` with a
        ``refusal_reason``; they are not exceptions. If ``verify`` raises (or returns
        something other than a ``TrustOutcome``), the attempt is still closed by its anchor
        (without trust fields) and the error is re-raised. So is an interrupt (Ctrl-C,
        ``SystemExit``) during the model call or the gates, after the anchor.

        Raises:
            ValidationFailed: the workflow id is not one safe path segment, the attempt
                index is not an int of at least 0, ``ctx.repo_path`` is not a directory,
                prior attempts are given on attempt 0 or given twice (in ``ctx`` and here)
                with different contents, or ``verify`` returned something other than a
                ``TrustOutcome``. Nothing is recorded for these, except the last.
            LedgerAttemptOutOfOrder: the workflow already has an attempt with this index
                (nothing is recorded); or, like ConcurrencyConflict and StorageError, the
                ledger refused a write: the attempt is then incomplete and is not retried.
            PlanningFailed: the tier's own machinery failed (see the module docstring).
        """
        if not _WORKFLOW_ID.fullmatch(workflow_id):
            raise ValidationFailed("workflow_id", f"must match {WORKFLOW_ID_PATTERN}")
        if type(attempt_index) is not int or attempt_index < 0:  # bool is not an index
            raise ValidationFailed("attempt_index", f"must be an int >= 0, not {attempt_index!r}")
        if not ctx.repo_path.is_dir():
            # Checked here: without it every tier finds nothing and the model is paid to
            # write a patch for a repository it was never shown.
            raise ValidationFailed("repo_path", f"{ctx.repo_path} is not a directory")
        priors = _effective_priors(ctx, prior_attempts)
        if priors and attempt_index == 0:
            raise ValidationFailed("prior_attempts", "attempt 0 has no prior attempts")
        log = AttemptEventLog(self._ledger, workflow_id=workflow_id)
        if attempt_index in log.attempt_indexes:
            # (workflow_id, attempt_index) is the anchor's cross-stream join key.
            raise LedgerAttemptOutOfOrder(
                f"workflow {workflow_id!r} already has an attempt index {attempt_index}; "
                "each index is used once (the anchor's join key is workflow and index)"
            )
        frame = _Frame(
            attempt_id=AttemptId(self._ledger.ids.new_id()),
            attempt_index=attempt_index,
            workflow_id=workflow_id,
            retry=bool(priors),
        )
        try:
            draft = self._plan(ctx, frame, log, priors)
        except BaseException as exc:  # noqa: BLE001 - the attempt is closed by its anchor, then the error surfaces (_close)
            draft = self._abandon(frame, log, exc)
        return self._close(ctx, frame, log, draft, verify)

    def _abandon(self, frame: _Frame, log: AttemptEventLog, exc: BaseException) -> _Draft:
        """The tier's own step failed mid-attempt: refuse with ``tier_error`` so that
        :meth:`_close` can record the anchor, and keep the error to raise after it.

        Raises:
            The error at once, when there is nothing to close (no event was written yet) or
            the ledger itself failed (whether the last event was written is unknown, so
            nothing more is written).
        """
        opened = log.is_open(frame.attempt_id)
        failure = _surfaced(exc, frame, anchored=opened and not log.failed)
        if not opened or log.failed:
            if failure is exc:
                raise exc
            raise failure from exc
        if frame.failure is None or isinstance(frame.failure, Exception):
            frame.failure = failure  # an interrupt already pending (Ctrl-C) stays the one raised
        frame.extras["phase4.tier_error"] = type(exc).__name__
        if not log.accepts(frame.attempt_id, PlanOutcomeEmitted):
            # The outcome was written just before the failure (an interrupt can land between
            # two statements): the anchor must say what it said.
            assert frame.draft is not None
            return frame.draft
        if frame.settled is not None and log.accepts(frame.attempt_id, BudgetReconciled):
            precharged, remaining = frame.settled
            log.emit(self._reconciled(frame, precharged, remaining))
        return self._refused(frame, log, "tier_error")

    def _plan(
        self,
        ctx: ApplyContext,
        frame: _Frame,
        log: AttemptEventLog,
        priors: tuple[AttemptSummary, ...],
    ) -> _Draft:
        """Everything up to and including ``PlanOutcomeEmitted``; never the anchor."""
        tried = log.tried_patch_digests
        recipe = None if frame.retry else self._recipes.propose(ctx)
        rag = self._retrieve(ctx, tried) if recipe is None and not frame.retry else _Rag("bypassed")
        provenance: FallbackTierName = (
            "recipe" if recipe else "retrieval" if rag.applicable else "llm"
        )
        estimate = Decimal(0)
        refusal: RefusalReason | None = None
        if provenance == "llm" and self._leaf is not None:
            frame.model = self._leaf.model
            if not isinstance(frame.model, str) or not frame.model:
                # It is priced, sent, recorded and kept in the anchor's (string) extras: a
                # leaf without a usable name is refused before the attempt's first event.
                raise ValidationFailed("leaf.model", f"must be a non-empty str: {frame.model!r}")
            frame.canary = self._fence.new_canary()
            built = build_prompt(
                ctx,
                fence=self._fence,
                canary=frame.canary,
                examples=rag.examples,
                prior_attempts=priors,
                recipe_candidates=self._recipes.candidates(ctx) if frame.retry else (),
                tried_patch_digests=tried,
            )
            frame.reports.extend(built.reports)
            frame.prior_attempt_count = built.prior_attempt_count
            frame.prompt = self._redactor.redact_text(built.text).value
            frame.extras["phase4.model"] = frame.model
            try:
                estimate = self._pricing.estimate(
                    frame.model, frame.prompt, max_tokens=self._budget.max_output_tokens
                )
            except ConfigError:
                refusal = "unpriced_model"
        allowed = refusal is None and self._budget.precheck(estimate)
        log.emit(
            ProvenanceClassified(
                attempt_id=frame.attempt_id,
                attempt_index=frame.attempt_index,
                advisory_id=AdvisoryId(ctx.advisory.id),
                provenance=provenance,
            )
        )
        log.emit(
            BudgetPrechecked(
                attempt_id=frame.attempt_id,
                attempt_index=frame.attempt_index,
                estimated_usd=estimate,
                available_usd=self._budget.available_usd,
                allowed=allowed,
            )
        )
        self._emit_rag(frame, log, rag)
        if recipe is not None:
            frame.extras["phase4.recipe"] = recipe.recipe
            return self._applied(frame, log, "AppliedFromRecipe", "apply_recipe", recipe)
        if rag.applicable is not None:
            frame.extras["phase4.applied_record_id"] = rag.applicable.record_id
            return self._applied(
                frame, log, "RagOnlyApplicable", "apply_transform", rag.applicable.patch
            )
        if self._leaf is None or frame.prompt is None or frame.model is None:
            return self._refused(frame, log, "no_plan")
        if not allowed:
            return self._refused(frame, log, refusal or "budget")
        return self._call_leaf(ctx, frame, log, self._leaf, estimate=estimate, tried=tried)

    def _call_leaf(
        self,
        ctx: ApplyContext,
        frame: _Frame,
        log: AttemptEventLog,
        leaf: LLMLeaf,
        *,
        estimate: Decimal,
        tried: tuple[str, ...],
    ) -> _Draft:
        """PromptBuilt through BudgetReconciled, then the answer is judged."""
        assert frame.prompt is not None
        assert frame.model is not None
        prompt_bytes = frame.prompt.encode("utf-8")
        frame.prompt_digest = blake3(prompt_bytes).hexdigest()
        digest = PromptDigest(frame.prompt_digest)
        log.emit(
            PromptBuilt(
                attempt_id=frame.attempt_id,
                attempt_index=frame.attempt_index,
                prompt_digest_blake3=digest,
                prompt_bytes=len(prompt_bytes),
                prior_attempt_count=frame.prior_attempt_count,
            )
        )
        try:
            reservation = self._budget.precharge(estimate)
        except BudgetExceeded:
            return self._refused(frame, log, "budget")
        try:
            response = self._invoke(frame, log, leaf, estimate=estimate, digest=digest)
        except BaseException:
            # A step of the tier's own failed while money was reserved (a write, pricing the
            # answer, an interrupt outside the call): settle now, at the cost known so far,
            # so that the reservation is never left held; the attempt is closed by run().
            frame.settled = (estimate, self._budget.reconcile(reservation, frame.cost))
            raise
        remaining = self._budget.reconcile(reservation, frame.cost)
        log.emit(self._reconciled(frame, estimate, remaining))
        if response is None:
            return self._refused(frame, log, "leaf_error")
        if remaining < 0:
            return self._refused(frame, log, "budget")
        patch, refusal = self._judge(ctx, frame, response.text, tried=tried)
        if patch is None:
            return self._refused(frame, log, refusal or "no_patch_in_response")
        return self._applied(frame, log, "AppliedFromLlm", "apply_transform", patch)

    def _invoke(
        self,
        frame: _Frame,
        log: AttemptEventLog,
        leaf: LLMLeaf,
        *,
        estimate: Decimal,
        digest: PromptDigest,
    ) -> LeafResponse | None:
        """BudgetPrecharged, LeafInvoked, the call, LeafReturned; ``None`` if the call failed.

        ``frame.cost`` is what the call is charged: 0 when it failed (as documented), the
        reservation while the answer is not priced yet (so a failure in pricing it charges
        what was reserved rather than nothing), then the real cost.
        """
        assert frame.prompt is not None
        assert frame.model is not None
        log.emit(
            BudgetPrecharged(
                attempt_id=frame.attempt_id,
                attempt_index=frame.attempt_index,
                precharged_usd=estimate,
                model=frame.model,
            )
        )
        log.emit(
            LeafInvoked(
                attempt_id=frame.attempt_id,
                attempt_index=frame.attempt_index,
                model=frame.model,
                prompt_digest_blake3=digest,
            )
        )
        try:
            response = _complete(leaf, frame.prompt, frame.model, self._budget.max_output_tokens)
        except BaseException as exc:  # noqa: BLE001 - any leaf failure is a refusal, not a crash
            # Adapters translate their SDK's errors into LeafCallFailed; a leaf that does
            # not (a custom one, a bug) must still not leave the attempt without its anchor
            # and its budget reservation unreconciled. Only the type is kept: a message may
            # quote the prompt or a credential. An interrupt (Ctrl-C, SystemExit) closes the
            # attempt the same way and is re-raised once the anchor is recorded.
            frame.extras["phase4.leaf_error"] = type(exc).__name__
            if not isinstance(exc, Exception):
                frame.failure = exc
            return None
        frame.response_digest = response.raw_digest_blake3
        usage = response.usage
        frame.tokens_in, frame.tokens_out = usage.input_tokens, usage.output_tokens
        frame.cost = estimate
        log.emit(
            LeafReturned(
                attempt_id=frame.attempt_id,
                attempt_index=frame.attempt_index,
                model=response.model,
                response_digest_blake3=ResponseDigest(frame.response_digest),
                tokens_in=usage.input_tokens,
                tokens_out=usage.output_tokens,
                cached_input_tokens=usage.cached_input_tokens,
                reasoning_tokens=usage.reasoning_tokens,
            )
        )
        if usage.cache_write_input_tokens:
            # LeafReturned has no field for cache writes: they are plain input there,
            # and their counts are kept here so the price difference stays auditable.
            frame.extras["phase4.cache_write_input_tokens"] = str(usage.cache_write_input_tokens)
        if usage.cache_write_long_input_tokens:
            frame.extras["phase4.cache_write_long_input_tokens"] = str(
                usage.cache_write_long_input_tokens
            )
        frame.cost = self._pricing.cost(frame.model, usage)
        return response

    @staticmethod
    def _reconciled(frame: _Frame, precharged: Decimal, remaining: Decimal) -> BudgetReconciled:
        return BudgetReconciled(
            attempt_id=frame.attempt_id,
            attempt_index=frame.attempt_index,
            precharged_usd=precharged,
            actual_usd=frame.cost,
            remaining_usd=remaining,
            tokens_in=frame.tokens_in,
            tokens_out=frame.tokens_out,
        )

    def _judge(
        self, ctx: ApplyContext, frame: _Frame, text: str, *, tried: tuple[str, ...]
    ) -> tuple[str | None, RefusalReason | None]:
        """The answer's patch, or why there is none.

        Judged on the answer as the model wrote it: redacting first would hide a canary
        written as a credential (``token: <canary>``) and turn a secret in the patch into a
        marker that then applies. A patch the redactor would change is refused instead, so a
        secret the model echoed never reaches a patch, a log or the retry loop.
        """
        assert frame.canary is not None
        if self._fence.leaked(text, frame.canary):
            return None, "canary_leaked"
        patch = extract_patch(text)
        if patch is None:
            return None, "no_patch_in_response"
        if self._redactor.redact_text(patch).redacted:
            return None, "patch_contains_secret"
        try:
            apply_patch(ctx.repo_path, patch)
        except PatchRejected as exc:
            # The applier quotes the line the file really holds, and the repository may
            # keep a secret on it: redacted before the cut, or a cut token would pass.
            frame.extras["phase4.patch_error"] = _one_line(
                self._redactor.redact_text(str(exc)).value
            )
            return None, "patch_does_not_apply"
        if blake3(patch.encode()).hexdigest() in tried:
            return None, "repeats_failed_patch"
        return patch, None

    # -- steps ---------------------------------------------------------------------------

    def _retrieve(self, ctx: ApplyContext, tried: tuple[str, ...]) -> _Rag:
        """Search the store; the head is captured here, at retrieval time (ADR-04-0017)."""
        if self._retrieval is None:
            return _Rag("bypassed")
        try:
            found = self._retrieval.search(ctx)
        except (StorageError, AuditChainCorrupted) as exc:
            return _Rag("degraded", reason=_one_line(f"{type(exc).__name__}: {exc}"))
        if not found.examples:
            return _Rag("miss", head=found.chain_head)
        applicable = None
        for example in found.examples:
            if example.patch_blake3 in tried:
                continue
            try:
                apply_patch(ctx.repo_path, example.patch)
            except PatchRejected:
                continue
            applicable = example
            break
        return _Rag("hit", examples=found.examples, head=found.chain_head, applicable=applicable)

    def _emit_rag(self, frame: _Frame, log: AttemptEventLog, rag: _Rag) -> None:
        if rag.status == "hit":
            frame.evidence_head, frame.record_ids = (
                rag.head,
                tuple(e.record_id for e in rag.examples),
            )
            assert rag.head is not None
            log.emit(
                RagHit(
                    attempt_id=frame.attempt_id,
                    attempt_index=frame.attempt_index,
                    record_ids=frame.record_ids,
                    evidence_chain_head=rag.head,
                )
            )
        elif rag.status == "degraded":
            log.emit(
                RagDegraded(
                    attempt_id=frame.attempt_id,
                    attempt_index=frame.attempt_index,
                    reason=rag.reason or "retrieval failed",
                )
            )
        elif rag.status == "miss":
            frame.evidence_head = rag.head
            log.emit(
                RagMiss(
                    attempt_id=frame.attempt_id,
                    attempt_index=frame.attempt_index,
                    evidence_chain_head=rag.head,
                )
            )
        else:
            log.emit(
                RagMiss(
                    attempt_id=frame.attempt_id,
                    attempt_index=frame.attempt_index,
                    evidence_chain_head=None,
                    bypassed=True,
                )
            )

    def _applied(
        self,
        frame: _Frame,
        log: AttemptEventLog,
        tag: PlanOutcomeTag,
        kind: PlanProposalKind,
        source: RecipeProposal | str,
    ) -> _Draft:
        patch = source.patch if isinstance(source, RecipeProposal) else source
        redacted = self._redactor.redact_text(patch)
        if redacted.redacted:
            return self._refused(frame, log, "patch_contains_secret")
        digest = blake3(patch.encode()).hexdigest()
        files = len(parse_patch(patch))
        frame.draft = draft = _Draft(tag=tag, kind=kind, patch=patch)
        log.emit(
            TransformBuilt(
                attempt_id=frame.attempt_id,
                attempt_index=frame.attempt_index,
                patch_digest_blake3=PatchDigest(digest),
                files_changed=files,
            )
        )
        log.emit(
            PlanOutcomeEmitted(
                attempt_id=frame.attempt_id,
                attempt_index=frame.attempt_index,
                plan_proposal_kind=kind,
                outcome=tag,
            )
        )
        return draft

    def _refused(self, frame: _Frame, log: AttemptEventLog, reason: RefusalReason) -> _Draft:
        frame.draft = _Draft(tag="Refused", kind="refuse", refusal_reason=reason)
        log.emit(
            PlanOutcomeEmitted(
                attempt_id=frame.attempt_id,
                attempt_index=frame.attempt_index,
                plan_proposal_kind="refuse",
                outcome="Refused",
                refusal_reason=reason,
            )
        )
        return frame.draft

    # -- closing: the anchor is the last event ------------------------------------------------

    def _close(
        self,
        ctx: ApplyContext,
        frame: _Frame,
        log: AttemptEventLog,
        draft: _Draft,
        verify: AnchorHook | None,
    ) -> PlanOutcome:
        """Judge the plan, then record the anchor: the attempt's last event, on every path.

        Nothing emits after ``log.record_anchor``; ``tests/fence`` checks this by walking the
        AST, and :class:`AttemptEventLog` refuses it at run time.
        """
        self._record_fence_counts(frame)
        frame.closed_at = self._ledger.clock.now()
        anchor = self._anchor(ctx, frame, draft)
        plan = self._outcome(frame, draft, anchor, None)
        trust: TrustOutcome | None = None
        failure: BaseException | None = frame.failure
        if verify is not None and draft.tag != "Refused" and failure is None:
            try:
                verdict = _verdict(verify, plan)
                anchor = anchor.attach_trust_outcome(verdict)
                trust = verdict
            except BaseException as exc:  # noqa: BLE001 - the anchor closes the attempt whatever the gate did (Ctrl-C included); re-raised below
                failure = exc
                frame.extras["phase4.verify_error"] = type(exc).__name__
                anchor = self._anchor(ctx, frame, draft)
        recorded = log.record_anchor(AttemptAnchorRecorded(anchor=anchor))
        self._write_chain_head(frame.workflow_id, recorded.hash)
        if failure is not None:
            raise failure
        return self._outcome(frame, draft, anchor, trust)

    @staticmethod
    def _record_fence_counts(frame: _Frame) -> None:
        """Put what the fence neutralised into the anchor's extras (``phase4.fence_*``).

        ``PromptBuilt`` has no field for it, and the catalog is not this module's to change;
        extras is ADR-04-0017's slot for exactly this. Counted from the prompt's markers (so
        neutralisations made earlier, by ``build_attempt_summary``, count too) plus the
        rules that leave no marker (invisible characters, homoglyphs).
        """
        if frame.prompt is None:
            return
        counts: dict[str, int] = {}
        for rule in _MARKER.findall(frame.prompt):
            counts[rule] = counts.get(rule, 0) + 1
        for n in merge_reports(frame.reports):
            if n.rule in _UNMARKED_RULES:
                counts[n.rule] = counts.get(n.rule, 0) + n.count
        if counts:
            frame.extras["phase4.fence_neutralised"] = str(sum(counts.values()))
            frame.extras["phase4.fence_rules"] = ",".join(
                f"{rule}:{count}" for rule, count in sorted(counts.items())
            )

    def _anchor(self, ctx: ApplyContext, frame: _Frame, draft: _Draft) -> AttemptAnchor:
        return AttemptAnchor(
            attempt_id=frame.attempt_id,
            workflow_id=WorkflowId(frame.workflow_id),
            attempt_index=frame.attempt_index,
            advisory_id=AdvisoryId(ctx.advisory.id),
            prompt_digest_blake3=PromptDigest(frame.prompt_digest),
            retrieved_evidence_chain_head=frame.evidence_head,
            retrieved_record_ids=frame.record_ids,
            plan_proposal_kind=draft.kind,
            response_digest_blake3=ResponseDigest(frame.response_digest),
            validator_outcome=draft.tag,
            refusal_reason=draft.refusal_reason,
            tokens_in=frame.tokens_in,
            tokens_out=frame.tokens_out,
            cost_usd=frame.cost,
            timestamp_utc=frame.closed_at or self._ledger.clock.now(),
            extras=frame.extras,
        )

    def _outcome(
        self, frame: _Frame, draft: _Draft, anchor: AttemptAnchor, trust: TrustOutcome | None
    ) -> PlanOutcome:
        return PlanOutcome(
            tag=draft.tag,
            attempt_id=frame.attempt_id,
            attempt_index=frame.attempt_index,
            workflow_id=frame.workflow_id,
            patch=draft.patch,
            patch_blake3=None if draft.patch is None else blake3(draft.patch.encode()).hexdigest(),
            refusal_reason=draft.refusal_reason,
            prompt=frame.prompt if frame.prompt_digest != EMPTY_DIGEST else None,
            anchor=anchor,
            trust=trust,
        )

    def chain_head_path(self, workflow_id: str) -> Path:
        """Where the planning side's last chain head for ``workflow_id`` is written."""
        if not _WORKFLOW_ID.fullmatch(workflow_id):
            raise ValidationFailed("workflow_id", f"must match {WORKFLOW_ID_PATTERN}")
        return self.workdir / workflow_id / CHAIN_HEAD_FILENAME

    def _write_chain_head(self, workflow_id: str, head: bytes) -> None:
        """Atomically replace ``chain_head.bin``: temp file (0600), fsync, rename, fsync dir.

        A reader therefore sees the old head or the new one, never a torn file.
        """
        target = self.chain_head_path(workflow_id)
        try:
            make_private_dir(target.parent)
            write_file_atomic(target, head, mode=0o600, overwrite=True)
        except OSError as exc:
            raise StorageError(f"cannot write {target}: {exc}") from exc


def _complete(leaf: LLMLeaf, prompt: str, model: str, max_tokens: int) -> LeafResponse:
    """The leaf's answer, if it is a ``LeafResponse`` (its fields are what the tier records).

    Raises:
        LeafCallFailed: the leaf returned something else (a custom leaf's bug).
    """
    response = leaf.complete(prompt, model=model, max_tokens=max_tokens)
    if not isinstance(response, LeafResponse):
        raise LeafCallFailed(f"the leaf returned {type(response).__name__}, not a LeafResponse")
    return response


def _verdict(verify: AnchorHook, plan: PlanOutcome) -> TrustOutcome:
    """What the hook returned, if it is a ``TrustOutcome`` (the anchor records nothing else).

    Raises:
        ValidationFailed: the hook returned something else.
    """
    verdict = verify(plan)
    if not isinstance(verdict, TrustOutcome):
        raise ValidationFailed(
            "verify", f"the hook returned {type(verdict).__name__}, not a TrustOutcome"
        )
    return verdict


def _effective_priors(
    ctx: ApplyContext, prior_attempts: list[AttemptSummary]
) -> tuple[AttemptSummary, ...]:
    """The kwarg or ``ctx.prior_attempts``; both may be given only if they agree.

    Copied into a tuple: the caller's list (and the default) are never mutated.
    """
    given, in_ctx = tuple(prior_attempts), tuple(ctx.prior_attempts)
    if given and in_ctx and given != in_ctx:
        raise ValidationFailed("prior_attempts", "given in ctx and as a keyword, differently")
    return given or in_ctx


def _surfaced(exc: BaseException, frame: _Frame, *, anchored: bool) -> BaseException:
    """The error ``run`` raises for ``exc``: typed errors and interrupts as they are, anything
    else as :class:`PlanningFailed` (whose ``__cause__`` the caller sets to ``exc``)."""
    if not isinstance(exc, Exception) or isinstance(exc, TraceboundError):
        return exc
    failed = PlanningFailed(frame.attempt_id, frame.workflow_id, type(exc).__name__, anchored)
    failed.__cause__ = exc
    return failed


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200] or "unknown"
