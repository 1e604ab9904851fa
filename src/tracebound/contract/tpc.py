"""The Traceable Pipeline Contract: the artifact every agent step emits, and its envelope.

Each field is the record's (TPC + ARL, "Traceable Pipeline Contract"), with two changes of
representation so that an artifact hashes one way (docs/adr/0003, docs/adr/0004):
``confidence`` is an integer in basis points (0..10 000) and ``cost_est.compute_usd_est`` is
a decimal string. The hand-written schema is ``schemas/agent/tpc.schema.json``.

Every field is required. Which lists may be *empty* is a decision about roles: a Planner
runs no tests and writes no diff, a Router produces no artifact, a first step has no input
but its goal. What may never be empty is what the next role relies on: ``actions`` (a step
that says it did nothing cannot be audited) and every set in the :class:`HandoffEnvelope`.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, model_validator

from tracebound.contract._types import (
    DigestSet,
    NonEmptyTextList,
    NonEmptyTextSet,
    ReferenceSet,
    Text,
    TextList,
    TextSet,
    invariant,
)
from tracebound.events.anchor import BasisPoints, Count
from tracebound.events.catalog import CostEstimate, Role

__all__ = [
    "CostEstimate",
    "HandoffEnvelope",
    "LatencyEstimate",
    "Outputs",
    "Role",
    "TPCArtifact",
]


class _Closed(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HandoffEnvelope(_Closed):
    """What the next role must honour; every set holds at least one entry.

    An empty set is refused rather than read as "none": a Planner that forgot to state its
    constraints would otherwise hand the Executor unlimited scope.
    """

    assumptions: NonEmptyTextSet
    constraints: NonEmptyTextSet
    required_validations: NonEmptyTextSet
    minimal_diff: Text


class Outputs(_Closed):
    """What the step produced: a summary, and its artifacts by digest (never inlined).

    ``artifacts`` may be empty: a Planner, Critic or Router may produce only a summary.
    """

    summary: Text
    artifacts: DigestSet


class LatencyEstimate(_Closed):
    """The step's expected latency; ``p50_ms`` may not exceed ``p95_ms``."""

    p50_ms: Count
    p95_ms: Count

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        # JSON Schema cannot compare two fields; this is why validate_tpc runs the model too.
        if self.p95_ms < self.p50_ms:
            raise invariant("p95_ms", f"must not be less than p50_ms ({self.p50_ms})")
        return self


class TPCArtifact(_Closed):
    """One agent step's structured artifact, validated before it is hashed and handed on."""

    role: Role
    goal: Text
    input_refs: ReferenceSet
    assumptions: TextSet
    constraints: TextSet
    actions: NonEmptyTextList
    outputs: Outputs
    diffs: TextList
    tests_run: TextList
    confidence: BasisPoints
    """Basis points: 0 is no confidence, 10 000 is certainty (docs/adr/0004)."""
    risks: TextSet
    cost_est: CostEstimate
    latency_est: LatencyEstimate
    required_validations: TextSet
    handoff_envelope: HandoffEnvelope
