"""The per-attempt audit anchor of ADR-04-0017, and the hash-safe field types it shares.

An :class:`AttemptAnchor` joins, in one frozen record, what the planner saw (prompt digest,
retrieved evidence head and record ids), what it proposed, what the validator and the trust
gate decided, and what it cost. Joining the streams later is lossy: the evidence store moves
on and the cross-stream key is not indexed. So the tuple is recorded once, at the close of
every attempt, as the payload of ``AttemptAnchorRecorded``.

The module also holds the field types every built-in payload uses, because hashed data must
have one byte form per value (ARCHITECTURE.md, contract 3):

* :data:`Money` is a :class:`~decimal.Decimal` written as a plain decimal string; floats are
  refused on input, since a binary float cannot hold a cent exactly.
* :data:`BasisPoints` is an integer 0..10 000 for scores and confidences (docs/adr/0003).
* :data:`UtcDateTime` is tz-aware, normalised to UTC and written in the one RFC 3339 form.
* :data:`ChainHeadHex` is 32 raw BLAKE3 bytes in Python and lower-case hex in JSON.
* :data:`FrozenStrMap` is a read-only ``MappingProxyType`` that serialises to a JSON object.

Schema evolution: a new *required* field means ``AttemptAnchorV2`` with
``schema_version: Literal[2]`` subclassing :class:`AttemptAnchorBase`, and
:data:`AnyAttemptAnchor` becoming
``Annotated[AttemptAnchor | AttemptAnchorV2, Field(discriminator="schema_version")]`` so that
one :data:`ANCHOR_ADAPTER` reads both versions side by side. New optional data goes into
``extras`` under a ``<namespace>.<name>`` key without a version bump.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import (
    MAX_EMAX,
    MIN_EMIN,
    ROUND_HALF_EVEN,
    Context,
    Decimal,
    DivisionByZero,
    InvalidOperation,
    Overflow,
)
from types import MappingProxyType
from typing import Annotated, Any, Final, Literal, Protocol, Self, TypeAlias, overload

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    TypeAdapter,
    WithJsonSchema,
    model_validator,
)

from tracebound.canonical import MAX_SAFE_INTEGER
from tracebound.errors import ValidationFailed
from tracebound.events.envelope import format_timestamp
from tracebound.ids import (
    AdvisoryId,
    AttemptId,
    ChainHead,
    PromptDigest,
    RagRecordId,
    ResponseDigest,
    WorkflowId,
)

__all__ = [
    "ANCHOR_ADAPTER",
    "BLAKE3_HEX_PATTERN",
    "EXTRAS_KEY_PATTERN",
    "MONEY_CONTEXT",
    "SHA256_DIGEST_PATTERN",
    "AnyAttemptAnchor",
    "AttemptAnchor",
    "AttemptAnchorBase",
    "BasisPoints",
    "ChainHeadHex",
    "Count",
    "Extras",
    "FrozenStrMap",
    "Money",
    "PlanOutcomeTag",
    "PlanProposalKind",
    "SignedMoney",
    "TrustConfidence",
    "TrustOutcomeLike",
    "UtcDateTime",
    "check_refusal_reason",
]

BLAKE3_HEX_PATTERN = r"^[0-9a-f]{64}$"
SHA256_DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
EXTRAS_KEY_PATTERN = r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$"
_DECIMAL_PATTERN = r"^[0-9]+(\.[0-9]+)?$"
_SIGNED_DECIMAL_PATTERN = r"^-?[0-9]+(\.[0-9]+)?$"
_EXTRAS_KEY = re.compile(EXTRAS_KEY_PATTERN)
_HEX32 = re.compile(r"[0-9a-f]{64}")


# --- hash-safe field types ---------------------------------------------------------------


def _refuse_float(value: Any) -> Any:
    # bool is refused too: `Decimal(True)` is 1, which is never what a caller meant.
    if isinstance(value, float | bool):
        # pydantic turns only ValueError into a ValidationError; a TypeError would escape raw.
        raise ValueError(  # noqa: TRY004
            "money must be a Decimal, an int or a decimal string, not "
            f"{type(value).__name__}: hashed data holds no floats"
        )
    return value


def _plain_decimal(value: Decimal) -> str:
    # Positional notation only, so that 1E+2 and 100 cannot hash differently after a trip;
    # and no "-0", which would compare equal to "0" yet hash differently. str() is already
    # positional unless it shows an exponent (exponent > 0, or more than six leading
    # zeros), and then the same text as format "f" at a third of the cost, on every money
    # field of every append; a test compares the two.
    text = str(value) if type(value) is Decimal else "E"  # anything else: as it always was
    if "E" in text or text[0] == "-":
        if value.is_zero():
            value = value.copy_abs()
        return format(value, "f")
    return text


Money: TypeAlias = Annotated[
    Decimal,
    BeforeValidator(_refuse_float),
    Field(ge=0, allow_inf_nan=False),
    PlainSerializer(_plain_decimal, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "pattern": _DECIMAL_PATTERN}),
]
"""A non-negative amount of US dollars; a decimal string in JSON."""

SignedMoney: TypeAlias = Annotated[
    Decimal,
    BeforeValidator(_refuse_float),
    Field(allow_inf_nan=False),
    PlainSerializer(_plain_decimal, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "pattern": _SIGNED_DECIMAL_PATTERN}),
]
"""An amount that may go negative, such as a budget that was overrun."""

MONEY_CONTEXT: Final = Context(
    prec=200,
    rounding=ROUND_HALF_EVEN,
    Emin=MIN_EMIN,
    Emax=MAX_EMAX,
    traps=[InvalidOperation, DivisionByZero, Overflow],
)
"""The decimal context money is computed in: 200 significant digits, so no sum rounds in
practice. Never the thread's own context: its default 28 digits round a large sum (and
cannot quantize 10**22 USD to micro-dollars), and a caller may have set anything."""

BasisPoints: TypeAlias = Annotated[int, Field(ge=0, le=10_000, strict=True)]
"""A score or confidence in [0, 1] as an integer number of 1/10 000ths (docs/adr/0003)."""

Count: TypeAlias = Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER, strict=True)]
"""A non-negative count (tokens, milliseconds, retries).

Strict, so ``True`` is not 1; bounded by 2**53 - 1, the largest integer RFC 8785 writes
exactly, so an oversized count fails here rather than at the ledger's write.
"""


def _to_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:
        # e.g. 9999-12-31T23:59:59-05:00; pydantic lets only a ValueError become its error.
        raise ValueError("is out of range: it falls outside years 1..9999 in UTC") from None


UtcDateTime: TypeAlias = Annotated[
    AwareDatetime,
    AfterValidator(_to_utc),
    PlainSerializer(format_timestamp, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A tz-aware instant, kept in UTC and written as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""


def _chain_head_from_hex(value: Any) -> Any:
    if isinstance(value, str):
        if not _HEX32.fullmatch(value):
            raise ValueError("a chain head in JSON is 64 lower-case hex characters")
        return bytes.fromhex(value)
    return value


def _chain_head_length(value: bytes) -> ChainHead:
    if len(value) != 32:
        raise ValueError(f"a chain head is 32 bytes of BLAKE3, not {len(value)}")
    return ChainHead(value)


def _hex(value: bytes) -> str:
    return value.hex()


ChainHeadHex: TypeAlias = Annotated[
    ChainHead,
    BeforeValidator(_chain_head_from_hex),
    AfterValidator(_chain_head_length),
    PlainSerializer(_hex, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "pattern": BLAKE3_HEX_PATTERN}),
]
"""A BLAKE3 chain head: raw bytes in Python, lower-case hex in JSON (bytes are not JSON)."""


def _freeze(value: Mapping[str, Any]) -> Mapping[str, Any]:
    # A fresh dict behind the proxy: the caller's dict can change, the payload cannot.
    return MappingProxyType(dict(value))


def _thaw(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(value)


FrozenStrMap: TypeAlias = Annotated[
    Mapping[str, str],
    AfterValidator(_freeze),
    PlainSerializer(_thaw, return_type=dict[str, str]),
]
"""A read-only string-to-string mapping; a JSON object on the wire."""


def _check_extras_keys(value: Mapping[str, str]) -> Mapping[str, str]:
    bad = sorted(key for key in value if not _EXTRAS_KEY.fullmatch(key))
    if bad:
        raise ValueError(
            f"extras keys must be '<namespace>.<name>' (e.g. 'phase7.base_image'), got {bad}"
        )
    return value


Extras: TypeAlias = Annotated[
    FrozenStrMap,
    AfterValidator(_check_extras_keys),
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": EXTRAS_KEY_PATTERN},
            "additionalProperties": {"type": "string"},
        }
    ),
]
"""ADR-04-0017's extension slot: namespaced keys, string values, read-only."""


def _empty_extras() -> Mapping[str, str]:
    return MappingProxyType({})


# --- the anchor --------------------------------------------------------------------------

PlanOutcomeTag: TypeAlias = Literal[
    "AppliedFromRecipe", "AppliedFromLlm", "RagOnlyApplicable", "Refused"
]
"""Which way Phase 4's plan validator let an attempt through, or that it refused it."""

PlanProposalKind: TypeAlias = Literal["apply_recipe", "apply_transform", "request_human", "refuse"]
"""What the planner proposed; later phases may extend the set (additively)."""

TrustConfidence: TypeAlias = Literal["high", "medium", "low"]
"""The coarse confidence a Phase 5 ``TrustOutcome`` carries."""

Blake3Prompt: TypeAlias = Annotated[PromptDigest, Field(pattern=BLAKE3_HEX_PATTERN)]
Blake3Response: TypeAlias = Annotated[ResponseDigest, Field(pattern=BLAKE3_HEX_PATTERN)]
NonEmptyWorkflowId: TypeAlias = Annotated[WorkflowId, Field(min_length=1)]
NonEmptyAdvisoryId: TypeAlias = Annotated[AdvisoryId, Field(min_length=1)]
NonEmptyRagRecordId: TypeAlias = Annotated[RagRecordId, Field(min_length=1)]


def check_refusal_reason(outcome: str, refusal_reason: str | None) -> None:
    """Enforce "``refusal_reason`` is set iff the outcome is ``Refused``".

    A refusal without a reason cannot be audited, and a reason on an applied plan would be
    read by a critic as a refusal signal. Shared with ``PlanOutcomeEmitted``.
    """
    if (outcome == "Refused") != (refusal_reason is not None):
        raise ValueError(
            "refusal_reason must be set if and only if the outcome is 'Refused' "
            f"(outcome={outcome!r}, refusal_reason={refusal_reason!r})"
        )


class TrustOutcomeLike(Protocol):
    """The slice of Phase 5's ``TrustOutcome`` that an anchor records."""

    @property
    def passed(self) -> bool: ...

    @property
    def confidence(self) -> TrustConfidence: ...


class AttemptAnchorBase(BaseModel):
    """Fields and invariants common to every anchor version.

    Not used directly: a concrete version pins ``schema_version`` to a literal, so that a
    reader of a mixed file can dispatch on it. Invariants are checked on construction *and*
    on load, so a malformed line in an anchors file raises instead of training a critic.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int

    # Identity
    attempt_id: AttemptId
    workflow_id: NonEmptyWorkflowId
    attempt_index: Count

    # Inputs the LLM saw
    advisory_id: NonEmptyAdvisoryId
    prompt_digest_blake3: Blake3Prompt
    retrieved_evidence_chain_head: ChainHeadHex | None
    retrieved_record_ids: tuple[NonEmptyRagRecordId, ...]

    # Output the LLM produced
    plan_proposal_kind: PlanProposalKind
    response_digest_blake3: Blake3Response

    # Verifier outcomes: Phase 4 sets validator_outcome, Phase 5 attaches the trust outcome
    validator_outcome: PlanOutcomeTag
    refusal_reason: Annotated[str, Field(min_length=1)] | None = None
    trust_outcome_passed: bool | None = None
    trust_outcome_confidence: TrustConfidence | None = None

    # Cost, joined from BudgetReconciled
    tokens_in: Count
    tokens_out: Count
    cost_usd: Money

    # Time and extension slot
    timestamp_utc: UtcDateTime
    extras: Extras = Field(default_factory=_empty_extras)

    @model_validator(mode="after")
    def _invariants(self) -> Self:
        check_refusal_reason(self.validator_outcome, self.refusal_reason)
        if (self.trust_outcome_passed is None) != (self.trust_outcome_confidence is None):
            raise ValueError(
                "trust_outcome_passed and trust_outcome_confidence are attached together "
                "or not at all"
            )
        if self.retrieved_evidence_chain_head is None and self.retrieved_record_ids:
            raise ValueError(
                "retrieved_record_ids must be empty when retrieval was bypassed "
                "(retrieved_evidence_chain_head is None)"
            )
        return self

    @overload
    def attach_trust_outcome(self, outcome: TrustOutcomeLike, /) -> Self: ...

    @overload
    def attach_trust_outcome(self, passed: bool, confidence: TrustConfidence) -> Self: ...

    def attach_trust_outcome(
        self,
        passed: bool | TrustOutcomeLike,
        confidence: TrustConfidence | None = None,
    ) -> Self:
        """Return a new anchor carrying Phase 5's verdict; this one is left unchanged.

        Phase 4 builds the anchor before the gate runs, so the verdict is attached later
        (ADR-04-0017's deferred-attach hook). Accepts a ``TrustOutcome``-like object or the
        two values. Attaching twice is refused: an anchor records one verdict, and silently
        replacing it would rewrite what the critic is trained on.
        """
        if isinstance(passed, bool):
            if confidence is None:
                raise TypeError("attach_trust_outcome(passed, confidence) needs a confidence")
            verdict, level = passed, confidence
        else:
            if confidence is not None:
                raise TypeError("give either a TrustOutcome or (passed, confidence), not both")
            verdict, level = passed.passed, passed.confidence
        if self.trust_outcome_passed is not None:
            raise ValidationFailed(
                "trust_outcome_passed", f"attempt {self.attempt_id} already has a trust outcome"
            )
        fields = dict(self)
        fields["trust_outcome_passed"] = verdict
        fields["trust_outcome_confidence"] = level
        return type(self).model_validate(fields)


class AttemptAnchor(AttemptAnchorBase):
    """Version 1 of the anchor, field for field as ADR-04-0017 persists it.

    Every consumer asserts ``schema_version`` on read; the literal does that here.
    """

    schema_version: Literal[1] = 1


AnyAttemptAnchor: TypeAlias = AttemptAnchor
"""Every anchor version a reader accepts; a ``schema_version``-discriminated union from V2."""

ANCHOR_ADAPTER: TypeAdapter[AnyAttemptAnchor] = TypeAdapter(AnyAttemptAnchor)
"""The one adapter that writes and reads anchors files (JSON lines)."""
