"""The built-in event catalog: every event the design records name, registered at import.

The payloads fall into five groups:

* **Phase 4 attempt frame** (ADR-04-0017, the S6-01 sequence): what one planning attempt
  did, in order, ending with :class:`AttemptAnchorRecorded`. Each carries ``attempt_id`` and
  ``attempt_index`` so that folds group them without joining on time.
* **Phase 5 retry** (ADR-0002, ADR-0005): :class:`RetryRequested`, :class:`AttemptRefused`.
* **Workflow-spanning** (ADR-0034): plugin resolution, adapter degradation, trust gates,
  cost, merges and the Stage 7 learning events. Field names follow the record verbatim;
  the one departure is that scores and confidences are integer basis points, not floats
  (docs/adr/0003).
* **Agent Run Ledger** (TPC + ARL record): :class:`StepRecorded`, :class:`ApprovalRecorded`.
* **Blob lifecycle** (ARCHITECTURE.md, contract 5): :class:`BlobErased`.
* **Ledger system** (ADR 0017): :class:`SigningKeyRotated`, on the ledger's own key stream,
  not a workflow's. Registered, but not a member of :data:`BuiltinPayload`: that union is
  what the workflow fold matches over, and a key rotation belongs to no workflow.

Nothing here may hold a float: the registry refuses any payload whose serialised schema
admits one, because hashed bytes must not depend on float formatting.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Final, Literal, NewType, Self, TypeAlias, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from tracebound.canonical import MAX_SAFE_INTEGER
from tracebound.events.anchor import (
    BLAKE3_HEX_PATTERN,
    SHA256_DIGEST_PATTERN,
    AttemptAnchor,
    BasisPoints,
    ChainHeadHex,
    Count,
    Money,
    PlanOutcomeTag,
    PlanProposalKind,
    SignedMoney,
    UtcDateTime,
    check_refusal_reason,
)
from tracebound.events.envelope import Payload
from tracebound.events.registry import default_registry
from tracebound.ids import (
    AdapterId,
    AdvisoryId,
    AttemptId,
    GateId,
    PatchDigest,
    PluginId,
    PromptDigest,
    RagRecordId,
    ResponseDigest,
    RunId,
    SandboxRunId,
    Sha256Digest,
    StepId,
)

__all__ = [
    "BUILTIN_PAYLOAD_TYPES",
    "FINAL_RUN_STATUSES",
    "PHASE4_ATTEMPT_TYPES",
    "RUNTIME_PAYLOAD_TYPES",
    "SYSTEM_PAYLOAD_TYPES",
    "AdapterDegraded",
    "ApprovalRecorded",
    "AttemptAnchorRecorded",
    "AttemptCompleted",
    "AttemptPayload",
    "AttemptRefused",
    "BlameAssigned",
    "BlobErased",
    "BudgetPrecharged",
    "BudgetPrechecked",
    "BudgetReconciled",
    "BuiltinPayload",
    "CostEstimate",
    "CostIncurred",
    "CostSource",
    "CostTier",
    "FallbackTierName",
    "GateRequested",
    "LeafInvoked",
    "LeafReturned",
    "MergeOutcome",
    "PlanOutcomeEmitted",
    "PluginResolved",
    "PluginScope",
    "PrimitiveName",
    "PromptBuilt",
    "ProvenanceClassified",
    "RagDegraded",
    "RagHit",
    "RagMiss",
    "RatioText",
    "RepairAttempted",
    "RetryRequested",
    "Role",
    "RouteChosen",
    "RunFinished",
    "RunResumed",
    "RunStarted",
    "SignalKind",
    "SignalValue",
    "SigningKeyRotated",
    "SloAlertRaised",
    "SolutionFound",
    "StepRecorded",
    "StepStatus",
    "TransformBuilt",
    "TrustGateFailed",
    "TrustGatePassed",
    "ValidationRecorded",
    "Validations",
]

# --- vocabulary ---------------------------------------------------------------------------
# Open-ended names are NewTypes (the set grows with plugins and adapters); closed sets that a
# fold must handle exhaustively are Literals.

PrimitiveName = NewType("PrimitiveName", str)  # a code-intelligence primitive, e.g. "references"
PluginScope = NewType("PluginScope", str)  # the scope a plugin matched on, e.g. "npm/express"
SignalKind = NewType("SignalKind", str)  # a trust-gate signal, e.g. "tests_pass"
CostSource = NewType("CostSource", str)  # what spent the money, e.g. "llm", "sandbox"

SignalValue: TypeAlias = (
    StrictBool | Annotated[StrictInt, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)] | StrictStr
)
"""A trust-gate signal's reading; no floats, so a ratio is given in basis points."""

CostTier: TypeAlias = Literal["direct", "amortized", "overhead"]
Role: TypeAlias = Literal["Planner", "Executor", "Critic", "Reviewer", "Router"]
StepStatus: TypeAlias = Literal["success", "error", "skipped", "gated"]
FallbackTierName: TypeAlias = Literal["recipe", "retrieval", "llm"]

_Text: TypeAlias = Annotated[str, Field(min_length=1)]
_Blake3Prompt: TypeAlias = Annotated[PromptDigest, Field(pattern=BLAKE3_HEX_PATTERN)]
_Blake3Response: TypeAlias = Annotated[ResponseDigest, Field(pattern=BLAKE3_HEX_PATTERN)]
_Blake3Patch: TypeAlias = Annotated[PatchDigest, Field(pattern=BLAKE3_HEX_PATTERN)]
_Sha256: TypeAlias = Annotated[Sha256Digest, Field(pattern=SHA256_DIGEST_PATTERN)]
_AdvisoryId: TypeAlias = Annotated[AdvisoryId, Field(min_length=1)]
_RagRecordId: TypeAlias = Annotated[RagRecordId, Field(min_length=1)]
_GateId: TypeAlias = Annotated[GateId, Field(min_length=1)]
_PluginId: TypeAlias = Annotated[PluginId, Field(min_length=1)]
_AdapterId: TypeAlias = Annotated[AdapterId, Field(min_length=1)]
_SignalKind: TypeAlias = Annotated[SignalKind, Field(min_length=1)]
_RunId: TypeAlias = Annotated[RunId, Field(min_length=1)]
_StepId: TypeAlias = Annotated[StepId, Field(min_length=1)]


def _freeze_signals(value: Mapping[SignalKind, SignalValue]) -> Mapping[SignalKind, SignalValue]:
    # A payload is frozen all the way down: a signal cannot change between check and write.
    return MappingProxyType(dict(value))


def _thaw_signals(value: Mapping[SignalKind, SignalValue]) -> dict[SignalKind, SignalValue]:
    return dict(value)


_FrozenSignals: TypeAlias = Annotated[
    Mapping[_SignalKind, SignalValue],
    AfterValidator(_freeze_signals),
    PlainSerializer(_thaw_signals),
]


def _check_tokens(
    tokens_in: int | None,
    tokens_out: int | None,
    cached_input_tokens: int | None,
    reasoning_tokens: int | None,
) -> None:
    """Cached tokens are part of the input and reasoning tokens part of the output.

    Providers disagree (some report cache reads beside the input count); producers normalise
    to this one reading so that a cost projection never counts a token twice.
    """
    if cached_input_tokens is not None and (tokens_in is None or cached_input_tokens > tokens_in):
        raise ValueError("cached_input_tokens is a part of tokens_in and cannot exceed it")
    if reasoning_tokens is not None and (tokens_out is None or reasoning_tokens > tokens_out):
        raise ValueError("reasoning_tokens is a part of tokens_out and cannot exceed it")


def _check_cache_writes(
    tokens_in: int | None, cached: int | None, written: int | None, written_long: int | None
) -> None:
    """Cache writes are part of the input beside cache reads, long ones part of the writes."""
    if written is not None and (tokens_in is None or (cached or 0) + written > tokens_in):
        raise ValueError(
            "cache_write_input_tokens is a part of tokens_in beside cached_input_tokens"
            " and cannot exceed what is left of it"
        )
    if written_long is not None and (written is None or written_long > written):
        raise ValueError(
            "cache_write_long_input_tokens is a part of cache_write_input_tokens and cannot"
            " exceed it"
        )


class _Frozen(BaseModel):
    """Base of the nested value objects: as frozen and closed as a payload."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# --- Phase 4: the attempt frame -----------------------------------------------------------


class AttemptPayload(Payload):
    """Base of every payload that belongs to one attempt.

    ``attempt_id`` is minted per attempt; ``attempt_index`` is 0 for the first try and counts
    retries. Together with the envelope's ``workflow_id`` they are the durable cross-stream
    join key of ADR-04-0017.
    """

    attempt_id: AttemptId
    attempt_index: Count


class ProvenanceClassified(AttemptPayload):
    """The attempt was classified to the fallback tier its plan will come from."""

    kind: Literal["provenance_classified"] = "provenance_classified"
    advisory_id: _AdvisoryId
    provenance: FallbackTierName


class BudgetPrechecked(AttemptPayload):
    """The estimated cost was checked against what the budget still holds."""

    kind: Literal["budget_prechecked"] = "budget_prechecked"
    estimated_usd: Money
    available_usd: SignedMoney
    allowed: bool


class RagHit(AttemptPayload):
    """Retrieval found evidence; the head pins *which* evidence the prompt saw.

    The head is taken at retrieval time: the store moves on as results are harvested, so a
    later join could not tell what the prompt actually contained.
    """

    kind: Literal["rag_hit"] = "rag_hit"
    record_ids: Annotated[tuple[_RagRecordId, ...], Field(min_length=1)]
    evidence_chain_head: ChainHeadHex


class RagDegraded(AttemptPayload):
    """Retrieval worked only in part (stale index, timeout); the attempt goes on with less."""

    kind: Literal["rag_degraded"] = "rag_degraded"
    reason: _Text
    record_ids: tuple[_RagRecordId, ...] = ()
    evidence_chain_head: ChainHeadHex | None = None


class RagMiss(AttemptPayload):
    """Retrieval found nothing, or was bypassed on purpose (the retry path, ADR-0011)."""

    kind: Literal["rag_miss"] = "rag_miss"
    evidence_chain_head: ChainHeadHex | None
    bypassed: bool = False

    @model_validator(mode="after")
    def _bypass_has_no_head(self) -> Self:
        if self.bypassed and self.evidence_chain_head is not None:
            raise ValueError("a bypassed retrieval saw no evidence, so it has no chain head")
        return self


class PromptBuilt(AttemptPayload):
    """The prompt is final; its digest is what the leaf will be sent, byte for byte.

    The prompt itself lives in the blob store (``prompt_pointer``) so it can be redacted or
    erased without breaking the chain.
    """

    kind: Literal["prompt_built"] = "prompt_built"
    prompt_digest_blake3: _Blake3Prompt
    prompt_bytes: Count
    prior_attempt_count: Count = 0
    prompt_pointer: _Sha256 | None = None


class BudgetPrecharged(AttemptPayload):
    """The estimate was reserved before the call, so parallel attempts cannot overspend."""

    kind: Literal["budget_precharged"] = "budget_precharged"
    precharged_usd: Money
    model: _Text


class LeafInvoked(AttemptPayload):
    """The LLM leaf was called with the prompt of this digest."""

    kind: Literal["leaf_invoked"] = "leaf_invoked"
    model: _Text
    prompt_digest_blake3: _Blake3Prompt


class LeafReturned(AttemptPayload):
    """The leaf answered. Token counts are totals: cached ⊆ input, reasoning ⊆ output."""

    kind: Literal["leaf_returned"] = "leaf_returned"
    model: _Text
    response_digest_blake3: _Blake3Response
    tokens_in: Count
    tokens_out: Count
    cached_input_tokens: Count = 0
    reasoning_tokens: Count = 0

    @model_validator(mode="after")
    def _token_breakdown(self) -> Self:
        _check_tokens(
            self.tokens_in, self.tokens_out, self.cached_input_tokens, self.reasoning_tokens
        )
        return self


class BudgetReconciled(AttemptPayload):
    """The reservation was settled against the real cost; the anchor's cost comes from here.

    ``remaining_usd`` may be negative: an overrun is recorded, not hidden.
    """

    kind: Literal["budget_reconciled"] = "budget_reconciled"
    precharged_usd: Money
    actual_usd: Money
    remaining_usd: SignedMoney
    tokens_in: Count
    tokens_out: Count


class TransformBuilt(AttemptPayload):
    """The happy path's terminal step: a patch exists, identified by its digest."""

    kind: Literal["transform_built"] = "transform_built"
    patch_digest_blake3: _Blake3Patch
    files_changed: Count
    patch_pointer: _Sha256 | None = None


class PlanOutcomeEmitted(AttemptPayload):
    """Phase 4's plan validator decided; a refusal always says why."""

    kind: Literal["plan_outcome_emitted"] = "plan_outcome_emitted"
    plan_proposal_kind: PlanProposalKind
    outcome: PlanOutcomeTag
    refusal_reason: _Text | None = None

    @model_validator(mode="after")
    def _refusal_has_reason(self) -> Self:
        check_refusal_reason(self.outcome, self.refusal_reason)
        return self


class AttemptAnchorRecorded(Payload):
    """The last event of every attempt: the joined tuple of ADR-04-0017.

    The shape is the record's, ``(anchor: AttemptAnchor)``; the attempt's identity is read
    from the anchor rather than duplicated, so the two can never disagree.
    """

    kind: Literal["attempt_anchor_recorded"] = "attempt_anchor_recorded"
    anchor: AttemptAnchor

    @property
    def attempt_id(self) -> AttemptId:
        return self.anchor.attempt_id

    @property
    def attempt_index(self) -> int:
        return self.anchor.attempt_index


# --- Phase 5: retries ----------------------------------------------------------------------


class RetryRequested(AttemptPayload):
    """The gate failed this attempt and another is asked for, fed a sanitised summary.

    ``attempt_id``/``attempt_index`` name the attempt that failed. The ``AttemptSummary``
    itself (ADR-0002) is stored as a blob; only its digest is hashed here, so no sandbox
    output reaches the ledger or the next prompt by this route.
    """

    kind: Literal["retry_requested"] = "retry_requested"
    gate: _GateId
    sandbox_run_id: Annotated[SandboxRunId, Field(min_length=1)]
    failing_signals: Annotated[tuple[_SignalKind, ...], Field(min_length=1)]
    summary_pointer: _Sha256


class AttemptRefused(AttemptPayload):
    """No further attempt will be made; ``cause`` says which limit or policy stopped it."""

    kind: Literal["attempt_refused"] = "attempt_refused"
    cause: Literal["retry_limit", "budget_exceeded", "policy", "not_retryable"]
    reason: _Text


# --- workflow-spanning (ADR-0034) -----------------------------------------------------------


class PluginResolved(Payload):
    """Which plugin handled the workflow, through which ``extends`` chain (ADR-0031)."""

    kind: Literal["plugin_resolved"] = "plugin_resolved"
    plugin_id: _PluginId
    extends_chain: tuple[_PluginId, ...]
    matched_scope: Annotated[PluginScope, Field(min_length=1)]
    fallback_used: bool


class AdapterDegraded(Payload):
    """A primary adapter was not trusted enough and a fallback took over (ADR-0032).

    ``primary_confidence`` is in basis points (0..10 000), not the record's float.
    """

    kind: Literal["adapter_degraded"] = "adapter_degraded"
    primitive: Annotated[PrimitiveName, Field(min_length=1)]
    primary_adapter: _AdapterId
    primary_confidence: BasisPoints
    fallback_adapter: _AdapterId | None


class TrustGatePassed(Payload):
    """A trust gate passed; the full signal set is kept so "why?" is a query.

    ``score`` is in basis points (0..10 000).
    """

    kind: Literal["trust_gate_passed"] = "trust_gate_passed"
    gate: _GateId
    signals: _FrozenSignals
    score: BasisPoints


class TrustGateFailed(Payload):
    """A trust gate failed; ``score`` is in basis points (0..10 000)."""

    kind: Literal["trust_gate_failed"] = "trust_gate_failed"
    gate: _GateId
    failing_signals: Annotated[tuple[_SignalKind, ...], Field(min_length=1)]
    score: BasisPoints
    retry_count: Count


class CostIncurred(Payload):
    """Money was spent. The cost ledger is the fold of these (ADR-0024).

    The optional token breakdown and ``model``/``role``/``step_id`` let the ledger price cached
    and reasoning tokens apart and charge the cost to the role that caused it.
    ``cache_write_input_tokens`` (⊆ ``tokens_in``) are input tokens written to the provider's
    prompt cache, billed above plain input; ``cache_write_long_input_tokens`` (⊆ those) were
    written for the longer retention (Anthropic's 1-hour cache), billed higher again.

    Schema v2 added the two cache-write counts: a payload is canonicalised with its
    defaults, so every new record holds them, and a reader that knows only v1 must say the
    record is newer than itself, not malformed. A v1 record did not say them; it is read
    with both None, as v1 counted cache writes: plain input (docs/adr/0020).
    """

    SCHEMA_VERSION: ClassVar[int] = 2

    kind: Literal["cost_incurred"] = "cost_incurred"
    tier: CostTier
    amount_usd: Money
    source: Annotated[CostSource, Field(min_length=1)]
    tokens_in: Count | None = None
    tokens_out: Count | None = None
    cached_input_tokens: Count | None = None
    reasoning_tokens: Count | None = None
    model: _Text | None = None
    role: Role | None = None
    step_id: _StepId | None = None
    cache_write_input_tokens: Count | None = None
    cache_write_long_input_tokens: Count | None = None

    @model_validator(mode="after")
    def _token_breakdown(self) -> Self:
        _check_tokens(
            self.tokens_in, self.tokens_out, self.cached_input_tokens, self.reasoning_tokens
        )
        _check_cache_writes(
            self.tokens_in,
            self.cached_input_tokens,
            self.cache_write_input_tokens,
            self.cache_write_long_input_tokens,
        )
        return self


class MergeOutcome(Payload):
    """What happened to the pull request: the outcome ROI and plugin telemetry count."""

    kind: Literal["merge_outcome"] = "merge_outcome"
    pr_url: _Text
    decision: Literal["merged", "closed", "modified"]
    reviewer: _Text | None


class SolutionFound(AttemptPayload):
    """An attempt produced a patch worth learning from (Stage 7 knowledge-graph write-back)."""

    kind: Literal["solution_found"] = "solution_found"
    advisory_id: _AdvisoryId
    patch_digest_blake3: _Blake3Patch
    outcome: Literal["AppliedFromRecipe", "AppliedFromLlm", "RagOnlyApplicable"]


class AttemptCompleted(AttemptPayload):
    """An attempt is over, whatever its outcome (Stage 7 learns from failures too).

    ``trust_outcome_passed`` is ``None`` when Phase 4 refused before the gate ran.
    """

    kind: Literal["attempt_completed"] = "attempt_completed"
    advisory_id: _AdvisoryId
    outcome: PlanOutcomeTag
    trust_outcome_passed: bool | None
    cost_usd: Money
    duration_ms: Count


# --- Agent Run Ledger (TPC + ARL) --------------------------------------------------------


class CostEstimate(_Frozen):
    """The TPC's ``cost_est``: what the step expected to spend."""

    prompt_tokens: Count
    compute_usd_est: Money


class Validations(_Frozen):
    """Which required validations ran, are still pending, and failed."""

    ran: tuple[_Text, ...] = ()
    pending: tuple[_Text, ...] = ()
    failed: tuple[_Text, ...] = ()


class StepRecorded(Payload):
    """One Agent Run Ledger entry: a role's step, its artifact's hash and its outcome.

    ``parent_step_id`` gives blame lineage; ``error_origin`` names the step a failure is
    attributed to (``None`` counts towards ``unresolved_origin``). The artifact is referenced
    by digest and pointer, never inlined.
    """

    kind: Literal["step_recorded"] = "step_recorded"
    run_id: _RunId
    step_id: _StepId
    parent_step_id: _StepId | None
    role: Role
    timestamp_start: UtcDateTime
    timestamp_end: UtcDateTime
    duration_ms: Count
    artifact_hash: _Sha256
    payload_pointer: _Text | None = None
    status: StepStatus
    error_origin: _StepId | None = None
    cost_est: CostEstimate
    latency_ms: Count
    validations: Validations = Validations()
    storage: Literal["console", "file", "db"]
    redaction_reason: _Text | None = None
    scopes_granted: tuple[_Text, ...] = ()

    @model_validator(mode="after")
    def _ordered_times(self) -> Self:
        if self.timestamp_end < self.timestamp_start:
            raise ValueError("timestamp_end is before timestamp_start")
        return self


class ApprovalRecorded(Payload):
    """A named human decided on a gated step; the ARL must hold who and when."""

    kind: Literal["approval_recorded"] = "approval_recorded"
    run_id: _RunId
    step_id: _StepId
    approver: _Text
    decision: Literal["approved", "rejected"]
    paths: tuple[_Text, ...]
    timestamp: UtcDateTime


# --- blob lifecycle ------------------------------------------------------------------------


class BlobErased(Payload):
    """A blob was erased; the chain keeps its digest, so it still verifies without the blob."""

    kind: Literal["blob_erased"] = "blob_erased"
    digest: _Sha256
    reason: _Text


# --- ledger system -------------------------------------------------------------------------


class SigningKeyRotated(Payload):
    """The ledger's checkpoint signing key was handed over from ``old_key`` to ``new_key``.

    Both are C2SP verifier key texts (``<name>+<key id>+<base64 key>``). Written only by
    ``Ledger.rotate_key`` (``tracebound keys rotate``) on the key stream, and signed by a
    hand-over checkpoint that both keys sign (ADR 0017): checkpoints covering this event are
    signed by ``new_key``, and ``old_key`` signs none beyond it.
    """

    kind: Literal["signing_key_rotated"] = "signing_key_rotated"
    old_key: _Text
    new_key: _Text
    rotated_by: _Text
    reason: _Text | None = None


SYSTEM_PAYLOAD_TYPES: tuple[type[Payload], ...] = (SigningKeyRotated,)
"""The ledger's own events: registered, outside :data:`BuiltinPayload` (no workflow)."""


# --- pipeline runtime (TPC + ARL record: runs, gates, blame, repair, routing, SLOs) --------

RatioText: TypeAlias = Annotated[str, Field(pattern=r"^(0(\.[0-9]+)?|1(\.0+)?)$")]
"""A ratio in [0, 1] as a decimal string (hashed data holds no floats: docs/adr/0003)."""


class RunStarted(Payload):
    """A pipeline run began; ``pipeline_ref`` lets `resume` and `replay --rerun` re-import it."""

    kind: Literal["run_started"] = "run_started"
    run_id: _RunId
    pipeline: _Text
    pipeline_type: _Text
    critical: StrictBool
    pipeline_ref: _Text | None = None
    inputs_digest: _Sha256
    inputs_pointer: _Text


class RunFinished(Payload):
    """A run stopped: completed, failed (with the failing step), paused at a gate, or rejected."""

    kind: Literal["run_finished"] = "run_finished"
    run_id: _RunId
    status: Literal["completed", "failed", "gated", "rejected"]
    failed_step: _StepId | None = None
    reason: _Text | None = None


FINAL_RUN_STATUSES: Final = frozenset({"completed", "failed", "rejected"})
"""``run_finished`` statuses after which a run records nothing more (``gated`` is a pause:
a resume may follow)."""


class GateRequested(Payload):
    """A step matched the policy and waits for a named human; ``owners`` may approve it.

    ``repository_wide``: some reason names no path (an ``exec:`` action, a scope the policy
    does not allow), so the approver must be a default owner (CODEOWNERS' last catch-all
    line) as well as own every one of ``paths``. A gate that names no path at all is
    repository-wide by construction. ``owners`` are the names that passed that check
    against CODEOWNERS when the gate was recorded.

    Schema v2 added ``repository_wide``; the reason texts are not a reliable source for it
    (a user's rule writes its own). A v1 record cannot say, so it is read as repository-wide:
    fail closed (docs/adr/0012).
    """

    SCHEMA_VERSION: ClassVar[int] = 2

    kind: Literal["gate_requested"] = "gate_requested"
    run_id: _RunId
    step_id: _StepId
    role: Role
    reasons: Annotated[tuple[_Text, ...], Field(min_length=1)]
    paths: tuple[_Text, ...] = ()
    owners: tuple[_Text, ...] = ()
    repository_wide: StrictBool

    @model_validator(mode="after")
    def _no_path_is_repository_wide(self) -> Self:
        if not self.paths and not self.repository_wide:
            raise ValueError(
                "a gate that names no path is repository_wide: only default owners may lift it"
            )
        return self


def _gate_requested_v1_to_v2(v1: dict[str, Any]) -> dict[str, Any]:
    """v1 did not record whether a reason named no path: read it as if one did (ADR 0012)."""
    return {**v1, "repository_wide": True}


def _cost_incurred_v1_to_v2(v1: dict[str, Any]) -> dict[str, Any]:
    """v1 had no cache-write counts: they are unknown, not zero (docs/adr/0020)."""
    return {**v1, "cache_write_input_tokens": None, "cache_write_long_input_tokens": None}


class ValidationRecorded(Payload):
    """One required validation the Executor ran: a registered validator or a test command.

    Raw command output never enters the ledger; only the digest of its redacted copy does.
    """

    kind: Literal["validation_recorded"] = "validation_recorded"
    run_id: _RunId
    step_id: _StepId
    name: _Text
    check: Literal["validator", "command"]
    passed: StrictBool
    exit_code: StrictInt | None = None
    duration_ms: Count
    output_digest: _Sha256 | None = None
    detail: _Text | None = None


class BlameAssigned(Payload):
    """A failure was traced to the step that caused it, or could not be (origin None).

    ``detected_by`` is the Critic step that found it, or the failed step itself when the
    runtime caught the failure (an exception, a contract violation, a failed validation).
    A failure with no origin counts towards ``unresolved_origin(failed_role)``.
    """

    kind: Literal["blame_assigned"] = "blame_assigned"
    run_id: _RunId
    detected_by: _StepId
    failed_step_id: _StepId
    failed_role: Role
    origin_step_id: _StepId | None
    origin_role: Role | None
    reason: _Text
    harmful: StrictBool


class RepairAttempted(Payload):
    """A failed step was re-run to repair it; ``succeeded`` says whether the repair held."""

    kind: Literal["repair_attempted"] = "repair_attempted"
    run_id: _RunId
    origin_step_id: _StepId
    repair_step_id: _StepId
    attempt: Count
    succeeded: StrictBool


class RouteChosen(Payload):
    """A Router picked one alternative from ledger metrics, and says why."""

    kind: Literal["route_chosen"] = "route_chosen"
    run_id: _RunId
    step_id: _StepId
    chosen: _Text
    alternatives: Annotated[tuple[_Text, ...], Field(min_length=1)]
    reason: _Text


class SloAlertRaised(Payload):
    """A critical pipeline broke its SLO: harm_rate > 0 or unresolved_origin > 0."""

    kind: Literal["slo_alert_raised"] = "slo_alert_raised"
    pipeline: _Text
    pipeline_type: _Text
    metric: Literal["harm_rate", "unresolved_origin"]
    role: Role | None = None
    value: _Text
    threshold: _Text
    run_id: _RunId | None = None


class RunResumed(Payload):
    """A process took a gated run over after the human decision, before running anything.

    Recorded at the stream version the process read (optimistic concurrency), so of two
    resumes of one run exactly one records it and goes on; the other raises
    :class:`~tracebound.errors.RunAlreadyResumed` having run and written nothing.
    ``decision`` is the one acted on: ``approved`` continues the run, ``rejected`` ends it.

    ``taken_over_by`` names the human who took a claimed run over because the process that
    claimed it died (``tracebound resume RUN --take-over --as NAME``); None for a first claim.
    """

    kind: Literal["run_resumed"] = "run_resumed"
    run_id: _RunId
    step_id: _StepId
    decision: Literal["approved", "rejected"]
    taken_over_by: _Text | None = None


RUNTIME_PAYLOAD_TYPES: tuple[type[Payload], ...] = (
    RunStarted,
    RunFinished,
    GateRequested,
    ValidationRecorded,
    BlameAssigned,
    RepairAttempted,
    RouteChosen,
    SloAlertRaised,
    RunResumed,
)
"""The pipeline runtime's events (members of :data:`BuiltinPayload` too)."""


# --- the union and registration ---------------------------------------------------------------

BuiltinPayload: TypeAlias = Annotated[
    ProvenanceClassified
    | BudgetPrechecked
    | RagHit
    | RagDegraded
    | RagMiss
    | PromptBuilt
    | BudgetPrecharged
    | LeafInvoked
    | LeafReturned
    | BudgetReconciled
    | TransformBuilt
    | PlanOutcomeEmitted
    | AttemptAnchorRecorded
    | RetryRequested
    | AttemptRefused
    | PluginResolved
    | AdapterDegraded
    | TrustGatePassed
    | TrustGateFailed
    | CostIncurred
    | MergeOutcome
    | SolutionFound
    | AttemptCompleted
    | StepRecorded
    | ApprovalRecorded
    | BlobErased
    | RunStarted
    | RunFinished
    | GateRequested
    | ValidationRecorded
    | BlameAssigned
    | RepairAttempted
    | RouteChosen
    | SloAlertRaised
    | RunResumed,
    Field(discriminator="kind"),
]
"""Every built-in payload, discriminated on ``kind``; an exhaustive fold matches over it."""

BUILTIN_PAYLOAD_TYPES: tuple[type[Payload], ...] = get_args(get_args(BuiltinPayload)[0])
"""The members of :data:`BuiltinPayload`, in declaration order."""

PHASE4_ATTEMPT_TYPES: tuple[type[Payload], ...] = (
    ProvenanceClassified,
    BudgetPrechecked,
    RagHit,
    RagDegraded,
    RagMiss,
    PromptBuilt,
    BudgetPrecharged,
    LeafInvoked,
    LeafReturned,
    BudgetReconciled,
    TransformBuilt,
    PlanOutcomeEmitted,
    AttemptAnchorRecorded,
)
"""Phase 4's per-attempt events in emission order; the anchor is always last."""

for _cls in (*BUILTIN_PAYLOAD_TYPES, *SYSTEM_PAYLOAD_TYPES):
    default_registry().register(_cls)
del _cls
default_registry().register_upcaster("gate_requested", 1, _gate_requested_v1_to_v2, trusted=True)
default_registry().register_upcaster("cost_incurred", 1, _cost_incurred_v1_to_v2, trusted=True)
