"""Live subscriptions for the SQLite backend, by polling.

SQLite has no LISTEN/NOTIFY, and a writer in another process cannot signal this one, so a
subscriber polls: it reads everything after the last position it handed out, and when
nothing is new it sleeps ``interval`` seconds before reading again. Polling by position is
enough for exactly-once, in-order delivery because SQLite has one writer at a time and
assigns ``max(position) + 1`` under that lock: commit order is position order, so the
positions a reader can see always form a prefix of the log.

The subscription reads through its own handle on the file (a second :class:`SQLiteStore`,
and so its own connections), so a subscriber thread never shares the writer's connection.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from time import monotonic
from typing import TYPE_CHECKING, Final, Self

from tracebound.errors import ConfigError
from tracebound.events.envelope import RecordedEvent
from tracebound.store.sqlite import SQLiteStore

if TYPE_CHECKING:
    from tracebound.store.port import Subscription, SubscriptionStore

__all__ = ["DEFAULT_INTERVAL", "SQLiteSubscription", "SQLiteSubscriptions", "subscribe"]

DEFAULT_INTERVAL: Final = 0.05
"""Seconds between polls while nothing is new: short enough to feel live, long enough that
an idle subscriber costs next to nothing (one indexed read per interval)."""

_PAGE: Final = 1000  # events held in memory at once: bounded, however long the backlog


class SQLiteSubscription:
    """Every event of a SQLite ledger from ``start`` on, in order, exactly once, then live.

    Args:
        store: the ledger to follow; the subscription opens its own handle on the same file.
        start: the first position to deliver (inclusive).
        interval: seconds to sleep between polls when nothing is new.
    """

    def __init__(
        self, store: SQLiteStore, start: int = 1, *, interval: float = DEFAULT_INTERVAL
    ) -> None:
        if start < 1:
            raise ConfigError(f"positions start at 1, not {start}")
        if interval <= 0:
            raise ConfigError(f"the poll interval must be positive, not {interval}")
        self._reader = SQLiteStore(store.path, create=False)
        self._last = start - 1
        self._interval = interval
        self._buffer: list[RecordedEvent] = []
        self._next = 0
        self._closed = threading.Event()  # set by close(); also what a waiting poll sleeps on
        self._lock = threading.Lock()  # close() from another thread waits for a read to end
        self._reading = False

    @property
    def last_position(self) -> int:
        return self._last

    def __iter__(self) -> Iterator[RecordedEvent]:
        return self

    def __next__(self) -> RecordedEvent:
        while True:
            event = self.next_event(timeout=None)
            if event is not None:
                return event
            if self._closed.is_set():
                raise StopIteration

    def next_event(self, timeout: float | None = None) -> RecordedEvent | None:
        deadline = None if timeout is None else monotonic() + timeout
        while not self._closed.is_set():
            if self._next >= len(self._buffer):
                self._fill()
            if self._next < len(self._buffer):
                event = self._buffer[self._next]
                self._next += 1
                self._last = event.position
                return event
            wait = self._interval
            if deadline is not None:
                wait = min(wait, deadline - monotonic())
                if wait <= 0:
                    return None
            self._closed.wait(wait)  # close() wakes this at once
        return None

    def _fill(self) -> None:
        """Read the next page after the last position handed out."""
        self._buffer = []
        self._next = 0
        with self._lock:
            if self._closed.is_set():
                return
            self._reading = True
        try:
            self._buffer = list(
                self._reader.read_log(start=self._last + 1, stop=self._last + _PAGE)
            )
        finally:
            with self._lock:
                self._reading = False
                if self._closed.is_set():
                    self._reader.close()

    def close(self) -> None:
        """Stop; from another thread too (a read in progress finishes, then closes)."""
        with self._lock:
            self._closed.set()
            if not self._reading:
                self._reader.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SQLiteSubscriptions:
    """The :class:`~tracebound.store.port.SubscriptionStore` capability for a SQLite ledger.

    A wrapper rather than a method on :class:`SQLiteStore`, so the core backend stays free of
    threads and timers; wrap the store where a subscriber is needed.
    """

    def __init__(self, store: SQLiteStore, *, interval: float = DEFAULT_INTERVAL) -> None:
        self.store = store
        self.interval = interval

    def subscribe(self, start: int = 1) -> SQLiteSubscription:
        return SQLiteSubscription(self.store, start, interval=self.interval)


def subscribe(
    store: SQLiteStore, start: int = 1, *, interval: float = DEFAULT_INTERVAL
) -> SQLiteSubscription:
    """Follow ``store``'s log from ``start`` (inclusive): the backlog, then new events."""
    return SQLiteSubscription(store, start, interval=interval)


if TYPE_CHECKING:  # mypy holds the classes to the port's protocols

    def _meets_the_port(
        stores: SQLiteSubscriptions, sub: SQLiteSubscription
    ) -> tuple[SubscriptionStore, Subscription]:
        return stores, sub
