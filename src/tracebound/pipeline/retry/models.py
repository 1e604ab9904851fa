"""The data both sides of the retry loop agree on (ADR-0002, ADR-0008, ADR-04-0017).

* :class:`FailingSignal`: one structured reason a gate failed. Gates produce these from
  parsed tool output (a test id, a lint rule, a detector name), never from raw stdout.
* :class:`TrustOutcome`: a gate run's verdict: passed, confidence, failing signals.
* :class:`AttemptSummary`: what the planner is told about a failed attempt on retry 2+.
  Its ``prior_failure_summary`` is built only from failing signals, sanitised and capped at
  :data:`MAX_SUMMARY_BYTES`; the prompt builder wraps it with ``FenceWrapper`` before it
  goes anywhere near a prompt. No raw sandbox output ever reaches a prompt.

These are contracts: renaming or removing a field needs an ADR amendment and regenerated
contract snapshots (tests/unit/retry/test_contract_snapshots.py).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, Self
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tracebound.events.anchor import BasisPoints

__all__ = [
    "MAX_SUMMARY_BYTES",
    "AttemptSummary",
    "FailingSignal",
    "SignalKind",
    "TrustConfidence",
    "TrustOutcome",
]

MAX_SUMMARY_BYTES: Final = 4096

SignalKind = Literal[
    "test_failure",
    "test_error",
    "lint_error",
    "secret_found",
    "timeout",
    "resource_limit",
    "crash",
    "patch_rejected",
]
TrustConfidence = Literal["high", "medium", "low"]

_Short = Annotated[str, Field(min_length=1, max_length=512)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FailingSignal(_Frozen):
    """One structured reason a gate failed.

    ``subject`` names what failed (``tests/test_api.py::test_get``, ``F401``, a detector),
    ``message`` is a short, already-parsed explanation (an assertion's first line, a lint
    message). Both are data from untrusted tool output: the summary builder sanitises them
    again before use.
    """

    gate: _Short
    kind: SignalKind
    subject: _Short
    message: Annotated[str, Field(max_length=1024)] = ""
    location: Annotated[str, Field(max_length=512)] | None = None


class TrustOutcome(_Frozen):
    """The verifying side's verdict on one attempt (ADR-0008's shape)."""

    passed: bool
    confidence: TrustConfidence
    score: BasisPoints
    failing_signals: tuple[FailingSignal, ...] = ()
    sandbox_run_id: _Short

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.passed and self.failing_signals:
            raise ValueError("a passing outcome carries no failing signals")
        if not self.passed and not self.failing_signals:
            raise ValueError("a failing outcome names at least one failing signal")
        return self


class AttemptSummary(_Frozen):
    """What the next attempt's planner may know about a failed one (ADR-0002).

    ``prior_failure_summary`` is sanitised text derived from ``failing_signals`` only, at
    most :data:`MAX_SUMMARY_BYTES` UTF-8 bytes; ``evidence_paths`` point to the full
    (redacted) logs for humans, never for prompts.
    """

    attempt_id: UUID
    sandbox_run_id: _Short
    failing_signals: tuple[FailingSignal, ...]
    prior_failure_summary: str
    evidence_paths: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _capped(self) -> Self:
        size = len(self.prior_failure_summary.encode("utf-8"))
        if size > MAX_SUMMARY_BYTES:
            raise ValueError(f"prior_failure_summary is {size} bytes; at most {MAX_SUMMARY_BYTES}")
        return self
