"""The JSONL backend: the ledger as a directory of append-only text files.

Why a second embedded backend: here the files *are* the evidence. An auditor reads them with
``jq`` and re-hashes a record with a few lines of any language; nothing needs SQLite to open
them. The hashed bytes are the same as every other backend's (``events/record.py``), so a
log copied between backends keeps its hashes, its Merkle root and its signatures.

Layout (``docs/adr/0006-jsonl-layout.md``, ``docs/jsonl.md``)::

    <dir>/               0700
      log.jsonl          0600  one line per event:
                               {"batch":[F,L],"hash":"<hex>","record":<the hashed bytes>}
      checkpoints.jsonl  0600  one line per signed checkpoint: {"note":"…","size":N}
      meta.json          0600  small settings, replaced atomically
      repairs.jsonl      0600  one line per torn tail cut off by ``tracebound repair``
      nodes-<L>.bin      0600  stored Merkle nodes of level L (32 bytes each, in index
                               order): derived from the log, checked on every use
      lock               0600  the flock that serialises writers across processes
                               (waiters queue on a flock of <dir> itself)

An event's position is its line number. The record is inlined verbatim after a fixed-shape
prefix, so the hashed bytes are recovered by slicing the line, never by re-encoding it.

Writers take an exclusive ``flock``, bring the in-memory index up to date with whatever other
processes appended, write all lines of a request with one ``write`` and ``fsync`` before they
return. Every line names its batch's first and last position, so a crash in the middle of a
batch leaves a tail that is recognisably unfinished: a *torn tail*. It is reported, never
silently dropped or kept, until ``tracebound repair`` cuts it off and keeps the bytes.

The index is small on purpose: the offset of every ``_STRIDE``-th line, and per stream its
head plus the offset of every ``_STRIDE``-th version. Memory is O(streams + events/stride);
reads seek to the nearest mark and stream lines from there.
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import os
import re
import threading
import time
from array import array
from binascii import hexlify
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol, TypeVar

import orjson

from tracebound.canonical import canonical_bytes
from tracebound.errors import (
    CanonicalizationError,
    ConcurrencyConflict,
    ConfigError,
    DamageKind,
    IntegrityError,
    LedgerDamaged,
    ProofError,
    StorageError,
    StoreBusy,
    StoreClosed,
    StoreNotFound,
)
from tracebound.events.envelope import RecordedEvent, format_timestamp
from tracebound.events.record import decode_record
from tracebound.ids import ChainHead, StreamVersion
from tracebound.integrity.chain import GENESIS
from tracebound.integrity.verify import PAGE
from tracebound.store._chaining import (
    ChainedAppends,
    PreparedRequest,
    chain_rows,
    recorded_events,
)
from tracebound.store.files import fsync_dir
from tracebound.store.port import (
    RawRecord,
    StreamHead,
    check_import,
)

__all__ = [
    "CHECKPOINTS_FILE",
    "FORMAT",
    "LOG_FILE",
    "META_FILE",
    "REPAIRS_FILE",
    "JsonlStore",
    "Repair",
    "TornTail",
]

LOG_FILE: Final = "log.jsonl"
CHECKPOINTS_FILE: Final = "checkpoints.jsonl"
META_FILE: Final = "meta.json"
REPAIRS_FILE: Final = "repairs.jsonl"
LOCK_FILE: Final = "lock"
NODES_FILE: Final = "nodes-{level}.bin"
FORMAT: Final = "tracebound-jsonl/1"
_FORMAT_KEY: Final = "format"

_STRIDE: Final = 256  # lines (and stream versions) between index marks
_BUFFER: Final = 1 << 16
_REFRESH_TRIES: Final = 5
DEFAULT_LOCK_TIMEOUT: Final = 60.0  # seconds, as SQLite's busy_timeout
_LOCK_PAUSE_MIN: Final = 0.0005
_LOCK_PAUSE_MAX: Final = 0.01  # seconds between tries at a held flock (SQLite's busy
# handler sleeps the same way: flock has no timeout, and a signal would be the caller's)
_QUEUE_PATIENCE: Final = 1.0  # seconds a waiter stays behind the queue's holder (_flock_within)

# The fixed-shape start of a log line. Keys are in RFC 8785 order, so a line is itself
# canonical JSON, and the record starts right after `"record":`.
_FRAME: Final = re.compile(
    rb'\{"batch":\[([1-9][0-9]{0,18}),([1-9][0-9]{0,18})\],"hash":"([0-9a-f]{64})","record":'
)
_LINE: Final = b'{"batch":[%d,%d],"hash":"%s","record":%s}\n'

# What a line that is not a ledger line becomes for `verify`: columns that match nothing
# and an empty hash, so verify's own checks name the damage (MALFORMED or TAMPER).
_NO_COLUMNS: Final = ("", 0, "", None, "", 0, b"")


@dataclass(frozen=True, slots=True)
class TornTail:
    """An unfinished write at the end of one of the store's files: what a crash leaves.

    ``position`` is the log position the first torn record would have had (``None`` for
    the checkpoint file, which has no positions). ``covered`` is the largest checkpoint
    size stored when the tail was found: a crash cannot tear events a checkpoint covers.
    """

    file: str
    offset: int
    length: int
    position: int | None
    reason: str
    covered: int = 0

    @property
    def crash(self) -> bool:
        """Whether a crash can explain this tail (else the file was cut by hand)."""
        return self.position is None or self.position > self.covered

    def damage(self) -> LedgerDamaged:
        """The typed error every read and append raises while this tail is there."""
        if not self.crash:
            return LedgerDamaged(
                DamageKind.TRUNCATION,
                self.position,
                f"{self.file} ends inside position {self.position}, at byte offset "
                f"{self.offset}, but a stored checkpoint covers {self.covered} events: the "
                "file was cut short, which a crash cannot do",
            )
        return LedgerDamaged(
            DamageKind.TORN_TAIL,
            self.position,
            f"{self.file} ends with {self.length} byte(s) of an unfinished write at byte "
            f"offset {self.offset} ({self.reason}); `tracebound repair --yes` cuts them off "
            "and keeps them beside the file",
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "offset": self.offset,
            "length": self.length,
            "position": self.position,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Repair:
    """One torn tail cut off: where, how much, the digest of the bytes and where they went."""

    at: str
    file: str
    offset: int
    length: int
    position: int | None
    sha256: str
    kept: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "file": self.file,
            "offset": self.offset,
            "length": self.length,
            "position": self.position,
            "sha256": self.sha256,
            "kept": self.kept,
            "reason": self.reason,
        }


class _Stream:
    """What the index keeps per stream: its head, and where to start reading it."""

    __slots__ = ("head", "last", "marks", "version")

    def __init__(self) -> None:
        self.version = 0
        self.head: bytes = GENESIS
        self.last = 0  # position of the newest event
        self.marks: list[tuple[int, int, int]] = []  # (version, position, offset)


class _ReadPlan(NamedTuple):
    first: int
    last: int
    position: int  # where reading starts (an index mark at or before `first`)
    offset: int
    damage: LedgerDamaged | None  # raised after the last record, when the range reaches it


class _Shrunk(Exception):
    """The log got shorter while it was being indexed (a repair, or a hand edit)."""


@contextmanager
def _io(what: str) -> Iterator[None]:
    """Turn OS errors into StorageError: no backend exception escapes the API."""
    try:
        yield
    except OSError as exc:
        raise StorageError(f"jsonl {what} failed: {exc}") from exc


def _try_flock(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _flock_within(fd: int, mode: int, timeout: float | None, queue: int | None = None) -> bool:
    """``flock(fd, mode)``, waiting at most ``timeout`` seconds (None: as long as it takes).

    False if another process held it all that time. An uncontended lock costs one call
    (three with ``queue``); a held one is tried again after pauses growing to
    ``_LOCK_PAUSE_MAX``.

    ``queue`` (an exclusive flock on another file) makes the wait fair: without it, a
    process that lets go and at once wants the lock again takes it back before the others
    wake from their pause, again and again (seconds of waiting for them under a busy
    writer). A waiter holds ``queue`` while it waits, so a process coming back must queue
    behind it; whoever waited ``_QUEUE_PATIENCE`` also tries the lock itself, so one that
    stopped while it held the queue holds the others up that long, not until they time out.
    """
    start = time.monotonic()
    deadline = math.inf if timeout is None else start + timeout
    queued = False
    pause = _LOCK_PAUSE_MIN
    try:
        while True:
            if queue is not None and not queued:
                queued = _try_flock(queue, fcntl.LOCK_EX)
            impatient = time.monotonic() - start >= _QUEUE_PATIENCE
            if (queue is None or queued or impatient) and _try_flock(fd, mode):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # The queue's holder is next, and the lock idles until it looks again: it looks
            # often (one process does), the others back off.
            time.sleep(min(_LOCK_PAUSE_MIN if queued else pause, left))
            pause = min(pause * 2, _LOCK_PAUSE_MAX)
    finally:
        if queued and queue is not None:
            fcntl.flock(queue, fcntl.LOCK_UN)


def _fd_ident(fd: int) -> tuple[int, int]:
    """The (device, inode) of the file an open descriptor holds."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_undone_on_failure(fd: int, data: bytes, end: int) -> None:
    """Write and fsync ``data``; if that fails (a full disk), cut the file back to ``end``.

    The caller is told the write failed, so none of it may stay: a part of a line or of a
    node left behind would read as damage (a torn tail) the next time the file is read.
    The caller holds the write lock.
    """
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except OSError:
        with suppress(OSError):  # then the reader reports the leftover bytes
            os.ftruncate(fd, end)
            os.fsync(fd)
        raise


def _split(line: bytes) -> tuple[int, int, bytes, bytes] | None:
    """(first, last, hash, record bytes) of a log line, or None if it is not one."""
    m = _FRAME.match(line)
    if m is None or not line.endswith(b"}\n"):
        return None
    return int(m[1]), int(m[2]), bytes.fromhex(m[3].decode("ascii")), line[m.end() : -2]


def _frame(line: bytes) -> tuple[int, int] | None:
    """The batch (first, last) of a log line, or None if it is not one: all a scan needs."""
    m = _FRAME.match(line)
    if m is None or not line.endswith(b"}\n"):
        return None
    return int(m[1]), int(m[2])


_SID_KEY: Final = b',"stream_id":'
_VERSION_KEY: Final = b',"stream_version":'


def _stream_of(body: bytes) -> tuple[str, int] | None:
    """The stream id and version a record states, read from its suffix without parsing the
    payload. Inside a JSON string a quote is escaped, so the last ``,"stream_id":`` in the
    bytes is the record's own key, never part of a value."""
    i = body.rfind(_SID_KEY)
    j = body.find(_VERSION_KEY, i)
    k = body.find(b",", j + len(_VERSION_KEY))
    if i < 0 or j < 0 or k < 0:
        return None
    try:
        sid = orjson.loads(body[i + len(_SID_KEY) : j])
        version = int(body[j + len(_VERSION_KEY) : k])
    except (orjson.JSONDecodeError, ValueError):
        return None
    if type(sid) is not str:
        return None
    return sid, version


def _row(position: int, line: bytes) -> tuple[Any, ...]:
    """A line as a :class:`RawRecord`-shaped tuple, whatever it holds: `verify` judges it.

    JSONL keeps no columns beside the record, so the columns come from the record itself
    (they always agree with it); the position is the line number, which is what a moved,
    removed or duplicated line changes.
    """
    parts = _split(line)
    if parts is None:
        return (position, *_NO_COLUMNS, b"", line.rstrip(b"\n"))
    _, _, digest, body = parts
    try:
        d = orjson.loads(body)
        return (
            position,
            d["stream_id"],
            d["stream_version"],
            d["event_type"],
            d["workflow_id"],
            d["timestamp"],
            d["schema_version"],
            bytes.fromhex(d["prev_hash"]),
            digest,
            body,
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError):
        return (position, *_NO_COLUMNS, digest, body)


class _Filed(NamedTuple):
    """Where a line's record says it belongs, read without its payload model."""

    position: int
    stream_id: str
    stream_version: int


class _Named(Protocol):
    @property
    def stream_id(self) -> str: ...

    @property
    def stream_version(self) -> int: ...


_FiledT = TypeVar("_FiledT", bound=_Named)


def _filed_as(position: int, offset: int, line: bytes) -> _Filed:
    """The stream and version a line's record names (no payload model is needed: the
    record may be of a type this process does not know)."""
    parts = _split(line)
    try:
        record = orjson.loads(parts[3]) if parts is not None else None
        sid, version = record["stream_id"], record["stream_version"]  # type: ignore[index]
    except (orjson.JSONDecodeError, TypeError, KeyError):
        sid = version = None
    if not isinstance(sid, str) or type(version) is not int:
        raise LedgerDamaged(
            DamageKind.MALFORMED,
            position,
            f"line {position} of {LOG_FILE} (byte offset {offset}) is not a ledger line",
        )
    return _Filed(position, sid, version)


def _event(position: int, offset: int, line: bytes) -> RecordedEvent:
    """Decode one line into a typed event, or raise the damage that stops it."""
    parts = _split(line)
    if parts is None:
        raise LedgerDamaged(
            DamageKind.MALFORMED,
            position,
            f"line {position} of {LOG_FILE} (byte offset {offset}) is not a ledger line",
        )
    try:
        event = decode_record(parts[3], parts[2])
    except IntegrityError as exc:
        raise LedgerDamaged(
            DamageKind.MALFORMED,
            position,
            f"line {position} of {LOG_FILE} (byte offset {offset}): {exc}",
        ) from exc
    if event.position != position:
        raise LedgerDamaged(
            DamageKind.REORDER,
            position,
            f"the record on line {position} says it is position {event.position}",
        )
    return event


def _read_lines(path: Path, start: int, stop: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line) for the bytes in [start, stop); the last may lack its newline.

    Raises _Shrunk if the file ends before ``stop``: someone cut it meanwhile.
    """
    offset = start
    if start >= stop:
        return
    with open(path, "rb", buffering=_BUFFER) as f:  # noqa: PTH123 - raw fd-level reads
        f.seek(start)
        for line in f:
            if offset + len(line) > stop:
                line = line[: stop - offset]  # noqa: PLW2901 - bytes past the snapshot
            yield offset, line
            offset += len(line)
            if offset >= stop:
                return
    if offset < stop:
        raise _Shrunk


class JsonlStore(ChainedAppends):
    """A ledger in a directory of JSONL files. Safe to share between threads and processes.

    Args:
        directory: the store directory (created with mode 0700 if ``create``).
        create: create the directory and its files if there is no ledger there yet.
        lock_timeout: seconds a read or write waits for the ``flock`` another process holds
            (a writer mid-append, or one stopped or hung) before raising StoreBusy; None
            waits as long as it takes.

    Opening never raises for damage: a torn tail or a broken line is reported by the reads
    and appends that meet it, and by ``Ledger.verify``, so that `verify` and `repair` can
    still open a damaged store.
    """

    # Group commit may run a group's commit in any appending thread: the store keeps one
    # descriptor and one index, whichever thread appends.
    _commit_in_any_thread: Final = True

    def __init__(
        self,
        directory: str | Path,
        *,
        create: bool = True,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
    ) -> None:
        d = Path(directory)
        if d.exists() and not d.is_dir():
            raise ConfigError(f"a JSONL store is a directory, and {d} is a file")
        self.path = d
        self.url = f"jsonl:///{d.resolve()}"
        self._log_path = d / LOG_FILE
        self._lock_path = d / LOCK_FILE
        self._lock_timeout = lock_timeout
        self._mutex = threading.RLock()  # the index, the fds and every flock call
        self._closed = False
        with _io("open"):
            if not self._log_path.exists():
                self._check_not_gone()
                if not create:
                    raise StoreNotFound(
                        f"no ledger at {d}; run `tracebound init` first", place=("jsonl", str(d))
                    )
                self._create()
            fmt = self._read_meta().get(_FORMAT_KEY)
            if fmt is not None and fmt != FORMAT:
                raise ConfigError(f"{d} holds a {fmt!r} ledger; this version reads {FORMAT!r}")
            self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            # Waiters for the lock queue on the folder's own flock (_flock_within): a
            # folder needs no new file, and it is not replaced as the lock file can be.
            self._queue_fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            self._log_fd = os.open(self._log_path, os.O_WRONLY | os.O_APPEND)
            # Which file each descriptor holds: fixed for the descriptor's life, so it is
            # read once here instead of once per append (an fstat each).
            self._lock_fd_ident = _fd_ident(self._lock_fd)
            self._log_fd_ident = _fd_ident(self._log_fd)
        self._reset(None)
        try:
            with self._mutex, _io("open"):
                self._refresh(locked=False)
        except BaseException:
            self.close()
            raise

    def _check_not_gone(self) -> None:
        """Refuse a folder that holds a ledger's files but no log: its log was deleted.

        ``_create`` writes the log before any of these files, so they are never left
        without it by a crash; making a new, empty log beside them (``init`` did, saying
        "Already initialised") would pass off the loss as a fresh start.

        Raises:
            LedgerDamaged: TRUNCATION at position 1, naming the files that are left.
        """
        left = [f for f in (META_FILE, CHECKPOINTS_FILE, REPAIRS_FILE) if (self.path / f).exists()]
        if left:
            raise LedgerDamaged(
                DamageKind.TRUNCATION,
                1,
                f"{LOG_FILE} is gone from {self.path}, which still holds {', '.join(left)}: "
                "the ledger's events are gone; restore the folder from a copy (a new ledger "
                "goes in a new folder)",
            )

    def _create(self) -> None:
        fresh = not self.path.exists()
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if fresh:
            fsync_dir(self.path.parent)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            self._flock(fd, fcntl.LOCK_EX)  # two processes creating at once: one wins
            if not self._log_path.exists():
                log = os.open(self._log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.fsync(log)
                os.close(log)
                if not (self.path / META_FILE).exists():
                    self._write_meta({_FORMAT_KEY: FORMAT})
                fsync_dir(self.path)
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            for fd in (self._lock_fd, self._queue_fd, self._log_fd):
                with suppress(OSError):  # best effort: the store is unusable either way
                    os.close(fd)

    def __enter__(self) -> JsonlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"{self.url} is closed")

    # -- locks ---------------------------------------------------------------------------

    def _flock(self, fd: int, mode: int, queue: int | None = None) -> None:
        """flock ``fd`` within ``lock_timeout`` (waiting in turn behind ``queue``).

        Raises:
            StoreBusy: another process held the lock all that time.
        """
        if not _flock_within(fd, mode, self._lock_timeout, queue):
            raise StoreBusy(
                str(self._lock_path),
                self._lock_timeout,
                f"if it is stopped or hung, find it among the processes `fuser -v "
                f"{self._lock_path}` lists (on Linux, /proc/locks names the holder's PID), "
                "then let it go on (kill -CONT PID) or end it; a writer ended mid-append "
                "leaves a torn tail, which `tracebound repair` cuts off",
            )

    def _locked_fd(self, mode: int) -> int:
        """flock the lock file, reopening it if it was replaced (a lock on a deleted inode
        would exclude nobody)."""
        while True:
            self._flock(self._lock_fd, mode, self._queue_fd)
            try:
                current = self._lock_path.stat()
            except FileNotFoundError:
                current = None
            if current is not None and (current.st_dev, current.st_ino) == self._lock_fd_ident:
                return self._lock_fd
            os.close(self._lock_fd)
            self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            self._lock_fd_ident = _fd_ident(self._lock_fd)

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """The cross-process write lock. Callers hold ``_mutex``: flock locks belong to the
        open file, so two threads of one process must never flock it at the same time."""
        fd = self._locked_fd(fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    @contextmanager
    def _shared(self) -> Iterator[None]:
        fd = self._locked_fd(fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    # -- the index -----------------------------------------------------------------------

    def _reset(self, ident: tuple[int, int] | None) -> None:
        self._ident = ident
        self._size = 0  # positions in complete batches
        self._end = 0  # byte offset after the last complete batch
        self._seen = 0  # file size when last indexed
        self._offsets: array[int] = array("q")  # offset of line 1 + k*_STRIDE
        self._torn: TornTail | None = None
        self._streams: dict[str, _Stream] | None = None  # built on first need
        self._stream_damage: LedgerDamaged | None = None

    def _refresh(self, *, locked: bool) -> None:
        """Index what other processes appended since last time (caller holds ``_mutex``).

        The file size is read under the flock, then the new bytes are read without it:
        every byte below a size seen under the lock was written by a writer that has since
        released it (finished and fsynced, or died), so those bytes no longer change, and
        an unfinished batch among them is a crash's torn tail, not a write in progress.
        """
        for _ in range(_REFRESH_TRIES):
            if locked:
                st = self._log_path.stat()
            else:
                with self._shared():
                    st = self._log_path.stat()
            ident = (st.st_dev, st.st_ino)
            if ident != self._ident or st.st_size < self._end:
                self._reset(ident)  # replaced, or cut below what was indexed: start over
            if st.st_size == self._seen:
                return
            try:
                self._scan(st.st_size)
            except _Shrunk:
                self._reset(None)
                continue
            self._seen = st.st_size
            return
        raise StorageError(f"{self._log_path} keeps shrinking while it is being indexed")

    def _scan(self, stop: int) -> None:
        """Index complete batches in [end, stop); what follows the last one is a torn tail.

        The batch that ends on the file's last line is held back until the loop knows it is
        the last, because a last line must also be valid JSON (checked only there: a crash
        can only tear the end, and parsing every line would double the cost of a scan).
        """
        position = self._size
        pending: list[tuple[int, int, bytes]] = []  # lines of a batch not yet complete
        ready: list[tuple[int, int, bytes]] = []  # a complete batch, held back one line
        fragment = -1
        for offset, line in _read_lines(self._log_path, self._end, stop):
            if not line.endswith(b"\n"):
                fragment = offset
                break
            if ready:
                self._commit(ready)
                ready = []
            position += 1
            pending.append((position, offset, line))
            frame = _frame(line)
            if frame is not None and frame[0] <= position == frame[1]:
                ready, pending = pending, []
        bad_json = False
        if ready:
            if fragment < 0 and not _is_json(ready[-1][2]):
                pending, bad_json = ready, True
            else:
                self._commit(ready)
        self._torn = None
        if not pending and fragment < 0:
            return
        covered = self._checkpointed()
        if pending and pending[0][0] <= covered:
            # A crash cannot tear events a checkpoint already covers: these lines were
            # edited, so they stay in the log for `verify` to judge, not for repair to cut.
            self._commit(pending)
            pending = []
        if pending or fragment >= 0:
            start = pending[0][1] if pending else fragment
            reason = _torn_reason(pending, fragment, bad_json=bad_json)
            self._torn = TornTail(LOG_FILE, start, stop - start, self._size + 1, reason, covered)

    def _commit(self, lines: Sequence[tuple[int, int, bytes]]) -> None:
        for position, offset, line in lines:
            if (position - 1) % _STRIDE == 0:
                self._offsets.append(offset)
            if self._streams is not None:
                self._index_stream(position, offset, line)
        position, offset, line = lines[-1]
        self._size = position
        self._end = offset + len(line)

    def _index_stream(self, position: int, offset: int, line: bytes) -> None:
        m = _FRAME.match(line)
        # The record's own stream key is the last one in the line, as it is in the record.
        stream = _stream_of(line) if m is not None and line.endswith(b"}\n") else None
        if m is None or stream is None:
            if self._stream_damage is None:
                self._stream_damage = LedgerDamaged(
                    DamageKind.MALFORMED,
                    position,
                    f"line {position} of {LOG_FILE} (byte offset {offset}) is not a ledger "
                    "record, so which stream it belongs to is unknown",
                )
            return
        self._note_stream(stream[0], stream[1], bytes.fromhex(m[3].decode()), position, offset)

    def _note_stream(
        self, sid: str, version: int, digest: bytes, position: int, offset: int
    ) -> None:
        assert self._streams is not None
        st = self._streams.get(sid)
        if st is None:
            st = self._streams[sid] = _Stream()
        if not st.marks or version >= st.marks[-1][0] + _STRIDE:
            st.marks.append((version, position, offset))
        st.version, st.head, st.last = version, digest, position

    def _ensure_streams(self) -> dict[str, _Stream]:
        """The per-stream index, built on first need: verify workers never need it."""
        if self._streams is None:
            self._streams = {}
            position = 0
            try:
                for offset, line in _read_lines(self._log_path, 0, self._end):
                    position += 1
                    self._index_stream(position, offset, line)
            except _Shrunk:
                self._reset(None)  # cut below what was indexed: the next refresh starts over
                raise StorageError(
                    f"{self._log_path} was cut short while it was being indexed; try again"
                ) from None
            except BaseException:
                self._streams, self._stream_damage = None, None  # never keep half an index
                raise
        return self._streams

    def _checkpointed(self) -> int:
        """The largest stored checkpoint size, best effort (used only to judge a tail)."""
        try:
            data = (self.path / CHECKPOINTS_FILE).read_bytes()
        except FileNotFoundError:
            return 0
        best = 0
        for line in data.split(b"\n")[:-1]:
            try:
                size = orjson.loads(line)["size"]
            except (orjson.JSONDecodeError, KeyError, TypeError, IndexError):
                continue
            if type(size) is int:
                best = max(best, size)
        return best

    def _for_streams(self) -> dict[str, _Stream]:
        """Refresh and return the stream index, or raise the damage that makes it unknown."""
        self._check_open()
        self._refresh(locked=False)
        streams = self._ensure_streams()
        if self._stream_damage is not None:
            raise self._stream_damage
        return streams

    # -- appends -------------------------------------------------------------------------

    def _append_prepared(
        self, batches: Sequence[Sequence[PreparedRequest]]
    ) -> list[list[RecordedEvent] | ConcurrencyConflict]:
        """Append several independent all-or-nothing batches with one write and one fsync.

        This is the seam for group commit: a layer that queues many callers' requests can
        hand them over together and pay for one fsync. A batch whose expected version does
        not hold gets its ConcurrencyConflict back and writes nothing; the others go ahead.
        Each batch's lines carry its own first and last position, so a crash in the middle
        of the write tears at most the batches that were not completely written.
        """
        with self._mutex, _io("append"):
            self._check_open()
            with self._exclusive():
                self._refresh(locked=True)
                if self._torn is not None:
                    raise self._torn.damage()
                streams = self._ensure_streams()
                if self._stream_damage is not None:
                    raise self._stream_damage
                heads: dict[str, tuple[int, bytes]] = {}
                chunks: list[bytes] = []
                written: list[tuple[int, bytes, str, int, bytes]] = []
                results: list[list[RecordedEvent] | ConcurrencyConflict] = []
                position = self._size

                def head_of(sid: str) -> tuple[int, bytes]:
                    """A stream's head: the group's batches so far first, then the index."""
                    head = heads.get(sid)
                    if head is not None:
                        return head
                    stream = streams.get(sid)
                    return (0, GENESIS) if stream is None else (stream.version, stream.head)

                # One loop for every batch (this runs once per request of a group, under
                # the write lock): chain, frame each line with its batch's first and last
                # position, and update the group's heads only once the batch fits.
                add_chunk = chunks.append
                add_written = written.append
                for batch in batches:
                    try:
                        done = chain_rows(batch, position, head_of)
                    except ConcurrencyConflict as conflict:
                        results.append(conflict)
                        continue
                    first = position + 1
                    last = done.position
                    rows = done.rows
                    for row in rows:
                        body = row[9]
                        if b"\n" in body:  # RFC 8785 escapes control characters; guard it
                            raise CanonicalizationError(
                                "a record's canonical bytes contain a newline"
                            )
                        digest = row[8]
                        line = _LINE % (first, last, hexlify(digest), body)
                        add_chunk(line)
                        add_written((row[0], line, row[1], row[2], digest))
                    results.append(recorded_events(batch, rows))
                    heads.update(done.heads)
                    position = last
                if chunks:
                    self._write_durably(b"".join(chunks))
                    self._index_written(written)
        return results

    def _write_durably(self, data: bytes) -> None:
        """One write, one fsync; on failure cut the file back so nothing half-written stays."""
        if self._log_fd_ident != self._ident:  # the file was replaced: follow it
            os.close(self._log_fd)
            self._log_fd = os.open(self._log_path, os.O_WRONLY | os.O_APPEND)
            self._log_fd_ident = _fd_ident(self._log_fd)
        try:
            _write_undone_on_failure(self._log_fd, data, self._end)
        except OSError as exc:
            raise StorageError(
                f"append to {self._log_path} failed and was rolled back: {exc}"
            ) from exc

    def _index_written(self, written: Sequence[tuple[int, bytes, str, int, bytes]]) -> None:
        offset = self._end
        offsets = self._offsets
        note_stream = self._note_stream
        for position, line, sid, version, digest in written:
            if (position - 1) % _STRIDE == 0:
                offsets.append(offset)
            note_stream(sid, version, digest, position, offset)
            offset += len(line)
        self._size = written[-1][0]
        self._end = self._seen = offset

    # -- import (``tracebound copy``) ----------------------------------------------------

    def import_raw(self, records: Sequence[RawRecord]) -> None:
        """Write records verbatim, as another store holds them: see :class:`ImportStore`.

        The records become one batch (their lines name its first and last position), written
        with one ``write`` and one ``fsync`` under the flock, exactly like an append: a crash
        mid-import leaves a torn tail that ``tracebound repair`` cuts, never half a batch
        that reads as whole. The checks (``check_import``) run under the flock on the
        freshly refreshed index.
        """
        if not records:
            return
        first, last = records[0].position, records[-1].position
        written: list[tuple[int, bytes, str, int, bytes]] = []
        for r in records:
            if b"\n" in r.body:  # the line format holds one record per line
                raise CanonicalizationError(f"record {r.position}'s bytes contain a newline")
            line = _LINE % (first, last, r.hash.hex().encode(), r.body)
            written.append((r.position, line, r.stream_id, r.stream_version, r.hash))
        with self._mutex, _io("import"):
            self._check_open()
            with self._exclusive():
                self._refresh(locked=True)
                if self._torn is not None:
                    raise self._torn.damage()
                streams = self._ensure_streams()
                if self._stream_damage is not None:
                    raise self._stream_damage

                def head(sid: str) -> tuple[int, bytes] | None:
                    st = streams.get(sid)
                    return None if st is None else (st.version, st.head)

                check_import(self._size, records, head)
                self._write_durably(b"".join(line for _, line, _, _, _ in written))
                self._index_written(written)

    # -- reads ---------------------------------------------------------------------------

    def size(self) -> int:
        """Events in the log; a torn tail counts as one more, so reading to the end meets it."""
        with self._mutex, _io("read"):
            self._check_open()
            self._refresh(locked=False)
            return self._size + (self._torn is not None)

    def stream_head(self, stream_id: str) -> StreamHead | None:
        with self._mutex, _io("read"):
            streams = self._for_streams()
            if self._torn is not None:
                raise self._torn.damage()  # the torn batch may have moved this head
            st = streams.get(stream_id)
        return None if st is None else StreamHead(StreamVersion(st.version), ChainHead(st.head))

    def _read_plan(self, start: int, stop: int | None) -> _ReadPlan:
        with self._mutex, _io("read"):
            self._check_open()
            self._refresh(locked=False)
            first = max(start, 1)
            last = self._size if stop is None else min(stop, self._size)
            torn = self._torn
            damage = None
            if (
                torn is not None
                and torn.position is not None
                and (stop is None or stop >= torn.position)
            ):
                damage = torn.damage()
            if first > last:
                return _ReadPlan(first, last, first, 0, damage)
            k = (first - 1) // _STRIDE
            return _ReadPlan(first, last, k * _STRIDE + 1, self._offsets[k], damage)

    def _lines(self, plan: _ReadPlan) -> Iterator[tuple[int, int, bytes]]:
        """(position, offset, line) for positions first..last, streamed from the file."""
        if plan.first > plan.last:
            return
        position, offset = plan.position, plan.offset
        with _io("read"), open(self._log_path, "rb", buffering=_BUFFER) as f:  # noqa: PTH123
            f.seek(offset)
            for line in f:
                if position >= plan.first:
                    yield position, offset, line
                if position >= plan.last:
                    return
                position += 1
                offset += len(line)
        raise LedgerDamaged(
            DamageKind.TRUNCATION,
            position,
            f"{LOG_FILE} ends at byte offset {offset}, before position {plan.last}",
        )

    def read_raw(self, *, start: int = 1, stop: int | None = None) -> Iterator[RawRecord]:
        plan = self._read_plan(start, stop)
        for position, _, line in self._lines(plan):
            yield RawRecord(*_row(position, line))
        if plan.damage is not None:
            raise plan.damage

    def read_raw_pages(
        self, *, start: int = 1, stop: int | None = None, page_size: int = PAGE
    ) -> Iterator[list[tuple[Any, ...]]]:
        """:meth:`read_raw` as pages of plain tuples in :class:`RawRecord` field order.

        The bulk reader behind ``verify``. A torn tail is raised only when the page after
        the last intact one is asked for, so damage earlier in the log is reported first.
        """
        plan = self._read_plan(start, stop)
        page: list[tuple[Any, ...]] = []
        for position, _, line in self._lines(plan):
            page.append(_row(position, line))
            if len(page) >= page_size:
                yield page
                page = []
        if page:
            yield page
        if plan.damage is not None:
            raise plan.damage

    def read_log(self, *, start: int = 1, stop: int | None = None) -> Iterator[RecordedEvent]:
        plan = self._read_plan(start, stop)
        for position, offset, line in self._lines(plan):
            yield _event(position, offset, line)
        if plan.damage is not None:
            raise plan.damage

    def read_stream(
        self, stream_id: str, *, from_version: int = 1, to_version: int | None = None
    ) -> Iterator[RecordedEvent]:
        return self._stream_scan(stream_id, from_version, to_version, _event)

    def stream_positions(
        self, stream_id: str, from_version: int, to_version: int
    ) -> list[tuple[int, int]]:
        """Read without the records' payload models: they may be of types this process
        does not know (see :class:`~tracebound.store.port.StreamIndex`)."""
        return [
            (f.stream_version, f.position)
            for f in self._stream_scan(stream_id, from_version, to_version, _filed_as)
        ]

    def _stream_scan(
        self,
        stream_id: str,
        from_version: int,
        to_version: int | None,
        parse: Callable[[int, int, bytes], _FiledT],
    ) -> Iterator[_FiledT]:
        with self._mutex, _io("read"):
            streams = self._for_streams()
            torn = self._torn
            st = streams.get(stream_id)
            if st is not None:
                lo = max(from_version, 1)
                hi = st.version if to_version is None else min(to_version, st.version)
                i = max(bisect_right(st.marks, lo, key=lambda m: m[0]) - 1, 0)
                mark, last = st.marks[i], st.last
        if st is not None and lo <= hi:
            yield from self._stream_lines(stream_id, lo, hi, mark, last, parse=parse)
        if torn is not None and (st is None or to_version is None or to_version > st.version):
            raise torn.damage()  # the torn batch may hold this stream's next events

    def _stream_lines(
        self,
        sid: str,
        lo: int,
        hi: int,
        mark: tuple[int, int, int],
        last: int,
        *,
        parse: Callable[[int, int, bytes], _FiledT],
    ) -> Iterator[_FiledT]:
        """Scan from an index mark, picking this stream's lines, checking the versions run
        on without a gap: the index was built from the file, but the file may have changed.
        ``parse`` reads a line: a whole event (:func:`_event`), or where it is filed."""
        needle = b',"stream_id":' + canonical_bytes(sid) + b',"stream_version":'
        expected, position, offset = mark
        with _io("read"), open(self._log_path, "rb", buffering=_BUFFER) as f:  # noqa: PTH123
            f.seek(offset)
            for line in f:
                if needle in line:
                    event = parse(position, offset, line)
                    if event.stream_id == sid:
                        if event.stream_version != expected:
                            kind = (
                                DamageKind.GAP
                                if event.stream_version > expected
                                else DamageKind.REORDER
                            )
                            raise LedgerDamaged(
                                kind,
                                position,
                                f"stream {sid!r} has version {event.stream_version} here, "
                                f"where version {expected} was expected",
                            )
                        if expected >= lo:
                            yield event
                        if expected >= hi:
                            return
                        expected += 1
                if position >= last:
                    break
                position += 1
                offset += len(line)
        raise LedgerDamaged(
            DamageKind.GAP,
            position,
            f"stream {sid!r} stops at version {expected - 1}, before version {hi}",
        )

    # -- checkpoints ---------------------------------------------------------------------

    def save_checkpoint(self, size: int, note: str) -> None:
        line = orjson.dumps({"note": note, "size": size}, option=orjson.OPT_SORT_KEYS) + b"\n"
        with self._mutex, _io("checkpoint"):
            self._check_open()
            with self._exclusive():
                torn = self._side_torn(CHECKPOINTS_FILE)
                if torn is not None:
                    raise torn.damage()
                self._append_side(CHECKPOINTS_FILE, line)

    def _checkpoint_rows(self) -> list[tuple[int, str]]:
        with self._mutex, _io("read"):
            self._check_open()
            with self._shared():  # a checkpoint being written must not look torn
                try:
                    data = (self.path / CHECKPOINTS_FILE).read_bytes()
                except FileNotFoundError:
                    return []
        lines = data.split(b"\n")
        if lines[-1]:
            offset = len(data) - len(lines[-1])
            reason = "its last line has no newline"
            raise TornTail(CHECKPOINTS_FILE, offset, len(lines[-1]), None, reason).damage()
        rows: dict[int, str] = {}
        offset = 0
        for number, line in enumerate(lines[:-1], start=1):
            try:
                d = orjson.loads(line)
                size, note = d["size"], d["note"]
            except (orjson.JSONDecodeError, KeyError, TypeError, IndexError):
                size = note = None
            if type(size) is not int or type(note) is not str:
                raise LedgerDamaged(
                    DamageKind.MALFORMED,
                    None,
                    f"line {number} of {CHECKPOINTS_FILE} (byte offset {offset}) "
                    "is not a checkpoint",
                )
            rows[size] = note  # saved again for the same size: the later line wins
            offset += len(line) + 1
        return sorted(rows.items())

    def latest_checkpoint(self) -> str | None:
        rows = self._checkpoint_rows()
        return rows[-1][1] if rows else None

    def checkpoints(self) -> list[tuple[int, str]]:
        return self._checkpoint_rows()

    # -- metadata ------------------------------------------------------------------------

    def _read_meta(self) -> dict[str, str]:
        try:
            data = (self.path / META_FILE).read_bytes()
        except FileNotFoundError:
            return {}
        try:
            meta = orjson.loads(data)
        except orjson.JSONDecodeError:
            meta = None
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise LedgerDamaged(
                DamageKind.MALFORMED, None, f"{META_FILE} is not an object of strings"
            )
        return meta

    def _write_meta(self, meta: dict[str, str]) -> None:
        """Write-then-rename, each step fsynced: a reader sees the old file or the new one."""
        tmp = self.path / f"{META_FILE}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_all(fd, orjson.dumps(meta, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2))
            os.fsync(fd)
        finally:
            os.close(fd)
        tmp.replace(self.path / META_FILE)
        fsync_dir(self.path)

    def get_meta(self, key: str) -> str | None:
        with self._mutex, _io("read"):
            self._check_open()
            return self._read_meta().get(key)

    def set_meta(self, key: str, value: str) -> None:
        with self._mutex, _io("write"):
            self._check_open()
            with self._exclusive():
                meta = self._read_meta()
                meta[key] = value
                self._write_meta(meta)

    # -- Merkle nodes (MerkleNodeStore) -------------------------------------------------

    def read_hashes(self, start: int, stop: int) -> list[bytes]:
        plan = self._read_plan(start, stop)
        out = []
        for _, _, line in self._lines(plan):
            parts = _split(line)
            out.append(b"" if parts is None else parts[2])  # a non-line: verify names it
        if plan.damage is not None:
            raise plan.damage
        return out

    def _nodes_path(self, level: int) -> Path:
        return self.path / NODES_FILE.format(level=level)

    def merkle_nodes(self, level: int, start: int, stop: int) -> list[bytes]:
        with self._mutex, _io("read"):
            self._check_open()
            try:
                with self._nodes_path(level).open("rb") as f:
                    f.seek(32 * start)
                    data = f.read(32 * max(0, stop - start))
            except FileNotFoundError:
                return []
        return [data[i : i + 32] for i in range(0, len(data) - 31, 32)]

    def merkle_node_count(self, level: int) -> int:
        with self._mutex, _io("read"):
            self._check_open()
            path = self._nodes_path(level)
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                return 0
        if size % 32:  # not rounded down: a node cut short, or bytes added, is named
            raise ProofError(
                f"the Merkle nodes file {path.name} holds {size} bytes, not whole nodes of 32 "
                f"(level {level}): its last node was cut short (a crash while it was written) "
                "or bytes were added; `tracebound checkpoint --full` stores the nodes again "
                "from the verified log"
            )
        return size // 32

    def add_merkle_nodes(self, level: int, start: int, hashes: Sequence[bytes]) -> None:
        with self._mutex, _io("write"):
            self._check_open()
            with self._exclusive():
                path = self._nodes_path(level)
                created = not path.exists()
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
                try:
                    have = os.fstat(fd).st_size // 32
                    if start > have:  # the file holds nodes from 0 on, without gaps
                        return
                    # A crash mid-write may have left part of a node: it is cut off here
                    # (the nodes are derived data, not the ledger's record).
                    os.ftruncate(fd, 32 * have)
                    data = b"".join(hashes[have - start :])
                    if data:
                        os.lseek(fd, 32 * have, os.SEEK_SET)
                        _write_undone_on_failure(fd, data, 32 * have)
                finally:
                    os.close(fd)
                if created:
                    fsync_dir(self.path)

    def drop_merkle_nodes(self) -> None:
        with self._mutex, _io("write"):
            self._check_open()
            with self._exclusive():
                for path in self.path.glob(NODES_FILE.format(level="*")):
                    path.unlink()
                fsync_dir(self.path)

    # -- side files and repair -----------------------------------------------------------

    def _append_side(self, name: str, line: bytes) -> None:
        path = self.path / name
        created = not path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            _write_undone_on_failure(fd, line, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.path)

    def _side_torn(self, name: str) -> TornTail | None:
        """A line without its newline at the end of a side file (checkpoints)."""
        path = self.path / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return None
        if size == 0:
            return None
        with open(path, "rb") as f:  # noqa: PTH123 - read backwards in blocks
            end = size
            while end > 0:
                start = max(0, end - _BUFFER)
                f.seek(start)
                block = f.read(end - start)
                if end == size and block.endswith(b"\n"):
                    return None
                cut = block.rfind(b"\n")
                if cut >= 0:
                    offset = start + cut + 1
                    break
                end = start
            else:
                offset = 0
        return TornTail(name, offset, size - offset, None, "its last line has no newline")

    def torn_tails(self) -> list[TornTail]:
        """The unfinished writes at the ends of the log and the checkpoint file, if any."""
        with self._mutex, _io("read"):
            self._check_open()
            with self._exclusive():  # the honest answer: no write is under way
                self._refresh(locked=True)
                side = self._side_torn(CHECKPOINTS_FILE)
                return [t for t in (self._torn, side) if t is not None]

    def repair(self, *, now: datetime) -> list[Repair]:
        """Cut off every torn tail; keep the bytes beside the file and record the cut.

        For each tail, in this order, so that a crash during repair loses nothing: copy the
        torn bytes to ``<file>.torn-<offset>`` (0600, fsynced), append a line to
        ``repairs.jsonl`` (time from the caller's clock, offset, length, sha256), then
        truncate the file. The note is not an event in the hashed log: a repair changes no
        record, and an event would move every later position.

        Raises:
            LedgerDamaged: TRUNCATION when the tail lies inside events a stored checkpoint
                covers. A crash cannot tear those, so the file was cut, and nothing is cut.
        """
        with self._mutex, _io("repair"):
            self._check_open()
            with self._exclusive():
                self._refresh(locked=True)
                tails = [t for t in (self._torn, self._side_torn(CHECKPOINTS_FILE)) if t]
                for tail in tails:
                    if not tail.crash:
                        raise tail.damage()
                done = [self._cut(tail, now) for tail in tails]
                self._reset(None)
                self._refresh(locked=True)
        return done

    def _cut(self, tail: TornTail, now: datetime) -> Repair:
        path = self.path / tail.file
        digest = hashlib.sha256()
        chunks: list[bytes] = []
        with open(path, "rb") as f:  # noqa: PTH123
            f.seek(tail.offset)
            while block := f.read(_BUFFER):
                digest.update(block)
                chunks.append(block)
        data = b"".join(chunks)
        # <file>.torn-<offset>; a later crash torn at the same offset (the same append
        # retried) keeps its bytes in <file>.torn-<offset>.2, .3, …. A name that already
        # holds these very bytes is a repair that crashed before truncating: reused.
        kept = self.path / f"{tail.file}.torn-{tail.offset}"
        n = 1
        while kept.exists() and hashlib.sha256(kept.read_bytes()).digest() != digest.digest():
            n += 1
            kept = self.path / f"{tail.file}.torn-{tail.offset}.{n}"
        if not kept.exists():
            fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.path)
        repair = Repair(
            at=format_timestamp(now),
            file=tail.file,
            offset=tail.offset,
            length=len(data),
            position=tail.position,
            sha256=digest.hexdigest(),
            kept=kept.name,
            reason=tail.reason,
        )
        self._append_side(
            REPAIRS_FILE, orjson.dumps(repair.as_dict(), option=orjson.OPT_SORT_KEYS) + b"\n"
        )
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, tail.offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        return repair

    def repairs(self) -> list[dict[str, Any]]:
        """The repair notes, oldest first."""
        with self._mutex, _io("read"):
            self._check_open()
            try:
                data = (self.path / REPAIRS_FILE).read_bytes()
            except FileNotFoundError:
                return []
        out: list[dict[str, Any]] = []
        for line in data.splitlines():
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise LedgerDamaged(
                    DamageKind.MALFORMED, None, f"{REPAIRS_FILE} holds a broken line: {exc}"
                ) from exc
        return out


def _is_json(line: bytes) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def _torn_reason(
    pending: Sequence[tuple[int, int, bytes]], fragment: int, *, bad_json: bool = False
) -> str:
    """Say what is unfinished, in the words an operator would check with `tail -c`."""
    reasons: list[str] = []
    broken = [position for position, _, line in pending if _frame(line) is None]
    if broken:
        reasons.append(f"line {broken[0]} is not a complete ledger line")
    elif bad_json:
        reasons.append(f"its last line, {pending[-1][0]}, is not valid JSON")
    elif pending:
        first, last = _frame(pending[0][2]) or (0, 0)
        reasons.append(f"batch {first}..{last} has {len(pending)} of its {last - first + 1} lines")
    if fragment >= 0:
        reasons.append("its last line has no newline")
    return "; ".join(reasons)
