"""The planning side's data: the advisory, the apply context and the plan outcome.

* :class:`Advisory` is the part of an OSV record (https://ossf.github.io/osv-schema/) the
  planner reasons over. Real OSV JSON parses as-is: keys we do not model (``severity``,
  ``credits``, ``upstream``, ...) are *accepted and dropped*. They are not stored because
  nothing here reads them, and a field nobody reads is a field nobody validates; the
  advisory text that does reach a prompt is fenced anyway.
* :class:`ApplyContext` is what one remediation is about. The strings that appear
  *outside* the prompt's fence (package, version, ecosystem, advisory id) are restricted to
  identifier shapes here, so they cannot carry an instruction into the prompt.
* :class:`PlanOutcome` is what ``FallbackTier.run`` returns: the tag, the patch and its
  digest, the exact (redacted) prompt, and the anchor as it was recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, Self, TypeAlias
from uuid import UUID

from blake3 import blake3
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    ValidationError,
    model_validator,
)

from tracebound.errors import ValidationFailed
from tracebound.events.anchor import AttemptAnchor, PlanOutcomeTag, check_refusal_reason
from tracebound.pipeline.retry.models import AttemptSummary, TrustOutcome

__all__ = [
    "ADVISORY_ID_PATTERN",
    "ECOSYSTEM_PATTERN",
    "PACKAGE_PATTERN",
    "VERSION_PATTERN",
    "WORKFLOW_ID_PATTERN",
    "Advisory",
    "AffectedPackage",
    "AffectedRange",
    "AnchorHook",
    "ApplyContext",
    "OsvPackage",
    "OsvRangeEvent",
    "OsvReference",
    "PlanOutcome",
    "RefusalReason",
]

ADVISORY_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
WORKFLOW_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
"""A workflow id names a directory under the workdir, so it must be one safe path segment."""
PACKAGE_PATTERN = r"^[A-Za-z0-9@][A-Za-z0-9._/@+-]{0,213}$"
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}$"
ECOSYSTEM_PATTERN = r"^[A-Za-z][A-Za-z0-9.:_-]{0,63}$"

RefusalReason: TypeAlias = Literal[
    "budget",
    "no_plan",
    "leaf_error",
    "unpriced_model",
    "no_patch_in_response",
    "patch_does_not_apply",
    "patch_contains_secret",
    "repeats_failed_patch",
    "canary_leaked",
    "tier_error",
]
"""Why the tier refused. ``budget`` is the one the brief names; each other reason is a
distinct, fail-closed stop documented in docs/retry.md. ``tier_error`` closes an attempt
whose own machinery failed mid-way (the error is raised once the anchor is recorded)."""


def _freeze_json(value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return None if value is None else MappingProxyType(dict(value))


def _thaw_json(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)


_FrozenJson: TypeAlias = Annotated[
    Mapping[str, JsonValue] | None,
    AfterValidator(_freeze_json),
    PlainSerializer(_thaw_json),
]


class _OsvModel(BaseModel):
    # extra="ignore": OSV adds keys over time; an unknown key must not reject a real record.
    model_config = ConfigDict(frozen=True, extra="ignore")


class OsvPackage(_OsvModel):
    """``affected[].package``: which package in which ecosystem."""

    ecosystem: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    purl: str | None = None


class OsvRangeEvent(_OsvModel):
    """One ``ranges[].events[]`` entry: exactly one of the four keys is set."""

    introduced: str | None = None
    fixed: str | None = None
    last_affected: str | None = None
    limit: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        set_keys = [
            k for k in ("introduced", "fixed", "last_affected", "limit") if getattr(self, k)
        ]
        if len(set_keys) != 1:
            raise ValueError(f"an OSV range event sets exactly one key, got {set_keys}")
        return self


class AffectedRange(_OsvModel):
    """``affected[].ranges[]``: ECOSYSTEM and SEMVER ranges are version ranges; GIT ranges
    are commit ranges and are never compared as versions."""

    type: Literal["ECOSYSTEM", "SEMVER", "GIT"]
    repo: str | None = None
    events: Annotated[tuple[OsvRangeEvent, ...], Field(min_length=1)]


class AffectedPackage(_OsvModel):
    """``affected[]``: a package, its vulnerable ranges and/or explicit versions."""

    package: OsvPackage
    ranges: tuple[AffectedRange, ...] = ()
    versions: tuple[str, ...] = ()
    database_specific: _FrozenJson = None


class OsvReference(_OsvModel):
    """``references[]``: a typed link (ADVISORY, FIX, WEB, ...)."""

    type: str
    url: str


class Advisory(_OsvModel):
    """The OSV fields the planner uses. Frozen; unknown input keys are dropped.

    ``summary`` and ``details`` are third-party text: they only ever reach a prompt
    fence-wrapped and datamarked.
    """

    id: Annotated[str, Field(pattern=ADVISORY_ID_PATTERN)]
    summary: str = ""
    details: str = ""
    aliases: tuple[str, ...] = ()
    modified: str | None = None
    published: str | None = None
    affected: tuple[AffectedPackage, ...] = ()
    references: tuple[OsvReference, ...] = ()
    database_specific: _FrozenJson = None

    @classmethod
    def from_osv_json(cls, data: str | bytes) -> Self:
        """Parse one OSV JSON document (as served by osv.dev or an advisory database).

        Raises:
            ValidationFailed: the document is not JSON, or not an OSV record we can use
                (``field`` names where, as ``advisory.<path>``; the pydantic error is the
                ``__cause__``).
        """
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValidationFailed(
                f"advisory.{where}" if where else "advisory", first["msg"]
            ) from exc

    def affected_for(self, ecosystem: str, name: str) -> tuple[AffectedPackage, ...]:
        """The ``affected`` entries for one package, names compared the PyPI way.

        PEP 503 normalisation (case, ``-``/``_``/``.``) is applied for every ecosystem: a
        false match only offers a recipe a range it then fails to use, a false miss would
        hide a fix.
        """
        want = normalise_name(name)
        return tuple(
            a
            for a in self.affected
            if a.package.ecosystem == ecosystem and normalise_name(a.package.name) == want
        )


def normalise_name(name: str) -> str:
    """PEP 503 normal form: lower case, runs of ``-_.`` become one ``-``."""
    out: list[str] = []
    for ch in name.lower():
        if ch in "-_.":
            if not out or out[-1] != "-":
                out.append("-")
        else:
            out.append(ch)
    return "".join(out)


class ApplyContext(BaseModel):
    """One remediation: which advisory, which repository, which pinned package.

    ``prior_attempts`` is ADR-0002's default-empty field; the tier reads it and never
    mutates it. (It is also a keyword of ``FallbackTier.run``; giving both is allowed only
    when they agree.)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    advisory: Advisory
    repo_path: Path
    package: Annotated[str, Field(pattern=PACKAGE_PATTERN)]
    current_version: Annotated[str, Field(pattern=VERSION_PATTERN)]
    ecosystem: Annotated[str, Field(pattern=ECOSYSTEM_PATTERN)] = "PyPI"
    prior_attempts: list[AttemptSummary] = []


class PlanOutcome(BaseModel):
    """What one attempt produced, as the verifying side and the retry loop consume it.

    Invariants (checked on construction): a patch and its digest exist iff the tag is not
    ``Refused``; ``patch_blake3`` is the BLAKE3 of the patch's UTF-8 bytes; a refusal has a
    reason and nothing else does; the anchor's identity and outcome agree with the plan's.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tag: PlanOutcomeTag
    attempt_id: UUID
    attempt_index: Annotated[int, Field(ge=0)]
    workflow_id: Annotated[str, Field(pattern=WORKFLOW_ID_PATTERN)]
    patch: str | None
    patch_blake3: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None
    refusal_reason: str | None
    prompt: str | None
    anchor: AttemptAnchor
    trust: TrustOutcome | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        check_refusal_reason(self.tag, self.refusal_reason)
        if (self.tag == "Refused") != (self.patch is None):
            raise ValueError("a patch is present if and only if the plan was not refused")
        if (self.patch is None) != (self.patch_blake3 is None):
            raise ValueError("patch and patch_blake3 come together")
        if self.patch is not None and blake3(self.patch.encode()).hexdigest() != self.patch_blake3:
            raise ValueError("patch_blake3 is not the BLAKE3 of the patch")
        a = self.anchor
        if (a.attempt_id, a.attempt_index, a.workflow_id) != (
            self.attempt_id,
            self.attempt_index,
            self.workflow_id,
        ):
            raise ValueError("the anchor belongs to a different attempt")
        if a.validator_outcome != self.tag:
            raise ValueError("the anchor's validator_outcome differs from the plan's tag")
        if self.trust is not None and (
            a.trust_outcome_passed != self.trust.passed
            or a.trust_outcome_confidence != self.trust.confidence
        ):
            raise ValueError("the anchor's trust fields differ from the attached TrustOutcome")
        return self


AnchorHook: TypeAlias = Callable[[PlanOutcome], TrustOutcome]
"""The verifying side's gate, bound by the retry loop: judge a plan, return the verdict."""
