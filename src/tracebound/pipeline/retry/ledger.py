"""The RetryLedger of ADR-0005: the attempts log that continues the planning side's chain.

``<run_dir>/attempts.jsonl`` holds one line per attempt of a remediation run::

    {"attempt": {…AttemptRecord…}, "chain_hash": "<hex>", "prev_hash": "<hex>"}

in RFC 8785 form, where ``chain_hash = blake3(prev_hash ‖ canonical_json(attempt))``. The
first line's ``prev_hash`` is the planning side's chain head, read from
``<run_dir>/chain_head.bin`` (32 raw bytes: the hash of the last event of the ledger stream
``attempts/<workflow_id>``); every later line continues the line before. Each record also
carries the planning head it was recorded against, so the chain binds every gate verdict to
the exact planning history it judged, across the LLM-decision boundary.

Why refuse so loudly: a retry loop that keeps running gates on a log that no longer
continues its planning chain would produce verdicts nobody can tie to a plan. So the
constructor re-verifies everything and raises :class:`~tracebound.errors.AuditChainCorrupted`
(with what to do) when:

* ``chain_head.bin`` is missing or is not 32 bytes;
* ``prev_chain_head`` is given (the caller read the head from the ledger) and differs;
* any line is torn, unparseable, mislinked, mis-hashed, out of order, or not canonical;
* ``chain_head.bin`` moved on since the last recorded attempt and nobody vouched for the new
  head (pass ``prev_chain_head``: the gate runner passes :func:`planning_head`, the hash of
  the ledger's last ``attempt_anchor_recorded`` event for the workflow).

A RetryLedger that failed once stays refused (:meth:`RetryLedger.ensure_usable`), and the
gate runner calls that before it starts any gate process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tracebound.canonical import canonical_bytes
from tracebound.errors import (
    AuditChainCorrupted,
    CanonicalizationError,
    LedgerAttemptOutOfOrder,
    ValidationFailed,
)
from tracebound.events.anchor import (
    BLAKE3_HEX_PATTERN,
    BasisPoints,
    ChainHeadHex,
    Count,
    PlanOutcomeTag,
    TrustConfidence,
    UtcDateTime,
    check_refusal_reason,
)
from tracebound.ids import AttemptId, ChainHead, PatchDigest, WorkflowId
from tracebound.integrity.chain import HASH_SIZE, chain_hash
from tracebound.integrity.strict_json import loads_strict
from tracebound.pipeline.retry.models import TrustOutcome
from tracebound.store.files import append_durably, make_private_dir
from tracebound.store.port import StreamStore

__all__ = [
    "ATTEMPTS_FILE",
    "CHAIN_HEAD_FILE",
    "REMEDIATION",
    "AttemptRecord",
    "AttemptsDamage",
    "AttemptsVerification",
    "RetryLedger",
    "TrustSummary",
    "planning_head",
    "signal_key",
    "verify_attempts",
]

ATTEMPTS_FILE: Final = "attempts.jsonl"
CHAIN_HEAD_FILE: Final = "chain_head.bin"
REMEDIATION: Final = (
    "The attempts log no longer continues the planning side's chain. Do not run more gates "
    "for this run; compare with your backups, or start a new run; see docs/retry.md"
)
_LINE_KEYS: Final = frozenset({"attempt", "chain_hash", "prev_hash"})
_MAX_SIGNAL_KEYS: Final = 64

_Text = Annotated[str, Field(min_length=1, max_length=1024)]


def signal_key(kind: str, subject: str) -> str:
    """The one-string name of a failing signal in events and records: ``kind:subject``."""
    return f"{kind}:{subject}"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TrustSummary(_Frozen):
    """The slice of a ``TrustOutcome`` an attempts line keeps.

    A summary rather than the outcome itself, so that the attempts-log format does not
    change each time ``TrustOutcome`` grows; failing signals are kept as ``kind:subject``
    keys (at most 64), their messages stay in the gate events' evidence.
    """

    passed: bool
    confidence: TrustConfidence
    score: BasisPoints
    sandbox_run_id: _Text
    failing_signals: Annotated[tuple[_Text, ...], Field(max_length=_MAX_SIGNAL_KEYS)] = ()
    network_isolated: bool

    @classmethod
    def from_outcome(cls, outcome: TrustOutcome, *, network_isolated: bool) -> Self:
        keys = dict.fromkeys(signal_key(s.kind, s.subject) for s in outcome.failing_signals)
        return cls(
            passed=outcome.passed,
            confidence=outcome.confidence,
            score=outcome.score,
            sandbox_run_id=outcome.sandbox_run_id,
            failing_signals=tuple(keys)[:_MAX_SIGNAL_KEYS],
            network_isolated=network_isolated,
        )


class AttemptRecord(_Frozen):
    """One attempt of a remediation run, as its attempts.jsonl line records it.

    ``attempt_index`` is 0 for the first attempt and counts up by one; every attempt is
    recorded, a planning-side refusal too (``plan_tag="Refused"``, no trust outcome), so
    that a gap in the indices always means a lost line. Times come from the injected
    clock of whoever builds the record.
    """

    schema_version: Literal[1] = 1
    workflow_id: Annotated[WorkflowId, Field(min_length=1)]
    attempt_index: Count
    attempt_id: AttemptId
    plan_tag: PlanOutcomeTag
    patch_blake3: Annotated[PatchDigest, Field(pattern=BLAKE3_HEX_PATTERN)] | None = None
    refusal_reason: _Text | None = None
    planning_chain_head: ChainHeadHex
    trust: TrustSummary | None = None
    started_at: UtcDateTime
    recorded_at: UtcDateTime

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        check_refusal_reason(self.plan_tag, self.refusal_reason)
        if self.plan_tag == "Refused" and self.trust is not None:
            raise ValueError("a refused plan never reached the gates: trust must be None")
        if self.recorded_at < self.started_at:
            raise ValueError("recorded_at is before started_at")
        return self


@dataclass(frozen=True, slots=True)
class AttemptsDamage:
    """What is wrong with a run's attempts log, and where (``line`` None: chain_head.bin)."""

    line: int | None
    detail: str

    def message(self) -> str:
        where = CHAIN_HEAD_FILE if self.line is None else f"line {self.line}"
        return f"AuditChainCorrupted at {where}: {self.detail}. {REMEDIATION}"


@dataclass(frozen=True, slots=True)
class AttemptsVerification:
    """The result of re-verifying a run directory from chain_head.bin through every line."""

    run_dir: Path
    planning_head: ChainHead | None  # what chain_head.bin holds now
    attempts: tuple[AttemptRecord, ...]  # the lines verified before any damage
    hashes: tuple[ChainHead, ...]  # their chain hashes
    damage: AttemptsDamage | None

    @property
    def ok(self) -> bool:
        return self.damage is None

    @property
    def head(self) -> ChainHead | None:
        """The hash the next line must link to: the last line's, or the planning head."""
        return self.hashes[-1] if self.hashes else self.planning_head

    @property
    def pending(self) -> bool:
        """The planning side has moved on past the last recorded attempt (vouched for)."""
        return bool(
            self.attempts
            and self.planning_head is not None
            and self.planning_head != self.attempts[-1].planning_chain_head
        )


def _short(head: bytes) -> str:
    return head.hex()[:16] + "…"


def _read_head(run_dir: Path) -> ChainHead | AttemptsDamage:
    path = run_dir / CHAIN_HEAD_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return AttemptsDamage(
            None,
            f"{path} is missing: the planning side writes it after every attempt, so either "
            "no planning attempt has run for this run id or the file was deleted",
        )
    except OSError as exc:
        return AttemptsDamage(None, f"{path} cannot be read: {exc.strerror or exc}")
    if len(raw) != HASH_SIZE:
        return AttemptsDamage(
            None, f"{path} holds {len(raw)} bytes; a chain head is {HASH_SIZE} raw BLAKE3 bytes"
        )
    return ChainHead(raw)


def _parse_line(raw: bytes) -> tuple[AttemptRecord, bytes, bytes, bytes]:
    """Decode one line; returns (record, prev, claimed hash, canonical attempt bytes)."""
    if not raw.endswith(b"\n"):
        raise ValueError("the line is incomplete (no newline): a write was cut short")
    # Strict: Python's json raises RecursionError on deep nesting, which no ValueError
    # handler catches, and verify_attempts promises a verdict, never an exception.
    obj = loads_strict(raw)
    if not isinstance(obj, dict) or set(obj) != _LINE_KEYS:
        raise ValueError(f"a line is an object with exactly the keys {sorted(_LINE_KEYS)}")
    try:
        canonical_line = canonical_bytes(obj)
    except CanonicalizationError as exc:
        raise ValueError(f"not canonical JSON: {exc}") from exc
    if canonical_line + b"\n" != raw:
        raise ValueError("the line is not in its canonical (RFC 8785) form: it was edited")
    try:
        prev, claimed = bytes.fromhex(obj["prev_hash"]), bytes.fromhex(obj["chain_hash"])
    except (TypeError, ValueError) as exc:
        raise ValueError("prev_hash and chain_hash must be hex") from exc
    if len(prev) != HASH_SIZE or len(claimed) != HASH_SIZE:
        raise ValueError("prev_hash and chain_hash must be 32-byte BLAKE3 hashes")
    try:
        record = AttemptRecord.model_validate(obj["attempt"])
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "attempt"
        raise ValueError(f"the attempt record is invalid at {where}: {err['msg']}") from exc
    body = canonical_bytes(obj["attempt"])
    if canonical_bytes(record.model_dump(mode="json")) != body:
        raise ValueError("the attempt record does not round-trip through its model")
    return record, prev, claimed, body


def _check_link(
    record: AttemptRecord,
    prev: bytes,
    claimed: bytes,
    body: bytes,
    *,
    records: Sequence[AttemptRecord],
    hashes: Sequence[ChainHead],
) -> tuple[ChainHead, str | None]:
    """Check one decoded line against the lines before it; (its hash, what is wrong)."""
    expected_prev = hashes[-1] if hashes else record.planning_chain_head
    if prev != expected_prev:
        what = "the previous line's chain_hash" if hashes else "its own planning head"
        return ChainHead(claimed), (
            f"prev_hash {_short(prev)} does not continue {what} ({_short(expected_prev)})"
        )
    actual = chain_hash(prev, body)
    problem: str | None = None
    if actual != claimed:
        problem = (
            f"the attempt hashes to {_short(actual)} but chain_hash says {_short(claimed)}: "
            "the record was changed after it was written"
        )
    elif record.attempt_index != len(records):
        problem = (
            f"attempt_index {record.attempt_index} where {len(records)} was due "
            "(attempts are recorded in order, once each)"
        )
    elif any(r.attempt_id == record.attempt_id for r in records):
        problem = f"attempt_id {record.attempt_id} repeats"
    elif records and record.workflow_id != records[0].workflow_id:
        problem = "the workflow_id differs from line 1's"
    elif records and record.planning_chain_head == records[-1].planning_chain_head:
        problem = "two attempts are bound to the same planning head"
    return actual, problem


def _check_current_head(
    head: ChainHead, records: Sequence[AttemptRecord], vouched: bytes | None
) -> AttemptsDamage | None:
    """chain_head.bin must be the head the last line was recorded against, unless the
    caller vouches (from the ledger) for a newer one; going back is never right."""
    if not records or head == records[-1].planning_chain_head:
        return None
    earlier = {r.planning_chain_head for r in records[:-1]}
    if vouched is not None and head not in earlier:
        return None
    why = (
        "went back to an earlier attempt's head"
        if head in earlier
        else "changed after the last recorded attempt, and nothing vouches for the new head "
        "(the ledger's attempts stream head is passed as prev_chain_head)"
    )
    return AttemptsDamage(
        None,
        f"chain_head.bin holds {_short(head)}, but line {len(records)} was recorded against "
        f"{_short(records[-1].planning_chain_head)}: the planning head {why}",
    )


def verify_attempts(run_dir: Path, *, prev_chain_head: bytes | None = None) -> AttemptsVerification:
    """Re-verify a run's attempts log from chain_head.bin through every line; never raises.

    ``prev_chain_head``, when given, is the planning head the caller knows from elsewhere
    (the ledger's ``attempts/<workflow_id>`` stream head): chain_head.bin must equal it,
    and it may be newer than the last recorded attempt's head (an attempt is in flight).
    """
    run_dir = Path(run_dir)
    head = _read_head(run_dir)
    if isinstance(head, AttemptsDamage):
        return AttemptsVerification(run_dir, None, (), (), head)
    vouched = None if prev_chain_head is None else bytes(prev_chain_head)
    records: list[AttemptRecord] = []
    hashes: list[ChainHead] = []

    def result(damage: AttemptsDamage | None) -> AttemptsVerification:
        return AttemptsVerification(run_dir, head, tuple(records), tuple(hashes), damage)

    if vouched is not None and vouched != head:
        return result(
            AttemptsDamage(
                None,
                f"chain_head.bin holds {_short(head)} but the planning side's ledger stream "
                f"ends at {_short(vouched)}: the file was rewritten, or the planning chain "
                "changed",
            )
        )
    path = run_dir / ATTEMPTS_FILE
    try:
        with path.open("rb") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        lines = []
    except OSError as exc:
        return result(AttemptsDamage(1, f"{path} cannot be read: {exc.strerror or exc}"))
    for number, raw in enumerate(lines, start=1):
        try:
            record, prev, claimed, body = _parse_line(raw)
        except ValueError as exc:
            return result(AttemptsDamage(number, str(exc)))
        actual, problem = _check_link(record, prev, claimed, body, records=records, hashes=hashes)
        if problem is not None:
            return result(AttemptsDamage(number, problem))
        records.append(record)
        hashes.append(actual)
    return result(_check_current_head(head, records, vouched))


def planning_head(store: StreamStore, workflow_id: str) -> ChainHead | None:
    """The planning side's head as the ledger knows it: the hash of the last
    ``attempt_anchor_recorded`` event in ``attempts/<workflow_id>``.

    That is exactly what ``chain_head.bin`` holds at every moment of the loop: the
    planning side writes the file right after each attempt's anchor, and its next
    attempt's events (written before its anchor, while the gates run) do not move it.
    None when the workflow has no anchor yet (its first attempt is in flight).
    """
    head: ChainHead | None = None
    for event in store.read_stream(f"attempts/{workflow_id}"):
        if event.event_type == "attempt_anchor_recorded":
            head = event.hash
    return head


class RetryLedger:
    """The append-only, BLAKE3-chained attempts log of one remediation run (ADR-0005).

    Args:
        run_dir: ``<store>/remediation/<run-id>``; it holds the planning side's
            ``chain_head.bin`` and this ledger's ``attempts.jsonl``.
        prev_chain_head: The planning head the caller expects (from the ledger). When
            given, chain_head.bin must hold exactly it.

    Raises:
        AuditChainCorrupted: the run directory does not verify (the message names the
            line and says what to do). No RetryLedger exists then, so no gate can run.
    """

    def __init__(self, run_dir: Path, *, prev_chain_head: bytes | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / ATTEMPTS_FILE
        self._vouched = None if prev_chain_head is None else bytes(prev_chain_head)
        self._broken: str | None = None
        state = verify_attempts(self.run_dir, prev_chain_head=self._vouched)
        if state.damage is not None:
            raise AuditChainCorrupted(state.damage.message())
        self._state = state

    # -- state --------------------------------------------------------------------------

    @property
    def usable(self) -> bool:
        """False once any check failed; a broken ledger never becomes usable again."""
        return self._broken is None

    @property
    def attempts(self) -> tuple[AttemptRecord, ...]:
        return self._state.attempts

    @property
    def planning_head(self) -> ChainHead:
        """The planning side's head the next record is bound to (chain_head.bin)."""
        assert self._state.planning_head is not None
        return self._state.planning_head

    @property
    def head(self) -> ChainHead:
        """The hash the next line will link to."""
        head = self._state.head
        assert head is not None
        return head

    @property
    def next_index(self) -> int:
        return len(self._state.attempts)

    def has_attempt(self, attempt_id: AttemptId) -> bool:
        return any(r.attempt_id == attempt_id for r in self._state.attempts)

    def ensure_usable(self, *, prev_chain_head: bytes | None = None) -> None:
        """Re-verify the files against what this ledger last saw; refuse if they moved.

        Called before every gate run and every record. ``prev_chain_head`` vouches for a
        new planning head (the planning side ran another attempt since construction).

        Raises:
            AuditChainCorrupted: the files no longer verify, or changed under this object.
        """
        if self._broken is not None:
            raise AuditChainCorrupted(self._broken)
        if prev_chain_head is not None:
            self._vouched = bytes(prev_chain_head)
        state = verify_attempts(self.run_dir, prev_chain_head=self._vouched)
        message: str | None = None
        if state.damage is not None:
            message = state.damage.message()
        elif state.hashes != self._state.hashes:
            message = AttemptsDamage(
                len(state.hashes),
                f"{ATTEMPTS_FILE} changed under this RetryLedger "
                f"({len(self._state.hashes)} line(s) expected, {len(state.hashes)} found)",
            ).message()
        if message is not None:
            self._broken = message
            raise AuditChainCorrupted(message)
        self._state = state

    # -- writing ------------------------------------------------------------------------

    def record(self, attempt: AttemptRecord) -> ChainHead:
        """Append one attempt (fsynced) and return its chain hash.

        Raises:
            LedgerAttemptOutOfOrder: the attempt index is not the next one, the attempt
                id was recorded before, or the planning side has not closed the attempt yet
                (its head is still the previous attempt's).
            AuditChainCorrupted: the files do not verify, or the record is bound to a
                planning head other than the one chain_head.bin holds.
            ValidationFailed: the workflow differs from the run's first attempt.
        """
        self.ensure_usable()
        state = self._state
        if self.has_attempt(attempt.attempt_id):
            raise LedgerAttemptOutOfOrder(
                f"attempt {attempt.attempt_id} (index {attempt.attempt_index}) is already "
                f"recorded in {self.path}"
            )
        if attempt.attempt_index != len(state.attempts):
            raise LedgerAttemptOutOfOrder(
                f"attempt index {attempt.attempt_index} is out of order: {len(state.attempts)} "
                f"is next in {self.path}"
            )
        if state.attempts and attempt.workflow_id != state.attempts[0].workflow_id:
            raise ValidationFailed(
                "workflow_id",
                f"{attempt.workflow_id!r} is not this run's workflow "
                f"{state.attempts[0].workflow_id!r}",
            )
        if state.attempts and attempt.planning_chain_head == state.attempts[-1].planning_chain_head:
            raise LedgerAttemptOutOfOrder(
                f"attempt {attempt.attempt_index} would bind to the planning head of attempt "
                f"{state.attempts[-1].attempt_index}: record an attempt after the planning side "
                "has recorded its anchor and written chain_head.bin"
            )
        if attempt.planning_chain_head != self.planning_head:
            raise AuditChainCorrupted(
                f"the attempt is bound to planning head {_short(attempt.planning_chain_head)}, "
                f"but chain_head.bin holds {_short(self.planning_head)}"
            )
        body_obj = attempt.model_dump(mode="json")
        prev = self.head
        new_hash = chain_hash(prev, canonical_bytes(body_obj))
        line = canonical_bytes(
            {"attempt": body_obj, "prev_hash": prev.hex(), "chain_hash": new_hash.hex()}
        )
        self._append(line + b"\n")
        self._state = AttemptsVerification(
            self.run_dir,
            state.planning_head,
            (*state.attempts, attempt),
            (*state.hashes, new_hash),
            None,
        )
        return new_hash

    def _append(self, data: bytes) -> None:
        if not self.path.exists():
            make_private_dir(self.run_dir)
            self.run_dir.chmod(0o700)  # also when the folder was there already
        append_durably(self.path, data)


def attempts_as_rows(records: Sequence[AttemptRecord]) -> list[dict[str, Any]]:
    """Records as JSON-ready dicts (for ``inspect --json``)."""
    return [r.model_dump(mode="json") for r in records]
