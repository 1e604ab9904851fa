"""Group commit: many concurrent appenders share one transaction and one fsync.

A durable append costs one commit, and a commit costs one flush of the disk (SQLite's WAL,
the JSONL log, PostgreSQL's WAL). When many threads or tasks append at the same time, each
paying for its own flush wastes the disk: :class:`GroupCommitter` queues their requests and
hands every request queued so far to the backend at once, which writes them in **one**
transaction with **one** flush. Each caller still gets its own answer:

* its recorded events, once the group's commit is durable (never before);
* or its own :class:`~tracebound.errors.ConcurrencyConflict` when its ``expected_version``
  does not hold. That request writes nothing; the others in the group still commit;
* or, when the group's commit itself fails, a :class:`GroupCommitError` (a
  :class:`~tracebound.errors.StorageError` whose ``__cause__`` is the backend's error):
  every request of that group fails, none is half-written or silently dropped. When the
  commit failed because another process held the write lock past the timeout, that error
  is a :class:`GroupCommitBusy`, which is also a :class:`~tracebound.errors.StoreBusy`.
  When the connection was lost after the COMMIT was sent (PostgreSQL), the group may have
  been written, all of it or none: :class:`GroupCommitUnknown`, which is also a
  :class:`~tracebound.errors.CommitOutcomeUnknown`.

Who commits: an appending *thread* that finds no commit under way and no caller of the
last group still on its way back commits the queued group itself (leader/follower: no
hand-off to another thread, so no wake-up of a committer and no GIL hand-over to it); the
others wait, and are woken in turn once the group is durable; a thread that finds callers
still on their way back waits for them at most ``max_delay``, then commits by itself. The
committer thread leads only for asyncio tasks (an event loop must not block on an fsync),
for the main thread (where Python delivers signals: a commit interrupted half way could not
tell its callers whether it happened), and for what is left queued after a group.

Requests are committed in arrival order (FIFO) and a request is never split: an
``append_batch`` stays all or nothing. Memory is bounded: a group holds at most
``max_group_events`` events and ``max_group_bytes`` of canonical record bytes (one larger
request is committed alone), and callers wait before queueing more than
``max_pending_events`` / ``max_pending_bytes``. :meth:`GroupCommitter.close` commits what is
queued, then closes the store; later appends raise :class:`~tracebound.errors.StoreClosed`.

The committer wraps a store and is itself a :class:`~tracebound.store.port.LedgerStore`,
so ``Ledger(GroupCommitter(store), ...)`` records through it. Reads, checkpoints and
metadata go straight to the store. Cross-process safety is the backend's own: each group
takes the backend's write lock (SQLite's ``BEGIN IMMEDIATE``, the JSONL ``flock``,
PostgreSQL's ``log_head`` row lock) exactly as a single append does.

Appending threads commit groups themselves only on backends that allow it (a class
attribute ``_commit_in_any_thread``: SQLite and JSONL); elsewhere (PostgreSQL, whose
connections are per thread) the committer thread commits every group.

A backend takes part by providing two private methods (see :class:`GroupCommitBackend`):
``_prepare_batch`` does the costly per-event work (canonical JSON) in the caller's thread,
before the request is queued; ``_append_prepared`` writes many prepared batches in one
transaction and returns one outcome per batch.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from time import monotonic
from typing import Any, Final, Generic, Protocol, Self, TypeVar

from tracebound.errors import (
    CommitOutcomeUnknown,
    ConcurrencyConflict,
    ConfigError,
    StorageError,
    StoreBusy,
    StoreClosed,
)
from tracebound.events.envelope import Event, RecordedEvent
from tracebound.ids import StreamId
from tracebound.store.port import (
    ANY_VERSION,
    AppendRequest,
    RawRecord,
    StreamHead,
    stream_positions,
)

__all__ = [
    "DEFAULT_MAX_DELAY",
    "DEFAULT_MAX_GROUP_BYTES",
    "DEFAULT_MAX_GROUP_EVENTS",
    "DEFAULT_MAX_PENDING_BYTES",
    "DEFAULT_MAX_PENDING_EVENTS",
    "GroupCommitBackend",
    "GroupCommitBusy",
    "GroupCommitError",
    "GroupCommitUnknown",
    "GroupCommitter",
]

DEFAULT_MAX_GROUP_EVENTS: Final = 5_000
DEFAULT_MAX_GROUP_BYTES: Final = 8 << 20
DEFAULT_MAX_PENDING_EVENTS: Final = 50_000
DEFAULT_MAX_PENDING_BYTES: Final = 64 << 20
DEFAULT_MAX_DELAY: Final = 0.002

# What a queued request's caller does next (GroupCommitter._enqueue).
_NO_ROOM: Final = 0
_FOLLOW: Final = 1
_GATHER: Final = 2
_LEAD: Final = 3

_P = TypeVar("_P")
_Outcome = list[RecordedEvent] | ConcurrencyConflict


class GroupCommitError(StorageError):
    """The commit of a group failed, so every request in it failed; nothing was written
    (unless it is a :class:`GroupCommitUnknown`).

    ``__cause__`` is the backend's error (a StorageError for I/O, a LedgerDamaged for a
    torn tail, a :class:`GroupCommitBusy` when another process held the write lock, ...).
    """


class GroupCommitBusy(GroupCommitError, StoreBusy):
    """The group's commit waited past the timeout for a write lock another process held.

    Both a :class:`GroupCommitError` (the whole group failed, nothing was written) and a
    :class:`~tracebound.errors.StoreBusy`, with the store, wait and hint of the backend's
    StoreBusy (its ``__cause__``): ``except StoreBusy`` works the same with or without
    group commit.
    """


class GroupCommitUnknown(GroupCommitError, CommitOutcomeUnknown):
    """The connection was lost after the group's COMMIT was sent: every request of the
    group was written, or none was, and this process cannot tell which (see
    :class:`~tracebound.errors.CommitOutcomeUnknown`, which ``except`` catches it as, with
    or without group commit)."""


class GroupCommitBackend(Protocol[_P]):
    """What a store provides to be group-committed (private: the port does not change)."""

    url: str

    def _prepare_batch(self, requests: Sequence[AppendRequest]) -> tuple[_P, int]:
        """The writer-side work for one all-or-nothing batch, and its size in bytes."""
        ...

    def _append_prepared(self, batches: Sequence[_P]) -> list[_Outcome]:
        """Append the batches in one durable transaction; one outcome per batch, in order."""
        ...


class _Request:
    """One caller's batch in the queue, and how to tell the caller its outcome."""

    __slots__ = (
        "abandoned",
        "can_lead",
        "counted",
        "done",
        "error",
        "events",
        "future",
        "loop",
        "nbytes",
        "next",
        "prepared",
        "result",
        "taken",
    )

    def __init__(self, prepared: Any, events: int, nbytes: int) -> None:
        self.prepared = prepared
        self.events = events
        self.nbytes = nbytes
        self.result: list[RecordedEvent] | None = None
        self.error: BaseException | None = None
        # A thread waits on a lock (the cheapest wake-up there is), released by the caller
        # before it in its group (``next``: a chain, see GroupCommitter._wake); a task
        # awaits a future the committer resolves through the task's loop.
        self.done: threading.Lock | None = None
        self.next: _Request | None = None
        self.abandoned = False  # the waiting thread was interrupted and left
        self.loop: asyncio.AbstractEventLoop | None = None
        self.future: asyncio.Future[list[RecordedEvent]] | None = None
        self.counted = False  # settled, and its caller not yet running again
        self.taken = False  # in a group (being committed, or committed)
        self.can_lead = False  # its caller is a thread that may commit groups itself

    def outcome(self) -> list[RecordedEvent]:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def _resolve_later(
    loop: asyncio.AbstractEventLoop,
    requests: list[_Request],
    consume: Callable[[_Request], None],
) -> None:
    """Settle the futures of ``requests`` (tasks of ``loop``) on their loop, in one call:
    one thread-safe wake-up of the loop per group. If the loop is closed, nobody is left to
    tell: ``consume`` them here."""
    try:
        loop.call_soon_threadsafe(_resolve_all, requests, consume)
    except RuntimeError:
        for request in requests:
            consume(request)


def _resolve_all(requests: list[_Request], consume: Callable[[_Request], None]) -> None:
    """Settle asyncio callers' futures, on their loop."""
    for request in requests:
        _resolve(request, consume)


def _resolve(request: _Request, consume: Callable[[_Request], None]) -> None:
    """Settle an asyncio caller's future, on its loop."""
    future = request.future
    assert future is not None
    if future.done():  # the awaiting task was cancelled; the append still happened
        consume(request)
    elif request.error is not None:
        future.set_exception(request.error)
    else:
        assert request.result is not None
        future.set_result(request.result)


def _group_error(exc: BaseException) -> BaseException:
    """A fresh error for one caller of a failed group (an exception object is not shared
    between threads: raising it sets its traceback)."""
    if isinstance(exc, StoreClosed):
        err: BaseException = StoreClosed(str(exc))
    elif isinstance(exc, StoreBusy):
        err = GroupCommitBusy(exc.store, exc.waited, exc.hint)
    elif isinstance(exc, CommitOutcomeUnknown):
        err = GroupCommitUnknown(
            f"group commit lost its connection after COMMIT was sent, so this append may "
            f"have been written or not: {type(exc).__name__}: {exc}"
        )
    else:
        err = GroupCommitError(
            f"group commit failed, so this append was not written: {type(exc).__name__}: {exc}"
        )
    err.__cause__ = exc
    return err


class _Core(Generic[_P]):
    """The machinery of a :class:`GroupCommitter` (see there), in an object of its own.

    A class with ``__getattr__`` (the committer forwards the store's extras with one) reads
    every attribute through a slower path that Python does not specialise, and the append
    path reads dozens per call; this class has none.
    """

    def __init__(
        self,
        store: GroupCommitBackend[_P],
        *,
        max_group_events: int = DEFAULT_MAX_GROUP_EVENTS,
        max_group_bytes: int = DEFAULT_MAX_GROUP_BYTES,
        max_pending_events: int = DEFAULT_MAX_PENDING_EVENTS,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        max_delay: float = DEFAULT_MAX_DELAY,
        name: str = "tracebound-group-commit",
    ) -> None:
        if not (hasattr(store, "_prepare_batch") and hasattr(store, "_append_prepared")):
            raise ConfigError(f"{type(store).__name__} does not support group commit")
        limits = (max_group_events, max_group_bytes, max_pending_events, max_pending_bytes)
        if min(limits) < 1:
            raise ConfigError("group commit limits must be positive")
        self.store = store
        self.url = store.url
        self._max_delay = max_delay
        self._max_events = max_group_events
        self._max_bytes = max_group_bytes
        self._max_pending_events = max(max_pending_events, max_group_events)
        self._max_pending_bytes = max(max_pending_bytes, max_group_bytes)
        self._queue: deque[_Request] = deque()
        self._pending_events = 0
        self._pending_bytes = 0
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the committer waits for requests
        self._room = threading.Condition(self._lock)  # callers wait for queue space
        self._flushed = threading.Condition(self._lock)  # flush() waits for outcomes
        # How many wait on _room / _flushed: a group notifies them only if there are any (a
        # Condition's notify costs a few microseconds of Python even with no waiter).
        self._room_waiters = 0
        self._flush_waiters = 0
        self._queued = 0  # requests ever queued...
        self._settled = 0  # ...and how many of those have their outcome (FIFO: a prefix)
        self._waking = 0  # settled requests whose callers have not run again yet
        self._idle = False  # the committer is waiting on _work for a request
        self._gathering = False  # the committer is waiting on _work for waking callers
        self._leading = False  # someone owns the next commit (a thread, or the committer)
        self._main = threading.main_thread().ident  # never leads: signals run there
        # Whether appending threads may commit (see the module doc). A backend says so with
        # ``_commit_in_any_thread``: a store whose connections are per thread (PostgreSQL,
        # where a thread may hold a tracking transaction open) commits on its own thread.
        self._threads_lead = bool(getattr(store, "_commit_in_any_thread", False))
        self._closing = False
        self._closed = False
        self.groups = 0  # commits made (for benchmarks and tests: the group sizes)
        self.grouped_requests = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- committing --------------------------------------------------------------------------
    #
    # Exactly one *leader* owns the next commit at a time (``_leading``, under the lock):
    # an appending thread, or the committer thread. The leader takes the group from the
    # queue, commits it without the lock, then settles every request of it and wakes their
    # waiters. Whoever finds no leader and nobody to wait for claims the role; what a leader
    # leaves queued goes to the committer thread.

    def _run(self) -> None:
        """The committer thread: leads when no appending thread can (see the module doc)."""
        gather_next = False  # it has just woken a group's callers: wait for their next requests
        while True:
            with self._lock:
                if not (gather_next and self._waking and not self._leading and not self._closing):
                    while self._leading or not (self._queue or self._closing):
                        self._idle = True
                        self._work.wait()
                    self._idle = False
                    if not self._queue:  # closing, nobody leading, everything committed
                        self._flushed.notify_all()
                        return
                self._leading = True
                self._gather()
                if not self._queue:  # the callers it waited for did not append again
                    self._leading = False
                    gather_next = False
                    continue
                group = self._take()
            self._commit(group)
            self._settle(group, None)
            # Tasks (and the main thread) of this group queue their next requests for the
            # committer to gather; threads that can lead are left to do so themselves.
            gather_next = not all(r.can_lead for r in group)

    def _lead(self, own: _Request) -> None:
        """Commit the queued groups up to and including ``own``'s, in this thread (the
        caller claimed the lead)."""
        while True:
            with self._lock:
                group = self._take()
            done = own.taken
            self._commit(group)
            self._settle(group, own, keep_lead=not done)
            if done:
                return

    def _settle(
        self, group: list[_Request], own: _Request | None, *, keep_lead: bool = False
    ) -> None:
        """Wake the callers of a committed group (each request holds its outcome already).

        ``own`` is the leading thread's own request: its caller is running already. One pass
        under the lock chains the waiting threads (the baton) and sorts out the tasks.
        """
        first: _Request | None = None
        last: _Request | None = None
        tasks: list[_Request] | None = None
        with self._lock:
            if not keep_lead:
                self._leading = False
            self._settled += len(group)
            waking = 0
            for request in group:
                if request is own:
                    continue
                request.counted = True
                waking += 1
                if request.done is None:  # a task: its loop settles it
                    if tasks is None:
                        tasks = [request]
                    else:
                        tasks.append(request)
                elif last is None:  # a thread: chain it behind the previous one
                    first = last = request
                else:
                    last.next = request
                    last = request
            self._waking += waking
            if self._flush_waiters:
                self._flushed.notify_all()
            if self._idle and not keep_lead and (self._queue or self._closing):
                self._work.notify()  # left over, or closing: the committer thread leads
        if tasks is not None:
            self._resolve_tasks(tasks)
        if first is not None:
            self._wake(first)

    def _resolve_tasks(self, tasks: list[_Request]) -> None:
        """Settle a group's asyncio callers: one thread-safe call per event loop."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Request]] = {}
        for request in tasks:
            assert request.loop is not None
            by_loop.setdefault(request.loop, []).append(request)
        for loop, requests in by_loop.items():
            _resolve_later(loop, requests, self._consume)

    def _wake(self, request: _Request | None) -> None:
        """Wake the thread waiting for ``request``; it wakes the next one of its group.

        Waking a thread costs its waker a system call and, on a busy machine, often its CPU
        while it holds the GIL. Passed along the group like a baton, each wake-up is paid by
        a thread that has its outcome already, and the committer is free to gather the next
        group. A thread that was interrupted while it waited (``abandoned``) cannot pass the
        baton on, so whoever wakes it does that in its place.
        """
        while request is not None:
            assert request.done is not None
            request.done.release()
            if not request.abandoned:
                return
            with self._lock:
                nxt, request.next = request.next, None
                self._consume_locked(request)
            request = nxt

    def _abandon(self, request: _Request) -> None:
        """The thread waiting for ``request`` was interrupted: keep the chain moving.

        The append itself may still commit (as a write that was under way when a process is
        interrupted may); only the waiting stops.
        """
        assert request.done is not None
        with self._lock:
            request.abandoned = True
            nxt = None
            if request.done.acquire(blocking=False):  # woken already: pass the baton on
                nxt, request.next = request.next, None
                self._consume_locked(request)
        self._wake(nxt)

    def _gather(self) -> None:
        """Wait (briefly) for the callers of the last group to come back (caller holds the
        lock).

        Without this, callers split into cohorts: while one cohort's group commits, the
        other's queues, and each commit carries only part of the callers that are appending.
        A caller woken with its outcome counts as *waking* until its thread (or task) runs
        again; one that appends again straight away has queued by then, because it keeps the
        GIL from waking to queueing. So the committer waits until no caller is waking, and
        never longer than ``max_delay``: a caller that does not come back costs nothing.
        """
        if not self._waking or self._max_delay <= 0:
            return
        deadline = monotonic() + self._max_delay
        self._gathering = True  # _consume (and a full group) wake the committer up
        try:
            while self._waking and not self._closing and not self._group_full():
                remaining = deadline - monotonic()
                if remaining <= 0:
                    return
                self._work.wait(remaining)
        finally:
            self._gathering = False

    def _group_full(self) -> bool:
        return self._pending_events >= self._max_events or self._pending_bytes >= self._max_bytes

    def _consume(self, request: _Request) -> None:
        """The caller of ``request`` runs again: it no longer counts as waking."""
        with self._lock:
            self._consume_locked(request)

    def _consume_locked(self, request: _Request) -> None:
        if request.counted:
            request.counted = False
            self._waking -= 1
            if not self._waking and self._gathering:
                self._work.notify()

    def _take(self) -> list[_Request]:
        """The next group, FIFO, within the limits (caller holds the lock)."""
        queue = self._queue
        first = queue.popleft()
        first.taken = True
        group = [first]
        events, nbytes = first.events, first.nbytes
        while queue:
            nxt = queue[0]
            if events + nxt.events > self._max_events or nbytes + nxt.nbytes > self._max_bytes:
                break
            group.append(queue.popleft())
            nxt.taken = True
            events += nxt.events
            nbytes += nxt.nbytes
        self._pending_events -= events
        self._pending_bytes -= nbytes
        if self._room_waiters:
            self._room.notify_all()
        return group

    def _commit(self, group: list[_Request]) -> None:
        """Commit one group; each request gets its result or error (its caller is woken
        later, by :meth:`_settle`)."""
        try:
            outcomes = self.store._append_prepared([r.prepared for r in group])
        except BaseException as exc:  # noqa: BLE001 - every waiter gets a typed error
            for request in group:
                request.error = _group_error(exc)
            return
        if len(outcomes) != len(group):  # a backend bug; never let a caller guess
            wrong = StorageError(f"the backend answered {len(outcomes)} of {len(group)} requests")
            for request in group:
                request.error = _group_error(wrong)
            return
        self.groups += 1
        self.grouped_requests += len(group)
        for request, o in zip(group, outcomes, strict=True):
            if isinstance(o, ConcurrencyConflict):
                request.error = ConcurrencyConflict(o.stream_id, o.expected, o.actual)
            else:
                request.result = o

    # -- queueing ----------------------------------------------------------------------------

    def _prepare(self, requests: Sequence[AppendRequest]) -> _Request:
        prepared, nbytes = self.store._prepare_batch(requests)
        events = 0
        for r in requests:  # a loop, not sum(<generator>): most calls carry one request
            events += len(r.events)
        return _Request(prepared, events, nbytes)

    def _has_room(self, request: _Request) -> bool:
        """Whether the queue can take ``request`` now; an empty queue takes anything."""
        return not self._queue or (
            self._pending_events + request.events <= self._max_pending_events
            and self._pending_bytes + request.nbytes <= self._max_pending_bytes
        )

    def _enqueue(self, request: _Request, *, wait: bool, may_lead: bool) -> int:
        """Queue ``request``, and say what its caller does next: ``_LEAD`` (commit the group
        now, in this thread), ``_GATHER`` (wait, and lead if nobody has taken the group
        within ``max_delay``), ``_FOLLOW`` (wait: a leader or the committer thread commits
        it) or ``_NO_ROOM`` (not queued: the queue is full and ``wait`` is off)."""
        with self._lock:
            while True:
                if self._closing:
                    raise StoreClosed(f"{self.url} is closed")
                if not self._queue or self._has_room(request):
                    break
                if not wait:
                    return _NO_ROOM
                self._wait_room()
            self._queue.append(request)
            self._queued += 1
            self._pending_events += request.events
            self._pending_bytes += request.nbytes
            if self._leading:  # a commit (or the committer's gathering) is under way
                if self._gathering and self._group_full():
                    self._work.notify()
                return _FOLLOW
            if self._waking and self._max_delay > 0 and not self._group_full():
                # Callers of the last group are still on their way back: wait for them.
                if may_lead:
                    return _GATHER
            elif may_lead:
                self._leading = True
                return _LEAD
            if self._idle:
                self._work.notify()  # the committer thread leads (and gathers) instead
            return _FOLLOW

    def _wait_for_room(self, request: _Request) -> None:
        """Block (in an executor thread) until the queue has room for ``request``."""
        with self._lock:
            while not self._closing and not self._has_room(request):
                self._wait_room()

    def _wait_room(self) -> None:
        """Wait on ``_room`` (caller holds the lock), counted so that groups notify it only
        when somebody waits."""
        self._room_waiters += 1
        try:
            self._room.wait()
        finally:
            self._room_waiters -= 1

    # -- appends -----------------------------------------------------------------------------

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[RecordedEvent]:
        """:meth:`GroupCommitter.append_batch`."""
        request = self._prepare(requests)
        done = threading.Lock()
        done.acquire()
        request.done = done
        request.can_lead = self._threads_lead and threading.get_ident() != self._main
        how = self._enqueue(request, wait=True, may_lead=request.can_lead)
        if how == _LEAD:
            self._lead(request)
            return request.outcome()
        timeout = self._max_delay if how == _GATHER else -1
        while True:
            try:
                if done.acquire(timeout=timeout):  # released once the outcome is known
                    break
            except BaseException:
                self._abandon(request)
                raise
            with self._lock:  # nobody came to commit the group in time: lead it
                lead = not request.taken and not self._leading
                if lead:
                    self._leading = True
            if lead:
                self._lead(request)
                return request.outcome()
            timeout = -1  # taken, or a leader will take it: wait for the outcome
        nxt = request.next
        if nxt is not None:  # pass the baton first: the next caller's wake-up overlaps ours
            request.next = None
            self._wake(nxt)
        self._consume(request)  # running again
        return request.outcome()

    async def append_batch_async(self, requests: Sequence[AppendRequest]) -> list[RecordedEvent]:
        """:meth:`GroupCommitter.append_batch_async`."""
        loop = asyncio.get_running_loop()
        request = self._prepare(requests)
        request.loop = loop
        request.future = loop.create_future()
        while self._enqueue(request, wait=False, may_lead=False) == _NO_ROOM:  # off the loop
            await loop.run_in_executor(None, self._wait_for_room, request)
        try:
            return await request.future
        finally:
            self._consume(request)

    # -- lifecycle ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Return once every request queued before this call has its outcome."""
        with self._lock:
            target = self._queued
            while self._settled < target and self._thread.is_alive():
                self._flush_waiters += 1
                try:
                    self._flushed.wait(0.1)
                finally:
                    self._flush_waiters -= 1

    def close(self) -> None:
        """Commit everything already queued, stop the committer, close the store.

        Appends that arrive after this starts raise StoreClosed. Idempotent.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._closing = True
            self._work.notify_all()
            self._room.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        close = getattr(self.store, "close", None)
        if close is not None:
            close()


class GroupCommitter(Generic[_P]):
    """A store whose appends from many threads and tasks share commits.

    Args:
        store: a backend with group-commit support (SQLite, JSONL, PostgreSQL). It is owned
            by the committer from here on: :meth:`close` closes it.
        max_group_events: the most events one commit takes (a single larger request is
            still committed, alone).
        max_group_bytes: the most canonical record bytes one commit takes (likewise).
        max_pending_events: callers wait before queueing beyond this many events...
        max_pending_bytes: ...or beyond this many bytes, so memory stays bounded.
        max_delay: the longest a new group waits for the callers of the group just
            committed to queue their next request, so that callers who append in a loop
            share one commit instead of splitting into alternating halves (0: never wait).
        name: the committer thread's name.
    """

    def __init__(
        self,
        store: GroupCommitBackend[_P],
        *,
        max_group_events: int = DEFAULT_MAX_GROUP_EVENTS,
        max_group_bytes: int = DEFAULT_MAX_GROUP_BYTES,
        max_pending_events: int = DEFAULT_MAX_PENDING_EVENTS,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        max_delay: float = DEFAULT_MAX_DELAY,
        name: str = "tracebound-group-commit",
    ) -> None:
        self._core: _Core[_P] = _Core(
            store,
            max_group_events=max_group_events,
            max_group_bytes=max_group_bytes,
            max_pending_events=max_pending_events,
            max_pending_bytes=max_pending_bytes,
            max_delay=max_delay,
            name=name,
        )
        self.store = store
        self.url = store.url

    @property
    def groups(self) -> int:
        """Commits made (for benchmarks and tests: the group sizes)."""
        return self._core.groups

    @property
    def grouped_requests(self) -> int:
        """Requests committed in those groups."""
        return self._core.grouped_requests

    # -- appends -----------------------------------------------------------------------------

    def append(
        self,
        stream_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = ANY_VERSION,
    ) -> list[RecordedEvent]:
        """Append durably, sharing the commit with concurrent appends.

        Raises:
            ConcurrencyConflict: the stream is not at ``expected_version`` (nothing written).
            GroupCommitError: the group's commit failed (nothing written); a
                :class:`GroupCommitBusy` (a StoreBusy) if another process held the lock.
            StoreClosed: the committer is closed.
        """
        return self._core.append_batch(
            [AppendRequest(StreamId(stream_id), events, expected_version)]
        )

    def append_batch(self, requests: Sequence[AppendRequest]) -> list[RecordedEvent]:
        """Append several streams' events, all or none, sharing the commit with others."""
        return self._core.append_batch(requests)

    async def append_async(
        self,
        stream_id: str,
        events: Sequence[Event],
        *,
        expected_version: int | None = ANY_VERSION,
    ) -> list[RecordedEvent]:
        """:meth:`append` for asyncio: awaits the durable commit without blocking the loop.

        If the task is cancelled once its append is queued, the append still commits:
        cancelling stops the waiting, not the write (as with any durable store). Read the
        stream to find out.
        """
        return await self._core.append_batch_async(
            [AppendRequest(StreamId(stream_id), events, expected_version)]
        )

    async def append_batch_async(self, requests: Sequence[AppendRequest]) -> list[RecordedEvent]:
        """:meth:`append_batch` for asyncio.

        If the task is cancelled while it waits, the append may still commit: cancelling
        stops the waiting, not the write (as with any durable store). Read the stream to
        find out.
        """
        return await self._core.append_batch_async(requests)

    # -- lifecycle ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Return once every request queued before this call has its outcome."""
        self._core.flush()

    def close(self) -> None:
        """Commit everything already queued, stop the committer, close the store.

        Appends that arrive after this starts raise StoreClosed. Idempotent.
        """
        self._core.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- everything else goes straight to the store ------------------------------------------

    def _target(self) -> Any:
        return self.store

    def read_stream(
        self, stream_id: str, *, from_version: int = 1, to_version: int | None = None
    ) -> Iterator[RecordedEvent]:
        it: Iterator[RecordedEvent] = self._target().read_stream(
            stream_id, from_version=from_version, to_version=to_version
        )
        return it

    def stream_positions(
        self, stream_id: str, from_version: int, to_version: int
    ) -> list[tuple[int, int]]:
        return stream_positions(self._target(), stream_id, from_version, to_version)

    def stream_head(self, stream_id: str) -> StreamHead | None:
        head: StreamHead | None = self._target().stream_head(stream_id)
        return head

    def read_log(self, *, start: int = 1, stop: int | None = None) -> Iterator[RecordedEvent]:
        it: Iterator[RecordedEvent] = self._target().read_log(start=start, stop=stop)
        return it

    def read_raw(self, *, start: int = 1, stop: int | None = None) -> Iterator[RawRecord]:
        it: Iterator[RawRecord] = self._target().read_raw(start=start, stop=stop)
        return it

    def size(self) -> int:
        return int(self._target().size())

    def save_checkpoint(self, size: int, note: str) -> None:
        self._target().save_checkpoint(size, note)

    def latest_checkpoint(self) -> str | None:
        note: str | None = self._target().latest_checkpoint()
        return note

    def checkpoints(self) -> list[tuple[int, str]]:
        rows: list[tuple[int, str]] = self._target().checkpoints()
        return rows

    def get_meta(self, key: str) -> str | None:
        value: str | None = self._target().get_meta(key)
        return value

    def set_meta(self, key: str, value: str) -> None:
        self._target().set_meta(key, value)

    # Stored Merkle nodes, forwarded by name: a runtime-checkable Protocol looks attributes
    # up statically on Python 3.12+, where __getattr__ would not make this a MerkleNodeStore.
    def read_hashes(self, start: int, stop: int) -> list[bytes]:
        hashes: list[bytes] = self._target().read_hashes(start, stop)
        return hashes

    def merkle_nodes(self, level: int, start: int, stop: int) -> list[bytes]:
        nodes: list[bytes] = self._target().merkle_nodes(level, start, stop)
        return nodes

    def merkle_node_count(self, level: int) -> int:
        return int(self._target().merkle_node_count(level))

    def add_merkle_nodes(self, level: int, start: int, hashes: Sequence[bytes]) -> None:
        self._target().add_merkle_nodes(level, start, hashes)

    def drop_merkle_nodes(self) -> None:
        self._target().drop_merkle_nodes()

    def __getattr__(self, name: str) -> Any:
        """The store's own extras (``read_raw_pages``, ``subscribe``, ``tracking``, ...)."""
        if name.startswith("__") or name in ("store", "_core"):
            raise AttributeError(name)
        return getattr(self.store, name)
