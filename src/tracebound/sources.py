"""Where time, ids and randomness come from: Protocols, injected everywhere.

No module calls ``datetime.now()`` or ``uuid4()`` itself; it is handed a :class:`Clock`
and an :class:`IdSource`. Production code passes :mod:`tracebound.system`'s; tests and
replay pass :class:`FixedClock` and :class:`SequentialIds`, so a recorded run replays to
identical bytes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol
from uuid import UUID

from tracebound.errors import ValidationFailed

__all__ = ["Clock", "FixedClock", "IdSource", "SequentialIds"]


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware, UTC."""
        ...


class IdSource(Protocol):
    def new_id(self) -> UUID:
        """A fresh, unique id."""
        ...


class FixedClock:
    """A clock that starts at ``start`` and advances by ``step`` on every reading.

    Raises:
        ValidationFailed: ``start`` is naive (its instant would depend on the machine's zone).
    """

    def __init__(
        self,
        start: datetime = datetime(2026, 1, 1, tzinfo=UTC),
        step: timedelta = timedelta(milliseconds=1),
    ) -> None:
        if start.tzinfo is None or start.utcoffset() is None:
            raise ValidationFailed("start", "FixedClock needs a timezone-aware start")
        self._next = start.astimezone(UTC)
        self._step = step

    def now(self) -> datetime:
        current = self._next
        self._next = current + self._step
        return current


class SequentialIds:
    """Deterministic UUIDs: a namespace prefix and a counter, for tests and replay.

    The namespace is the UUID's high 64 bits, the counter its low 64 bits.

    Raises:
        ValidationFailed: ``namespace`` is not an int from 0 to 2**64 - 1 (checked here,
            not at the first ``new_id``).
    """

    def __init__(self, namespace: int = 0) -> None:
        if isinstance(namespace, bool) or not isinstance(namespace, int):
            raise ValidationFailed("namespace", f"must be an int, not {type(namespace).__name__}")
        if not 0 <= namespace < 1 << 64:
            raise ValidationFailed("namespace", "must be from 0 to 2**64 - 1")
        self._namespace = namespace
        self._counter = 0

    def new_id(self) -> UUID:
        self._counter += 1
        return UUID(int=(self._namespace << 64) | self._counter)
