"""The storage port: what every backend provides, split by capability (CONVENTIONS #3).

* :class:`StreamStore`: append to a stream with optimistic concurrency; read a stream.
* :class:`LogStore`: the global, gap-free ordered log, read by position, raw or typed.
* :class:`CheckpointStore`: signed checkpoints of the log kept beside it.

Every backend (SQLite now; PostgreSQL and JSONL later) passes one conformance suite,
``tests/conformance``. Chaining happens inside the backend's write transaction, because
only there are the position and the stream's previous hash known for certain.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from tracebound.events.envelope import Event, RecordedEvent
from tracebound.events.record import RawRecord
from tracebound.ids import ChainHead, StreamId, StreamVersion

__all__ = [
    "ANY_VERSION",
    "NO_STREAM",
    "AppendRequest",
    "CheckpointStore",
    "LedgerStore",
    "LogStore",
    "MetadataStore",
    "RawRecord",
    "StreamHead",
    "StreamStore",
]

ANY_VERSION: None = None
"""``expected_version`` that skips the optimistic-concurrency check."""

NO_STREAM = 0
"""``expected_version`` meaning "the stream must not exist yet"."""


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Events for one stream, appended only if the stream is at ``expected_version``."""

    stream_id: StreamId
    events: Sequence[Event]
    expected_version: int | None = ANY_VERSION


class StreamHead(NamedTuple):
    """The newest version of a stream and its chain head."""

    version: StreamVersion
    head: ChainHead


@runtime_checkable
class StreamStore(Protocol):
    """Append to and read one stream."""

    def append(
        self,
        stream_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = ANY_VERSION,
    ) -> list[RecordedEvent]:
        """Append durably; return the recorded events once they are on disk.

        Raises:
            ConcurrencyConflict: the stream is not at ``expected_version``.
        """
        ...

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[RecordedEvent]:
        """Append several streams' events in one transaction: all or none."""
        ...

    def read_stream(
        self, stream_id: str, *, from_version: int = 1, to_version: int | None = None
    ) -> Iterator[RecordedEvent]:
        """Yield a stream's events in version order, in constant memory."""
        ...

    def stream_head(self, stream_id: str) -> StreamHead | None:
        """The stream's newest version and chain head, or None if it has no events."""
        ...


@runtime_checkable
class LogStore(Protocol):
    """The global ordered log."""

    def read_log(self, *, start: int = 1, stop: int | None = None) -> Iterator[RecordedEvent]:
        """Yield events with ``start <= position <= stop`` in order, in constant memory."""
        ...

    def read_raw(self, *, start: int = 1, stop: int | None = None) -> Iterator[RawRecord]:
        """Like :meth:`read_log` but undecoded: the bytes that were hashed."""
        ...

    def size(self) -> int:
        """The number of events in the log, which is also the last position."""
        ...


@runtime_checkable
class CheckpointStore(Protocol):
    """Signed checkpoints (C2SP signed notes) kept with the log."""

    def save_checkpoint(self, size: int, note: str) -> None:
        """Keep a signed checkpoint for tree size ``size``."""
        ...

    def latest_checkpoint(self) -> str | None:
        """The signed note of the largest checkpoint, or None."""
        ...

    def checkpoints(self) -> list[tuple[int, str]]:
        """All kept checkpoints as (size, note), smallest first."""
        ...


@runtime_checkable
class MetadataStore(Protocol):
    """Small named settings kept with the log (its origin, its format version)."""

    def get_meta(self, key: str) -> str | None:
        """The value stored under ``key``, or None."""
        ...

    def set_meta(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``, replacing any previous value."""
        ...


@runtime_checkable
class LedgerStore(StreamStore, LogStore, CheckpointStore, MetadataStore, Protocol):
    """Everything the ledger needs from one backend."""

    url: str

    def close(self) -> None:
        """Release connections; further use raises StoreClosed."""
        ...
