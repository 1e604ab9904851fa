"""The projection runner: catch up from the stored position, then follow the log.

Each projection's position lives in the views database and is committed in the same
transaction as its rows (:meth:`SQLiteViews.commit`), so each event is applied exactly once
however often the runner stops and starts. Running twice changes nothing; ``rebuild`` drops
a projection's tables and replays it from position 0.

A projection that raises on an event stops *before* that event: its rows up to the event
before are committed with that position, the failure (position and error) is stored beside
it, and the run raises once the healthy projections have caught up. The event is not
skipped: the next run retries it, and fails the same way until the projection is fixed.

Reading: one batch of records is read and decoded once (orjson, no re-validation; see
:mod:`.records`), page by page, and each page handed to the projections that read its
kinds, in log order, as soon as it is read (see :meth:`ProjectionRunner._dispatch`).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar

from tracebound.errors import (
    ConcurrencyConflict,
    ConnectionLost,
    ContractError,
    IntegrityError,
    StorageError,
    StoreBusy,
    TraceboundError,
    ViewsOfAnotherLog,
)
from tracebound.events.registry import EventRegistry
from tracebound.projections.base import EventRecord, Projection, Rows, RowSink
from tracebound.projections.cost import CostLedgerProjection
from tracebound.projections.fold import WorkflowStateProjection
from tracebound.projections.gates import TrustGateProjection
from tracebound.projections.learning import LearningProjection
from tracebound.projections.plugins import PluginTelemetry
from tracebound.projections.records import RecordDecoder, read_record_pages
from tracebound.projections.roi import RoiProjection
from tracebound.projections.sqlite_views import (
    LogAnchor,
    PositionRecord,
    SQLiteViews,
    TableWrite,
)
from tracebound.projections.trail import AuditTrailProjection
from tracebound.store.collector import paused_collector
from tracebound.store.port import LogStore, MerkleNodeStore
from tracebound.store.reconnect import DEFAULT_GIVE_UP_AFTER, Outage
from tracebound.store.sqlite import SQLiteStore

__all__ = [
    "DEFAULT_BATCH",
    "ProjectionFailure",
    "ProjectionRunner",
    "ProjectionStatus",
    "RunReport",
    "ViewStore",
    "default_projections",
]

_log = logging.getLogger(__name__)

DEFAULT_BATCH: Final = 20_000
"""Events per transaction in catch-up: large enough to amortise the commit, small enough
that a follower's batch (usually far smaller) is visible within milliseconds."""

ROWS_KEPT_BETWEEN_RUNS = 10_000
"""Cached rows and keys a projection keeps from one run to the next: a follower's polls
reuse the rows of the workflows in flight, but a log of ever new workflows would otherwise
fill the cache to its own limit (200,000 rows per projection: gigabytes) and keep it. Past
this, the cache is emptied after the run; a row needed again costs one query."""


def default_projections() -> list[Projection]:
    """One instance of every built-in projection, in a fixed order."""
    return [
        WorkflowStateProjection(),
        CostLedgerProjection(),
        RoiProjection(),
        AuditTrailProjection(),
        PluginTelemetry(),
        TrustGateProjection(),
        LearningProjection(),
    ]


@dataclass(frozen=True)
class ProjectionFailure:
    """Where and why a projection stopped: it stands at ``position - 1``."""

    name: str
    position: int
    error: str


@dataclass(frozen=True)
class ProjectionStatus:
    """How far one projection has got."""

    name: str
    version: int
    position: int
    head: int
    failed_position: int | None
    error: str | None

    @property
    def lag(self) -> int:
        return self.head - self.position

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "position": self.position,
            "head": self.head,
            "lag": self.lag,
            "failed_position": self.failed_position,
            "error": self.error,
        }


@dataclass
class RunReport:
    """What one :meth:`ProjectionRunner.run` did."""

    start: int = 0
    head: int = 0
    events: int = 0
    batches: int = 0
    failures: list[ProjectionFailure] = field(default_factory=list)


def _failure_error(
    failure: ProjectionFailure,
    cause: BaseException,
    others: Sequence[ProjectionFailure] = (),
) -> TraceboundError:
    """The typed error a failed run raises; the class follows the cause's branch.

    It names the first failure, and the other projections that stopped in the same run
    (each stands before its own failed event; ``status()`` has their errors)."""
    message = (
        f"projection {failure.name!r} stopped at position {failure.position} "
        f"(it stands at {failure.position - 1}): {failure.error}"
    )
    if others:
        message += "; also stopped: " + ", ".join(
            f"{f.name!r} at position {f.position}" for f in others
        )
    if isinstance(cause, StorageError):
        return StorageError(message)
    if isinstance(cause, IntegrityError):
        return IntegrityError(message)
    return ContractError(message)


def _payload_kinds(live: Iterable[_Live]) -> frozenset[str] | None:
    """The kinds whose payload some projection reads; None for "every kind"."""
    kinds: set[str] = set()
    for lv in live:
        p = lv.projection
        if not getattr(p, "reads_payload", True):
            continue
        if p.kinds is None:
            return None
        kinds |= p.kinds
    return frozenset(kinds)


_CHUNK: Final = 2_048
"""Records dispatched together (see :meth:`ProjectionRunner._dispatch`)."""


def _select(
    records: Sequence[EventRecord], kind_sets: Iterable[frozenset[str] | None]
) -> dict[frozenset[str] | None, Sequence[EventRecord]]:
    """The records of each kind set (None: all of them), in log order, in one pass.

    One filter per kind set cost ~0.1 us per event each; here a record costs one dict
    lookup of its kind (a batch has a handful of kinds) plus one append per set it is in.
    """
    out: dict[frozenset[str] | None, Sequence[EventRecord]] = {}
    filtered: list[tuple[frozenset[str], list[EventRecord]]] = []
    for kinds in kind_sets:
        if kinds is None:
            out[None] = records
        else:
            chosen: list[EventRecord] = []
            out[kinds] = chosen
            filtered.append((kinds, chosen))
    if not filtered:
        return out
    targets: dict[str, tuple[list[EventRecord], ...]] = {}
    for record in records:
        kind = record["event_type"]
        lists = targets.get(kind)
        if lists is None:
            lists = targets[kind] = tuple(chosen for ks, chosen in filtered if kind in ks)
        for target in lists:
            target.append(record)
    return out


def _split(projections: Sequence[Projection], workers: int) -> list[list[Projection]]:
    """Projections in ``workers`` groups of about equal work, for a parallel rebuild.

    Weights, from the 1M-event profile: a projection that reads every payload costs its
    group the decoding of every event (3), one that reads every event's envelope 2, one
    that reads a few kinds 1. Longest first, each into the lightest group so far; a group
    whose projections read every payload decodes it once for all of them.
    """

    def weight(p: Projection) -> int:
        if p.kinds is not None:
            return 1
        return 3 if getattr(p, "reads_payload", True) else 2

    groups: list[list[Projection]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for p in sorted(projections, key=weight, reverse=True):  # stable: ties keep their order
        i = loads.index(min(loads))
        groups[i].append(p)
        loads[i] += weight(p)
    return [g for g in groups if g]


@contextmanager
def _sigint_left_to_parent() -> Iterator[None]:
    """Start worker processes that ignore SIGINT: a terminal's Ctrl-C reaches the whole
    process group, and a worker it stopped mid-task printed a traceback and left its
    result owed for ever (the parent waited on it). The parent stops them instead.

    Ignored, not handled: an ignored signal stays ignored across exec, from the worker's
    first instruction (a handler would be reset). A Ctrl-C in the moment the workers are
    being started is lost.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; a host's threads keep theirs
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _end_with_parent() -> None:
    """A worker ends as soon as the process that started it has (killed, crashed): it
    would go on to the end of its share, then print a BrokenPipeError traceback handing
    in a result nobody waits for. Its views stay at their last commit."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel  # readable once the parent has gone

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="tb-parent-watch", daemon=True).start()


def _run_part(
    store_path: str, views_path: str, projections: list[Projection], batch_size: int
) -> RunReport:
    """A worker process's share of a parallel rebuild: its projections, its own positions."""
    store = SQLiteStore(store_path, create=False)
    views = SQLiteViews(views_path)
    try:
        return ProjectionRunner(store, views, projections, batch_size=batch_size).run()
    finally:
        views.close()
        store.close()


class _Live:
    """A projection's run-time state: stored position and its write-behind rows."""

    __slots__ = ("apply", "many", "position", "projection", "rows")

    def __init__(self, projection: Projection, position: int, rows: Rows) -> None:
        self.projection = projection
        self.apply = projection.apply
        self.many: Callable[[Sequence[EventRecord], Rows], None] | None = None
        self.rearm()
        self.position = position
        self.rows = rows

    def rearm(self) -> None:
        """Use the projection's ``apply_many`` again (at the start of each run).

        Optional batch form of apply (see Projection); None: the runner loops over apply.
        A run that catches ``apply_many`` breaking its contract stops using it for the rest
        of that run (see :meth:`ProjectionRunner._dispatch`), and tries it again next run.
        """
        self.many = getattr(self.projection, "apply_many", None)


class ViewStore(RowSink, Protocol):
    """Where a runner keeps rows and positions: :class:`SQLiteViews` or ``PostgresViews``."""

    def prepare(self, projection: Projection) -> PositionRecord: ...

    def position_record(self, name: str) -> PositionRecord | None: ...

    def reset(self, projection: Projection) -> None: ...

    def commit(self, writes: Sequence[TableWrite], anchor: LogAnchor | None = None) -> None: ...

    def log_anchor(self) -> LogAnchor | None: ...

    def create_indexes(self, projections: Sequence[Projection]) -> None: ...


ViewsT = TypeVar("ViewsT", bound=ViewStore)


class ProjectionRunner(Generic[ViewsT]):
    """Feeds the ledger's log to projections whose views live in a :class:`ViewStore`.

    Args:
        store: the ledger's log (any :class:`LogStore`).
        views: where rows and positions are kept (SQLite file or PostgreSQL schema).
        projections: default: :func:`default_projections`.
        batch_size: events per transaction.
        registry: resolves current payload versions and upcasters (default registry).
        on_commit: called with the last committed position after every commit (for
            measuring lag, or for notifying readers).
    """

    def __init__(
        self,
        store: LogStore,
        views: ViewsT,
        projections: Sequence[Projection] | None = None,
        *,
        batch_size: int = DEFAULT_BATCH,
        registry: EventRegistry | None = None,
        on_commit: Callable[[int], None] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ContractError("batch_size must be at least 1")
        self.store = store
        self.views = views
        self.projections = list(projections if projections is not None else default_projections())
        names = [p.name for p in self.projections]
        if len(set(names)) != len(names):
            raise ContractError(f"projection names must be unique: {names}")
        self.batch_size = batch_size
        self.registry = registry
        self.decoder = RecordDecoder(registry)
        self.on_commit = on_commit
        self._live: list[_Live] | None = None
        self._log_checked = False  # this runner has seen that the views are of this log

    # -- state ---------------------------------------------------------------------------

    def _prepare(self) -> list[_Live]:
        if self._live is None:
            live = []
            for p in self.projections:
                stored = self.views.prepare(p)
                fresh = [t.name for t in p.tables] if stored.position == 0 else []
                live.append(_Live(p, stored.position, Rows(self.views, fresh=fresh)))
            self._live = live
        return self._live

    def status(self) -> list[ProjectionStatus]:
        """Position, lag and last failure of every projection; reads only.

        A projection never run is at position 0. One whose views were built by another
        version of it is reported as that version, behind by the whole log, with an
        ``error`` that says the next run rebuilds it (status itself drops nothing).
        """
        records = {p.name: self.views.position_record(p.name) for p in self.projections}
        problem = self._log_problem([r.position for r in records.values() if r])
        head = self.store.size()  # after the positions: a follower may commit meanwhile
        out = []
        for p in self.projections:
            rec = records[p.name]
            if rec is None:
                out.append(ProjectionStatus(p.name, p.version, 0, head, None, None))
            elif rec.version != p.version:
                stale = (
                    f"built by version {rec.version} of this projection, now {p.version}: "
                    "the next `project run` rebuilds it"
                )
                out.append(ProjectionStatus(p.name, rec.version, 0, head, None, stale))
            else:
                error = rec.error if problem is None else problem
                out.append(
                    ProjectionStatus(
                        p.name, rec.version, rec.position, head, rec.failed_position, error
                    )
                )
        return out

    # -- which log the views are of -------------------------------------------------------

    def check_log(self) -> None:
        """Refuse views built from another history than this ledger's log.

        Raises:
            ViewsOfAnotherLog: a projection (or the views' :class:`LogAnchor`) is at a
                position past the log's end, or the log's record at the anchor is another
                record. Views that do not keep an anchor yet are checked by position only.
        """
        records = (self.views.position_record(p.name) for p in self.projections)
        self._refuse_another_log([r.position for r in records if r])

    def _refuse_another_log(self, positions: Sequence[int]) -> None:
        problem = self._log_problem(positions)
        if problem is not None:
            raise ViewsOfAnotherLog(problem)
        self._log_checked = True

    def _log_problem(self, positions: Sequence[int]) -> str | None:
        """What says the views are not of this log, or None (reads only).

        The log's end is read after the positions and the anchor: another runner (a report
        catching up beside a follower) may commit between, but never past the log's end."""
        anchor = self.views.log_anchor()
        head = self.store.size()
        furthest = max([*positions, 0 if anchor is None else anchor.position])
        fix = (
            "; `tracebound project rebuild` builds them again from this ledger (or give "
            "--views the views of this ledger)"
        )
        if furthest > head:
            return (
                f"the views are at position {furthest:,} but the ledger ends at {head:,}: "
                "they were built from another log, or from this one before it was restored "
                f"from an older copy; nothing is applied over them{fix}"
            )
        if anchor is None or anchor.position == 0:
            return None
        found = self._hash_at(anchor.position)
        if found == anchor.hash:
            return None
        return (
            f"the record the views applied at position {anchor.position:,} (hash "
            f"{anchor.hash[:16]}…) is not this ledger's ({(found or 'missing')[:16]}…): they "
            "were built from another log (views of another ledger, or a ledger restored from "
            f"an older copy and written to since); nothing is applied over them{fix}"
        )

    def _anchor(self, position: int) -> LogAnchor | None:
        """The anchor a commit that applied up to ``position`` leaves (see LogAnchor)."""
        found = self._hash_at(position)
        return None if found is None else LogAnchor(position, found)

    def _hash_at(self, position: int) -> str | None:
        """The chain hash (hex) of the log's record at ``position``, or None."""
        if isinstance(self.store, MerkleNodeStore):
            hashes = self.store.read_hashes(position, position)
            return hashes[0].hex() if hashes else None
        for raw in self.store.read_raw(start=position, stop=position):
            return raw.hash.hex()
        return None

    # -- running -------------------------------------------------------------------------

    def rebuild(self, names: Iterable[str] | None = None, *, workers: int = 1) -> RunReport:
        """Drop the named projections (default: all) and replay them from position 0.

        With ``workers`` > 1 the projections are split into that many groups, and all but
        the first are run by worker processes, each reading the log on its own (see
        :meth:`_run_parallel`). Only for a SQLite ledger and SQLite views with the default
        registry; otherwise, or with a single projection, the rebuild runs here, serially.
        """
        if workers < 1:
            raise ContractError("workers must be at least 1")
        wanted = set(names) if names is not None else {p.name for p in self.projections}
        unknown = wanted - {p.name for p in self.projections}
        if unknown:
            raise ContractError(
                f"no such projection: {', '.join(sorted(unknown))} "
                f"(the projections are {', '.join(p.name for p in self.projections)})"
            )
        if wanted != {p.name for p in self.projections}:
            self.check_log()  # the others stay: they must be of this log
        for p in self.projections:
            if p.name in wanted:
                self.views.reset(p)
        self._live = None
        if workers > 1 and self.can_rebuild_in_parallel():
            return self._run_parallel(workers)
        return self.run()

    def can_rebuild_in_parallel(self) -> bool:
        """Whether ``rebuild(workers=N)`` uses N processes here (else it runs serially).

        Worker processes open the ledger and the views by path, and rebuild the default
        registry's projections: so a SQLite ledger, SQLite views, the default registry and
        more than one projection.
        """
        return (
            isinstance(self.store, SQLiteStore)
            and isinstance(self.views, SQLiteViews)
            and self.registry is None
            and len(self.projections) > 1
        )

    def _run_parallel(self, workers: int) -> RunReport:
        """Catch up with the projections split over processes (a rebuild's second core).

        Positions are per projection and each group commits its own projections' rows and
        positions (one transaction each, as always), so splitting keeps exactly-once: a
        crash of either process leaves its projections at their last commit, and the next
        run replays them from there. Both processes write the views file; SQLite serialises
        their commits (``BEGIN IMMEDIATE`` waits on the busy timeout).

        ``on_commit`` is called for this process's commits only.
        """
        assert isinstance(self.store, SQLiteStore)
        assert isinstance(self.views, SQLiteViews)
        for p in self.projections:  # tables and positions exist before any worker starts
            self.views.prepare(p)
        groups = _split(self.projections, workers)
        mine, others = groups[0], groups[1:]
        ctx = multiprocessing.get_context("spawn")  # no fork of a threaded process
        with _sigint_left_to_parent():
            pool = ctx.Pool(len(others), initializer=_end_with_parent)
        # Ctrl-C or SIGTERM (a KeyboardInterrupt) goes straight out of the `with`, which
        # terminates the workers: each is left at its last commit, as after a crash.
        try:
            with pool:
                pending = [
                    pool.apply_async(
                        _run_part,
                        (str(self.store.path), str(self.views.path), group, self.batch_size),
                    )
                    for group in others
                ]
                local = ProjectionRunner(
                    self.store,
                    self.views,
                    mine,
                    batch_size=self.batch_size,
                    on_commit=self.on_commit,
                )
                error: Exception | None = None
                try:
                    reports = [local.run()]
                except Exception as exc:  # noqa: BLE001 - re-raised once the workers end
                    error, reports = exc, []
                for job in pending:
                    try:
                        reports.append(job.get())
                    except Exception as exc:  # noqa: BLE001 - the first error wins
                        error = error or exc
        finally:
            self._live = None  # positions moved in other processes: re-read them next run
        if error is not None:
            raise error
        return RunReport(
            start=min((r.start for r in reports if r.start), default=0),
            head=max(r.head for r in reports),
            events=max(r.events for r in reports),
            batches=max(r.batches for r in reports),
            failures=[f for r in reports for f in r.failures],
        )

    def run(self, *, until_caught_up: bool = True) -> RunReport:
        """Apply new events; with ``until_caught_up=False``, at most one batch.

        Raises:
            ContractError: a projection failed on an event (or an event could not be
                upcast); the healthy projections have been committed to the head first.
            IntegrityError: a stored record cannot be decoded.
            StoreBusy: another process held the ledger's lock past its timeout while this
                run read it; no projection is marked failed, and the next run resumes from
                the last commit.
            StorageError, ConcurrencyConflict: the views could not be written.
        """
        live = self._prepare()
        for lv in live:
            lv.rearm()
        head = self.store.size()
        if not self._log_checked or any(lv.position != head for lv in live):
            # Before anything is applied: an idle follower (every position at the head)
            # does not pay for the check; one with events to apply does, once per run.
            self._refuse_another_log([lv.position for lv in live])
        report = RunReport(head=head)
        failed: dict[str, tuple[ProjectionFailure, BaseException]] = {}
        # Records and rows hold no reference cycles: reference counting frees them, and the
        # collector would walk the views' row cache over and over, finding nothing (pausing
        # for the whole catch-up, not per batch, halved a 1M-event rebuild). A follower
        # resumes it between polls.
        with paused_collector():
            self._catch_up(live, head, report, failed, until_caught_up=until_caught_up)
            # A bulk catch-up: free its caches before the collector resumes and walks
            # them, perhaps more than once (measured: rebuild +10%; see Rows.release).
            bulk = report.batches > 1
            for lv in live:
                if bulk or lv.rows.cached > ROWS_KEPT_BETWEEN_RUNS:
                    lv.rows.release()
        if report.batches:
            # Tables of a fresh projection are bulk-loaded without secondary indexes.
            self.views.create_indexes([lv.projection for lv in live if lv.position == head])
        report.failures = [f for f, _ in failed.values()]
        if failed:
            first, cause = min(failed.values(), key=lambda fc: fc[0].position)
            others = [f for f, _ in failed.values() if f is not first]
            raise _failure_error(first, cause, others) from cause
        return report

    def _catch_up(
        self,
        live: list[_Live],
        head: int,
        report: RunReport,
        failed: dict[str, tuple[ProjectionFailure, BaseException]],
        *,
        until_caught_up: bool,
    ) -> None:
        try:
            while True:
                active = [lv for lv in live if lv.projection.name not in failed]
                pending = [lv for lv in active if lv.position < head]
                if not pending:
                    break
                start = min(lv.position for lv in pending) + 1
                if not report.start:
                    report.start = start
                stop = min(start + self.batch_size - 1, head)
                self._batch(pending, start, stop, failed, report)
                report.batches += 1
                if not until_caught_up:
                    break
        except BaseException:
            self._live = None  # caches may hold rows that were never committed
            raise

    def follow(
        self,
        stop: threading.Event,
        *,
        interval: float = 0.005,
        give_up_after: float | None = DEFAULT_GIVE_UP_AFTER,
        say: Callable[[str], None] | None = None,
    ) -> None:
        """Keep applying new events until ``stop`` is set; polls every ``interval`` seconds.

        Raises whatever :meth:`run` raises: a failed projection stops the follower. But a
        batch another runner committed first (a report catching the same views up) is not
        an error here: those events are applied, so the follower re-reads the positions,
        with fresh caches (its cached rows are those of the refused batch), and goes on.

        Nor is a lost database server (:class:`ConnectionLost`: a restart, a failover): the
        follower says so (``say``, default a logged warning), waits, backing off, and
        starts again from the positions committed in the views, up to ``give_up_after``
        seconds (None: for ever), then raises it. Rows and positions commit together, so
        a batch whose commit was lost is either in the views, positions and all, or
        applied again; a commit that landed while its answer was lost is found by the
        position check (a ConcurrencyConflict, above) and not applied twice.
        """
        outage = Outage(give_up_after, say=say, stop=stop)
        while not stop.is_set():
            try:
                report = self.run()
            except ConcurrencyConflict:
                self._live = None
                continue
            except ConnectionLost as exc:
                self._live = None  # positions and cached rows are re-read from the views
                outage.wait(exc)
                continue
            outage.over(f"following from position {report.head:,}")
            if report.events == 0:
                stop.wait(interval)

    # -- one batch ------------------------------------------------------------------------

    def _batch(
        self,
        pending: list[_Live],
        start: int,
        stop: int,
        failed: dict[str, tuple[ProjectionFailure, BaseException]],
        report: RunReport,
    ) -> None:
        in_step = [lv for lv in pending if lv.position == start - 1]
        behind = [lv for lv in pending if lv.position != start - 1]
        records: list[EventRecord] = []
        broken: dict[str, tuple[int, BaseException]] = {}
        read_error: TraceboundError | None = None
        pages = read_record_pages(
            self.store,
            start=start,
            stop=stop,
            decoder=self.decoder,
            payload_kinds=_payload_kinds(pending),
        )
        try:
            # Projections level with the batch start share one pass over the records, and
            # each page is applied as soon as it is read, while its records are in cache.
            for page in pages:
                records.extend(page)
                self._dispatch(in_step, page, records, broken)
        except (StoreBusy, ConnectionLost):
            # Another process holds the ledger's lock, or its server went away: no record
            # is bad, so no projection is marked failed; nothing of this batch is committed,
            # and the next run reads it again from the last commit.
            raise
        except TraceboundError as bad_record:  # the records before it still count
            read_error = bad_record
        if read_error is not None:
            bad = start + len(records)
            for lv in pending:
                if lv.position < bad:
                    f = ProjectionFailure(lv.projection.name, bad, str(read_error))
                    failed[lv.projection.name] = (f, read_error)
        for lv in behind:  # a projection added later, or one retried after a failure
            later = [r for r in records if r["position"] > lv.position]
            self._dispatch([lv], later, later, broken)
        last = records[-1]["position"] if records else start - 1
        writes = []
        for lv in pending:
            name = lv.projection.name
            if name in broken:
                position, exc = broken[name]
                self._replay_before(lv, records, position)
                f = ProjectionFailure(name, position, f"{type(exc).__name__}: {exc}")
                failed[name] = (f, exc)
                new_position = position - 1
            else:
                new_position = max(lv.position, last)
            fail = failed.get(name)
            writes.append(
                TableWrite(
                    lv.projection,
                    expected_position=lv.position,
                    new_position=new_position,
                    rows=lv.rows.drain(),
                    failed_position=None if fail is None else fail[0].position,
                    error=None if fail is None else fail[0].error,
                )
            )
        self.views.commit(writes, self._anchor(last) if records else None)
        for lv, w in zip(pending, writes, strict=True):
            lv.position = w.new_position
        report.events += len(records)
        if self.on_commit is not None:
            self.on_commit(last)

    @staticmethod
    def _dispatch(
        live: list[_Live],
        records: Sequence[EventRecord],
        so_far: Sequence[EventRecord],
        broken: dict[str, tuple[int, BaseException]],
    ) -> None:
        """Apply records to projections; those that raise are added to ``broken``, with where.

        ``so_far`` is the batch's records up to and including ``records`` (for the slow path
        below); a projection already in ``broken`` is skipped.

        Chunk by chunk, and in a chunk projection by projection, each over the chunk's
        records of its kinds in log order: projections share nothing but the records, so
        this is the same as interleaving them event by event, without a dispatch per event
        and projection. Chunks of a few thousand records stay in the CPU cache while every
        projection walks them (a whole batch did not: walking it seven times cost more than
        the dispatch saved). A projection with an ``apply_many`` gets each chunk in one
        call; if that raises, its cache is thrown away and the batch so far applied again
        event by event, which finds the failing event (or, if ``apply`` does not fail,
        leaves the rows exactly as ``apply`` computes them, logs a warning, and uses
        ``apply`` for the rest of the run).
        """
        kind_sets = {lv.projection.kinds for lv in live}
        done = len(so_far) - len(records)
        for begin in range(0, len(records), _CHUNK):
            end = begin + _CHUNK
            selected = _select(records[begin:end], kind_sets)
            for lv in live:
                name = lv.projection.name
                kinds = lv.projection.kinds
                chosen = selected[kinds]
                if not chosen or name in broken:
                    continue
                rows = lv.rows
                many_error: Exception | None = None
                if lv.many is not None:
                    try:
                        lv.many(chosen, rows)
                        continue
                    except Exception as exc:  # noqa: BLE001 - located by the per-event pass below
                        many_error = exc
                        rows.discard()
                        chosen = _select(so_far[: done + end], {kinds})[kinds]
                apply = lv.apply
                record: EventRecord | None = None
                try:
                    for record in chosen:
                        apply(record, rows)
                except Exception as exc:  # noqa: BLE001 - projection code is reported, typed
                    assert record is not None
                    broken[name] = (record["position"], exc)
                    continue
                if many_error is not None:
                    # apply_many raised where apply, event by event, did not: it broke its
                    # contract (the same rows as apply). Say so once, and stop using it for
                    # the rest of this run: trying it on every later chunk would re-apply
                    # the whole batch so far each time (quadratic in the batch).
                    lv.many = None
                    _log.warning(
                        "projection %r: apply_many raised %s: %s, but apply succeeded on "
                        "the same events; apply_many must give the same rows as apply, so "
                        "this run uses apply for the rest of its events",
                        name,
                        type(many_error).__name__,
                        many_error,
                    )

    @staticmethod
    def _replay_before(lv: _Live, records: list[EventRecord], position: int) -> None:
        """Redo a failed projection's batch up to the event before ``position``.

        The failing ``apply`` may have changed cached rows half-way, so the cache is thrown
        away and the good prefix applied again from the stored rows.
        """
        lv.rows.discard()
        kinds = lv.projection.kinds
        for record in records:
            pos = record["position"]
            if pos >= position:
                break
            if pos > lv.position and (kinds is None or record["event_type"] in kinds):
                lv.apply(record, lv.rows)
