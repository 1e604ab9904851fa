"""The attempt event log: the one writer of Phase 4's per-attempt events.

Every attempt event goes through :class:`AttemptEventLog`, which enforces the frame of
ADR-04-0017 at run time, before anything is appended:

* events of an attempt follow ``PHASE4_ATTEMPT_TYPES`` order (steps may be skipped, never
  reordered or repeated; ``RagHit``/``RagDegraded``/``RagMiss`` share one slot);
* an attempt starts with ``ProvenanceClassified`` and closes with exactly one
  ``AttemptAnchorRecorded``, which must follow its ``PlanOutcomeEmitted``;
* after the anchor, **any** further event for that ``attempt_id`` raises
  :class:`~tracebound.errors.LedgerAttemptOutOfOrder`, an integrity error: an event after
  the anchor would be an event the anchor's joined tuple does not account for.

Closed attempts are read back from the stream when the log is opened, so the rule holds
across processes and restarts, not just within one object. Appends carry the stream
version the log last saw, so a second writer on the same stream is a
:class:`~tracebound.errors.ConcurrencyConflict` rather than an interleaving.

An append that fails for any reason but a contract error (the store, a concurrent writer,
an interrupt mid-write) marks the log :attr:`~AttemptEventLog.failed`: whether that event
was written is then unknown, so the tier writes nothing more through it.
"""

from __future__ import annotations

from typing import Final

from tracebound.errors import ContractError, LedgerAttemptOutOfOrder
from tracebound.events.catalog import (
    AttemptAnchorRecorded,
    AttemptPayload,
    BudgetPrecharged,
    BudgetPrechecked,
    BudgetReconciled,
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
from tracebound.events.envelope import Payload, RecordedEvent
from tracebound.ids import AttemptId, ChainHead
from tracebound.ledger import Ledger

__all__ = ["ATTEMPT_STREAM_PREFIX", "AttemptEventLog", "attempt_stream"]

ATTEMPT_STREAM_PREFIX: Final = "attempts/"

_RANK: Final[dict[type[Payload], int]] = {
    ProvenanceClassified: 0,
    BudgetPrechecked: 1,
    RagHit: 2,
    RagDegraded: 2,
    RagMiss: 2,
    PromptBuilt: 3,
    BudgetPrecharged: 4,
    LeafInvoked: 5,
    LeafReturned: 6,
    BudgetReconciled: 7,
    TransformBuilt: 8,
    PlanOutcomeEmitted: 9,
    AttemptAnchorRecorded: 10,
}
_OUTCOME_RANK: Final = _RANK[PlanOutcomeEmitted]


def attempt_stream(workflow_id: str) -> str:
    """The stream that holds a workflow's attempt events: ``attempts/<workflow_id>``."""
    return f"{ATTEMPT_STREAM_PREFIX}{workflow_id}"


class AttemptEventLog:
    """Appends one workflow's attempt events, refusing any that break the attempt frame.

    Args:
        ledger: where events go; its clock and id source stamp them.
        workflow_id: the workflow; also every event's envelope ``workflow_id``.
    """

    def __init__(self, ledger: Ledger, *, workflow_id: str) -> None:
        self._ledger = ledger
        self.workflow_id = workflow_id
        self.stream_id = attempt_stream(workflow_id)
        self._last_rank: dict[AttemptId, int] = {}
        self._index: dict[AttemptId, int] = {}
        self._closed: set[AttemptId] = set()
        self._tried: list[str] = []
        self._head: ChainHead | None = None
        self._version = 0
        self._failed = False
        for event in ledger.store.read_stream(self.stream_id):
            self._observe(event)

    def _observe(self, event: RecordedEvent) -> None:
        payload = event.payload
        self._version = int(event.stream_version)
        self._head = event.hash
        if isinstance(payload, AttemptAnchorRecorded):
            self._closed.add(payload.attempt_id)
            self._last_rank.pop(payload.attempt_id, None)
        elif isinstance(payload, AttemptPayload) and type(payload) in _RANK:
            self._last_rank[payload.attempt_id] = _RANK[type(payload)]
            self._index[payload.attempt_id] = payload.attempt_index
            if isinstance(payload, TransformBuilt):
                self._tried.append(payload.patch_digest_blake3)

    @property
    def head(self) -> ChainHead | None:
        """The ``hash`` of the stream's last event (``None`` while the stream is empty)."""
        return self._head

    @property
    def attempt_indexes(self) -> frozenset[int]:
        """Every attempt index this workflow has used (closed attempts and open ones)."""
        return frozenset(self._index.values())

    @property
    def tried_patch_digests(self) -> tuple[str, ...]:
        """BLAKE3 digests of every patch an earlier attempt in this workflow built."""
        return tuple(self._tried)

    @property
    def failed(self) -> bool:
        """Whether an append failed in a way that leaves the stream's state unknown."""
        return self._failed

    def is_closed(self, attempt_id: AttemptId) -> bool:
        return attempt_id in self._closed

    def is_open(self, attempt_id: AttemptId) -> bool:
        """Whether the attempt has events but no anchor yet (it must still be closed)."""
        return attempt_id in self._last_rank

    def accepts(self, attempt_id: AttemptId, kind: type[AttemptPayload]) -> bool:
        """Whether an event of type ``kind`` may come next for the attempt (not a repeat,
        not out of ``PHASE4_ATTEMPT_TYPES`` order, not after the anchor)."""
        rank = _RANK.get(kind)
        if rank is None or attempt_id in self._closed:
            return False
        last = self._last_rank.get(attempt_id)
        return rank == 0 if last is None else rank > last

    def _check(self, attempt_id: AttemptId, attempt_index: int, rank: int, kind: str) -> None:
        if attempt_id in self._closed:
            raise LedgerAttemptOutOfOrder(
                f"attempt {attempt_id} of {self.workflow_id} is closed by its "
                f"AttemptAnchorRecorded; refusing a later {kind} event (ADR-04-0017: the "
                "anchor is the last event of every attempt)"
            )
        last = self._last_rank.get(attempt_id)
        if last is None and rank != 0:
            raise LedgerAttemptOutOfOrder(
                f"attempt {attempt_id} must open with provenance_classified, not {kind}"
            )
        if last is not None and rank <= last:
            raise LedgerAttemptOutOfOrder(
                f"attempt {attempt_id}: {kind} cannot follow a later or equal step "
                "(events follow PHASE4_ATTEMPT_TYPES order)"
            )
        known = self._index.get(attempt_id)
        if known is not None and known != attempt_index:
            raise LedgerAttemptOutOfOrder(
                f"attempt {attempt_id} is index {known}, not {attempt_index}"
            )

    def _append(self, payload: Payload, attempt_id: AttemptId) -> RecordedEvent:
        try:
            (recorded,) = self._ledger.record(
                self.stream_id,
                [payload],
                workflow_id=self.workflow_id,
                correlation_id=str(attempt_id),
                expected_version=self._version,
            )
        except ContractError:
            raise  # refused before anything was written: the stream is as it was
        except BaseException:
            self._failed = True  # the store, another writer, an interrupt mid-write
            raise
        self._observe(recorded)
        return recorded

    def emit(self, payload: AttemptPayload) -> RecordedEvent:
        """Append one attempt event (any Phase 4 type but the anchor).

        Raises:
            LedgerAttemptOutOfOrder: the attempt is closed, or the event is out of order.
            ConcurrencyConflict: another writer appended to this stream meanwhile.
        """
        rank = _RANK.get(type(payload))
        if rank is None or rank == _RANK[AttemptAnchorRecorded]:
            raise LedgerAttemptOutOfOrder(
                f"{type(payload).__name__} is not a Phase 4 attempt event; anchors go through "
                "record_anchor"
            )
        self._check(payload.attempt_id, payload.attempt_index, rank, payload.kind)
        return self._append(payload, payload.attempt_id)

    def record_anchor(self, payload: AttemptAnchorRecorded) -> RecordedEvent:
        """Close an attempt with its anchor; nothing for that attempt may follow.

        Raises:
            LedgerAttemptOutOfOrder: the attempt is already closed, or has not emitted its
                ``PlanOutcomeEmitted`` yet.
        """
        attempt_id = payload.attempt_id
        self._check(attempt_id, payload.attempt_index, _RANK[AttemptAnchorRecorded], payload.kind)
        if self._last_rank.get(attempt_id) != _OUTCOME_RANK:
            raise LedgerAttemptOutOfOrder(
                f"attempt {attempt_id}: the anchor must directly follow plan_outcome_emitted"
            )
        if payload.anchor.workflow_id != self.workflow_id:
            raise LedgerAttemptOutOfOrder(
                f"the anchor names workflow {payload.anchor.workflow_id!r}, "
                f"this log writes {self.workflow_id!r}"
            )
        return self._append(payload, attempt_id)
