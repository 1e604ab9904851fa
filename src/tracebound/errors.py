"""One exception hierarchy for everything tracebound raises.

Every error a caller can see derives from :class:`TraceboundError`. Backend errors
(``sqlite3.Error``, ``psycopg.Error``, ``OSError``) and validation errors are translated
at the boundary that catches them, so ``except TraceboundError`` is always enough for a
call into tracebound. Building a payload model yourself (``CostIncurred(amount_usd=0.1)``)
is pydantic's constructor running in your code, and raises pydantic's ``ValidationError``.

The five branches answer "what went wrong" for an operator:

* :class:`IntegrityError`: the record is not what was written (tamper, gap, forgery...).
* :class:`ConcurrencyError`: another writer got there first; retrying may succeed.
* :class:`ContractError`: the caller's data breaks a contract (schema, canonical form).
* :class:`PolicyError`: a policy refused, or a policy itself is unusable.
* :class:`StorageError`: the store could not do what was asked (I/O, config, URL).

One class sits on two branches: :class:`StoreBusy` (another process holds the store's lock
for longer than this one waits) is both a :class:`ConcurrencyError` and a
:class:`StorageError`, so code that caught either before (PostgreSQL's lock timeout was the
one, SQLite's the other) still catches it, and ``except StoreBusy`` works on every backend.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "AttemptRefusedError",
    "AuditChainCorrupted",
    "BudgetExceeded",
    "BundleFieldMismatch",
    "CanonicalizationError",
    "CheckpointError",
    "CommitOutcomeUnknown",
    "ConcurrencyConflict",
    "ConcurrencyError",
    "ConfigError",
    "ConnectionLost",
    "ContractError",
    "DamageKind",
    "EventTypeError",
    "GateRequired",
    "IntegrityError",
    "KeyRotationRefused",
    "LedgerAttemptOutOfOrder",
    "LedgerDamaged",
    "PolicyError",
    "PolicyUnusable",
    "ProofError",
    "RunAlreadyResumed",
    "RunEnded",
    "RunTakenOver",
    "SignatureInvalid",
    "SigningKeyError",
    "StorageError",
    "StoreBusy",
    "StoreClosed",
    "StoreNotFound",
    "TraceboundError",
    "UnknownEventType",
    "UpcastError",
    "ValidationFailed",
    "ViewsOfAnotherLog",
]


class TraceboundError(Exception):
    """Root of every error tracebound raises on purpose."""


# --- integrity -------------------------------------------------------------------------


class IntegrityError(TraceboundError):
    """The stored record differs from what was written or signed."""


class DamageKind(StrEnum):
    """The kinds of damage `verify` tells apart, in the words an operator would use."""

    TAMPER = "tamper"  # bytes changed: a hash no longer matches its content
    GAP = "gap"  # a position is missing inside the log
    REORDER = "reorder"  # events are present but not where they were written
    TRUNCATION = "truncation"  # the log ends before a signed checkpoint says it should
    FORGED_SIGNATURE = "forged-signature"  # a checkpoint whose signature does not verify
    RETIRED_KEY = "retired-key"  # signed by a key retired by a rotation, beyond that rotation
    ROLLBACK = "rollback"  # older than the witness's checkpoint: a shorter log, or checkpoints
    FORK = "fork"  # the witness's checkpoint is no prefix of the log (same size or longer)
    TORN_TAIL = "torn-tail"  # a partially written final record (crash mid-append)
    MALFORMED = "malformed"  # a record that cannot be decoded at all


class LedgerDamaged(IntegrityError):
    """`verify` found damage. Carries the first bad position and the kind of damage."""

    def __init__(self, kind: DamageKind, position: int | None, detail: str) -> None:
        self.kind = kind
        self.position = position
        self.detail = detail
        where = "" if position is None else f" at position {position}"
        super().__init__(f"{kind.value}{where}: {detail}")

    def as_dict(self) -> dict[str, object]:
        """The report's JSON form, one shape for every command that prints damage."""
        return {"kind": self.kind.value, "position": self.position, "detail": self.detail}

    def __reduce__(self) -> tuple[type[LedgerDamaged], tuple[DamageKind, int | None, str]]:
        # Verify workers send damage reports across processes; keep them whole.
        return (type(self), (self.kind, self.position, self.detail))


class ViewsOfAnotherLog(IntegrityError):
    """The views were built from another history than this ledger's log: they hold
    positions past its end, or the record at their last position is not this log's (a
    ledger restored from an older backup, or views pointed at another ledger). Nothing is
    applied; ``tracebound project rebuild`` builds them again from this log."""


class AuditChainCorrupted(IntegrityError):
    """A BLAKE3 chain does not continue from the head it claims to continue (ADR-0005)."""


class LedgerAttemptOutOfOrder(IntegrityError):
    """An attempt was recorded out of order or twice in a RetryLedger (ADR-0005)."""


class ProofError(IntegrityError):
    """A Merkle inclusion or consistency proof does not verify."""


def short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: a hostile file may hold megabytes."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class BundleFieldMismatch(ProofError):
    """An inclusion bundle states a field (``field``) that its hashed record says otherwise.

    The bundle's own copy of a field is not covered by any hash: only the record's is. A
    bundle whose copy differs was edited (or built for another event), and is refused.
    """

    def __init__(self, field: str, stated: object, recorded: object) -> None:
        self.field = field
        self.stated = stated
        self.recorded = recorded
        super().__init__(
            f"the bundle's {field} is {short_repr(stated)} but its hashed record says "
            f"{short_repr(recorded)}: the bundle was edited or is for another event"
        )

    def __reduce__(self) -> tuple[type[BundleFieldMismatch], tuple[str, object, object]]:
        return (type(self), (self.field, self.stated, self.recorded))


class CheckpointError(IntegrityError):
    """A checkpoint (signed note) is malformed or does not match the log."""


class SignatureInvalid(CheckpointError):
    """A signed note carries no valid signature from the expected key."""


# --- concurrency -----------------------------------------------------------------------


class ConcurrencyError(TraceboundError):
    """Another writer changed the store first; the operation may be retried."""


class ConcurrencyConflict(ConcurrencyError):
    """Optimistic concurrency check failed on a stream's version."""

    def __init__(self, stream_id: str, expected: int | None, actual: int) -> None:
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stream {stream_id!r}: expected version {expected}, but it is at {actual}"
        )

    def __reduce__(self) -> tuple[type[ConcurrencyConflict], tuple[str, int | None, int]]:
        return (type(self), (self.stream_id, self.expected, self.actual))


class RunAlreadyResumed(ConcurrencyError):
    """Another process claimed this gated run first; this one ran nothing and wrote nothing.

    A resume records ``run_resumed`` at the stream version it read before it runs anything
    (an apply hook, a step, an event), so of two resumes of one run exactly one goes on.
    Retrying does not help: the run is the other process's now. If that process is known
    to have died before finishing, a human may take the run over (``tracebound resume RUN
    --take-over --as NAME``).
    """

    def __init__(self, run_id: str, step_id: str, detail: str) -> None:
        self.run_id = run_id
        self.step_id = step_id
        self.detail = detail
        super().__init__(
            f"run {run_id} was already resumed from its gate at {step_id} by another "
            f"process ({detail}); nothing was run. If that process died before finishing, "
            "take the run over: tracebound resume RUN --take-over --as NAME"
        )

    def __reduce__(self) -> tuple[type[RunAlreadyResumed], tuple[str, str, str]]:
        return (type(self), (self.run_id, self.step_id, self.detail))


class RunTakenOver(ConcurrencyError):
    """A human took this run over while this process was still running it.

    Every event of a run is appended at the version of the run's stream its process last
    wrote, so a claimant that was slow, not dead, stops at its next write once another
    process took the run over (``tracebound resume RUN --take-over --as NAME``): it records
    nothing more. What it did before that write (an apply hook's side effects) is done.
    """

    def __init__(self, run_id: str, by: str, detail: str) -> None:
        self.run_id = run_id
        self.by = by
        self.detail = detail
        super().__init__(
            f"run {run_id} was taken over by {by} ({detail}) while this process ran it; "
            "it stopped at its next write and recorded nothing more. What it did before "
            "(apply hooks included) is done and its events stay in the ledger"
        )

    def __reduce__(self) -> tuple[type[RunTakenOver], tuple[str, str, str]]:
        return (type(self), (self.run_id, self.by, self.detail))


class RunEnded(ConcurrencyError):
    """Someone ended this run on the record while this process was still running it.

    ``tracebound abandon RUN --as NAME`` ends a run whose process is taken for dead with a
    final ``run_finished`` appended at the run stream's version it read; a process that was
    in fact alive (stalled, partitioned) stops at its next write: it records nothing more
    (docs/adr/0018). What it did before that write is done.
    """

    def __init__(self, run_id: str, status: str, detail: str) -> None:
        self.run_id = run_id
        self.status = status
        self.detail = detail
        super().__init__(
            f"run {run_id} was ended ({status}: {detail}) while this process ran it; it "
            "stopped at its next write and recorded nothing more"
        )

    def __reduce__(self) -> tuple[type[RunEnded], tuple[str, str, str]]:
        return (type(self), (self.run_id, self.status, self.detail))


# --- contract --------------------------------------------------------------------------


class ContractError(TraceboundError):
    """Data given to tracebound breaks a contract: schema, canonical form, event type."""


class CanonicalizationError(ContractError):
    """A value cannot be encoded as RFC 8785 bytes safely (float, big int, lone surrogate)."""


class EventTypeError(ContractError):
    """An event type is unknown, registered twice, or does not match its payload."""


class UnknownEventType(EventTypeError):
    """No payload model is registered for this event type."""


class UpcastError(ContractError):
    """An older schema version could not be brought up to the current one."""


class ValidationFailed(ContractError):
    """A value failed schema validation; `field` names where and `reason` says why."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")

    def __reduce__(self) -> tuple[type[ValidationFailed], tuple[str, str]]:
        return (type(self), (self.field, self.reason))


# --- policy ----------------------------------------------------------------------------


class PolicyError(TraceboundError):
    """A policy refused an action, or a policy cannot be used."""


class PolicyUnusable(PolicyError):
    """A policy is empty, unreadable or malformed. Policies fail closed."""


class GateRequired(PolicyError):
    """The step is gated: a named human must approve it before it runs."""


class BudgetExceeded(PolicyError):
    """An attempt would go over its budget; this is a typed refusal, not a crash."""


class AttemptRefusedError(PolicyError):
    """An attempt was refused (by the planner, a gate, or the retry limit)."""


# --- storage ---------------------------------------------------------------------------


class StorageError(TraceboundError):
    """The store could not complete an operation (I/O, configuration, backend)."""


class ConfigError(StorageError):
    """A URL, path or setting is invalid."""


class StoreNotFound(StorageError):
    """There is no store at the given location; run `tracebound init` first.

    ``place``: for a SQLite file or JSONL directory, the scheme and path that hold no store
    (so a caller can ask whether a ledger was bound there before).
    """

    def __init__(self, message: str, *, place: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.place = place


class CommitOutcomeUnknown(StorageError):
    """The connection to the database was lost after COMMIT was sent: the write may have
    happened or not, and this process cannot tell which.

    Before writing again, find out: read the stream's head, or retry with the same
    ``expected_version``, which raises :class:`ConcurrencyConflict` if the first attempt
    did land instead of writing the events twice. (A connection lost *before* COMMIT was
    sent raises a plain :class:`StorageError`: nothing was written.)
    """


class ConnectionLost(StorageError):
    """The database server could not be reached, or the session to it was lost (a restart,
    a failover, a network cut) before anything of the call was committed: a read, or a
    write whose ``COMMIT`` was not sent. Nothing was half done, and the same call may be
    made again once the server is back; the store or views reconnect on their next call.

    (A write whose ``COMMIT`` was sent before the loss is :class:`CommitOutcomeUnknown`
    instead: it may have landed.) ``project run --follow`` and ``tail --follow`` wait for
    the server on this error, backing off, up to their ``--give-up-after``.
    """


class StoreClosed(StorageError):
    """The store was used after `close()`."""


class SigningKeyError(StorageError):
    """A signing key is missing, unreadable, or kept where it must not be."""


class KeyRotationRefused(SigningKeyError):
    """`keys rotate` (``Ledger.rotate_key``) would not hand the ledger over to a new key:
    the key given is not the one that signs this ledger now, a rotation is unfinished or
    another is in its way, or the new key is not new. Nothing was written."""


class StoreBusy(ConcurrencyError, StorageError):
    """Another process holds the store's lock, and did not let go within the wait allowed.

    The same class on every backend: SQLite's ``busy_timeout``, PostgreSQL's
    ``lock_timeout`` and the JSONL store's ``lock_timeout`` (its ``flock``) ran out. The
    operation did nothing (an append wrote nothing), so it may be retried once the other
    process is done; a process that is stopped (``kill -STOP``, a debugger) or hung holds
    the lock until it goes on or ends, and ``hint`` says how to find it.

    ``store``: the file or place that is locked; ``waited``: seconds waited (None: the
    server's own timeout, whose length this process does not know).
    """

    def __init__(self, store: str, waited: float | None, hint: str) -> None:
        self.store = store
        self.waited = waited
        self.hint = hint
        within = "in time" if waited is None else f"within {waited:g} s"
        super().__init__(
            f"{store} is locked by another process, which did not release it {within}: "
            f"it is busy (or stopped, or hung), not damaged, and nothing was done. Retry "
            f"when it has finished; {hint}"
        )

    def __reduce__(self) -> tuple[type[StoreBusy], tuple[str, float | None, str]]:
        return (type(self), (self.store, self.waited, self.hint))
