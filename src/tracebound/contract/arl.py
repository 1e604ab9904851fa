"""The Agent Run Ledger entry: one step of a run, its artifact's hash and its outcome.

The fields are the record's ARL list, plus the governance fields the record asks the ledger
to hold: who approved a gated step and when (``approval``), the scopes the role was granted
(``scopes_granted``) and, when something was stripped before the write, why
(``redaction_reason``). The hand-written schema is ``schemas/agent/arl.schema.json``.

Presence rules, chosen so that one entry has one JSON spelling (it is hashed):

* ``parent_step_id`` and ``error_origin`` are required and nullable. ``null`` is a statement
  ("root step", "origin not attributed", which counts towards ``unresolved_origin``), so a
  producer must make it explicitly.
* ``payload_pointer``, ``approval`` and ``redaction_reason`` are optional and never ``null``:
  absent means "none", and :meth:`~pydantic.BaseModel.model_dump` leaves them out.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tracebound.contract._types import (
    ArtifactDigest,
    RunIdField,
    StepIdField,
    Text,
    TextSet,
    invariant,
)
from tracebound.errors import short_repr
from tracebound.events.anchor import Count, UtcDateTime
from tracebound.events.catalog import CostEstimate, Role, StepStatus
from tracebound.events.catalog import Validations as _CatalogValidations

__all__ = [
    "ARLEntry",
    "Approval",
    "ApprovalDecision",
    "StepStatus",
    "Storage",
    "Validations",
]

Storage: TypeAlias = Literal["console", "file", "db"]
"""The sink an entry was written to."""

ApprovalDecision: TypeAlias = Literal["approved", "rejected"]


def _is_none(value: object) -> bool:
    return value is None


def _never_null(schema: dict[str, Any]) -> None:
    """Leave ``null`` out of an optional field's JSON Schema: absent is how "none" is said.

    (Rather than ``X | SkipJsonSchema[None]``, which makes pydantic validate a union and put
    the member's name in an error's location: ``approval.Approval.timestamp``.)
    """
    options = schema.pop("anyOf", None)
    if options is not None:
        schema.update(*(option for option in options if option != {"type": "null"}))


class Validations(_CatalogValidations):
    """Which validations ran, which of those failed, and which are still pending.

    A subclass of the event catalog's ``Validations``, so an entry's value can go straight
    into a ``StepRecorded`` payload; here every list is required (an empty list is a
    statement), unique, and ``failed ⊆ ran``, ``pending ∩ ran = ∅``.
    """

    ran: TextSet
    pending: TextSet
    failed: TextSet

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        ran = set(self.ran)  # a set: each list may be long, and a tuple is searched item by item
        not_ran = [name for name in self.failed if name not in ran]
        if not_ran:
            raise invariant("failed", f"lists validations that did not run: {short_repr(not_ran)}")
        both = [name for name in self.pending if name in ran]
        if both:
            raise invariant("pending", f"lists validations that already ran: {short_repr(both)}")
        return self


class Approval(BaseModel):
    """A named human's decision on a gated step: who, what and when (CODEOWNERS approval)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    approver: Text
    decision: ApprovalDecision
    timestamp: UtcDateTime


class ARLEntry(BaseModel):
    """One immutable ledger entry; the artifact itself is referenced by hash, never inlined."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: RunIdField
    step_id: StepIdField
    parent_step_id: StepIdField | None
    role: Role
    timestamp_start: UtcDateTime
    timestamp_end: UtcDateTime
    duration_ms: Count
    artifact_hash: ArtifactDigest
    payload_pointer: Annotated[
        Text | None, Field(exclude_if=_is_none, json_schema_extra=_never_null)
    ] = None
    status: StepStatus
    error_origin: StepIdField | None
    cost_est: CostEstimate
    latency_ms: Count
    validations: Validations
    storage: Storage
    approval: Annotated[
        Approval | None, Field(exclude_if=_is_none, json_schema_extra=_never_null)
    ] = None
    scopes_granted: TextSet
    redaction_reason: Annotated[
        Text | None, Field(exclude_if=_is_none, json_schema_extra=_never_null)
    ] = None

    @model_validator(mode="after")
    def _lineage_and_time(self) -> Self:
        if self.timestamp_end < self.timestamp_start:
            raise invariant("timestamp_end", "must not be before timestamp_start")
        if self.parent_step_id == self.step_id:
            raise invariant("parent_step_id", "must not be the step itself")
        return self
