"""Which events of a run a take-over abandoned: the one rule every reader of a run applies.

A run paused at a gate is continued by a process that first claims it (``run_resumed``). If
that process dies, a human takes the run over (``tracebound resume RUN --take-over --as
NAME``): a second ``run_resumed`` of the same gate, after which the runner rebuilds the run
as it stood at the first claim and records the steps after the gate again, under the same
step ids. The events the dead claimant recorded between its claim and the take-over stay in
the ledger (they happened, and the chain covers them) but nothing is built on them: they are
*abandoned* by the take-over.

The rule, per run stream, in stream order:

* ``gate_requested`` starts a new gate: no claim yet;
* the first ``run_resumed`` of that gate is the claim; nothing is abandoned;
* every later ``run_resumed`` of the same gate is a take-over: the events after the claim
  before it (the previous claim or take-over) and before it are abandoned by it. A take-over
  of a take-over that died too abandons the first take-over's events, and so on.

A take-over of a gate its process never finished recording (no claim of that gate before
it) abandons nothing: it continues from what that process recorded. Readers decide what an
abandoned event still counts for: step outcomes, blame, repair and harm do not (the
take-over's records say what the run did); costs do (they were spent).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

from tracebound.events.catalog import (
    FINAL_RUN_STATUSES,
    GateRequested,
    RunFinished,
    RunResumed,
    StepRecorded,
)
from tracebound.events.envelope import RecordedEvent

__all__ = ["TAKE_OVER_KINDS", "ClaimCursor", "TakeOver", "TakeOvers", "abandoned_events"]

TAKE_OVER_KINDS: Final = frozenset({"gate_requested", "run_resumed", "run_finished"})
"""The event types that find a take-over (which positions it abandoned). The abandoned
events themselves are the run stream's records of any type between two claims."""


@dataclass(frozen=True, slots=True)
class TakeOver:
    """A take-over claim, and what it abandoned.

    ``position`` is the take-over's ``run_resumed`` in the log; ``after`` the position of the
    claim it took over (the abandoned events lie strictly between the two); ``step_id`` the
    gate both claimed; ``events`` the abandoned events, in order (empty when a reader only
    tracks positions it was given nothing for, e.g. a fold over record dicts).
    """

    position: int
    after: int
    step_id: str
    taken_over_by: str | None
    events: tuple[RecordedEvent, ...] = ()

    @property
    def steps(self) -> tuple[StepRecorded, ...]:
        """The abandoned ``step_recorded`` payloads."""
        return tuple(e.payload for e in self.events if isinstance(e.payload, StepRecorded))

    def as_dict(self) -> dict[str, object]:
        """How the CLI and reports name it: the claim's position, who, and how much."""
        return {
            "position": self.position,
            "taken_over_by": self.taken_over_by,
            "abandoned_steps": len(self.steps),
            "abandoned_events": len(self.events),
        }


@dataclass(slots=True)
class ClaimCursor:
    """One run's current gate and its latest claim, event by event (the rule above).

    Works on plain values, so a fold over record dicts and a reader of typed events share it.
    """

    gate: str | None = None
    claim: int | None = None  # position of the latest claim of ``gate``

    def see(
        self, kind: str, step_id: str | None, position: int, taken_over_by: str | None = None
    ) -> Literal["claim"] | TakeOver | None:
        """``"claim"`` for a gate's first claim, a :class:`TakeOver` (without events) for a
        later one, None for anything else."""
        if kind == "gate_requested":
            self.gate, self.claim = step_id, None
        elif kind == "run_resumed" and self.gate is not None and step_id == self.gate:
            before, self.claim = self.claim, position
            if before is None:
                return "claim"
            return TakeOver(position, before, self.gate, taken_over_by)
        return None


@dataclass
class TakeOvers:
    """Take-overs found in a stream of recorded events (any streams, interleaved), with the
    events each abandoned; :attr:`abandoned` maps each abandoned event's position to the
    take-over that abandoned it.

    Holds, per run, only the events since its latest claim, and drops them when the run
    finishes for good or requests another gate.
    """

    abandoned: dict[int, TakeOver] = field(default_factory=dict)
    found: list[TakeOver] = field(default_factory=list)
    _cursors: dict[str, ClaimCursor] = field(default_factory=dict)
    _since_claim: dict[str, list[RecordedEvent]] = field(default_factory=dict)

    def add(self, e: RecordedEvent) -> TakeOver | None:
        """Read one event; the take-over it is, if it is one."""
        p, stream = e.payload, e.stream_id
        cursor = self._cursors.get(stream)
        if isinstance(p, GateRequested):
            cursor = self._cursors[stream] = ClaimCursor()
            self._since_claim.pop(stream, None)
        if cursor is None:
            return None
        seen = None
        if isinstance(p, GateRequested | RunResumed):
            seen = cursor.see(p.kind, p.step_id, e.position, getattr(p, "taken_over_by", None))
        if seen == "claim":
            self._since_claim[stream] = []
            return None
        if isinstance(seen, TakeOver):
            events = tuple(self._since_claim.get(stream, ()))
            taken = TakeOver(seen.position, seen.after, seen.step_id, seen.taken_over_by, events)
            self.found.append(taken)
            for a in events:
                self.abandoned[a.position] = taken
            self._since_claim[stream] = []
            return taken
        pending = self._since_claim.get(stream)
        if pending is not None:
            pending.append(e)
        if isinstance(p, RunFinished) and p.status in FINAL_RUN_STATUSES:
            self.forget(stream)  # a run that finished for good is never taken over again
        return None

    def forget(self, stream: str) -> None:
        self._cursors.pop(stream, None)
        self._since_claim.pop(stream, None)


def abandoned_events(events: Iterable[RecordedEvent]) -> dict[int, TakeOver]:
    """Position of every event a take-over abandoned -> that take-over (see the module)."""
    found = TakeOvers()
    for e in events:
        found.add(e)
    return found.abandoned
