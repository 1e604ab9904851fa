"""`tracebound project run|rebuild|status`: keep the materialised views current.

The views live in their own SQLite file beside the ledger (``.tracebound/views.db`` by
default; ``.tracebound/views-<place>.db`` for a PostgreSQL ledger; ``--views`` or
``TRACEBOUND_VIEWS`` elsewhere), or in a PostgreSQL schema
(``--views postgresql://…?schema=name``). They are derived data: deleting them loses
nothing, and ``rebuild`` replays them from the log.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final
from urllib.parse import urlsplit

import typer
from blake3 import blake3
from rich.table import Table

from tracebound.cli._common import (
    EXIT_DAMAGED,
    FollowIntervalOpt,
    GiveUpAfterOpt,
    JsonOpt,
    StoreOpt,
    console,
    emit_json,
    err_console,
    give_up_after,
    handled,
    progress_bar,
    safe_text,
    say_on_stderr,
    store_dir,
)
from tracebound.cli._tables import fit
from tracebound.errors import ConcurrencyConflict, ConfigError, ViewsOfAnotherLog
from tracebound.projections.runner import (
    DEFAULT_BATCH,
    ProjectionRunner,
    ProjectionStatus,
    RunReport,
    default_projections,
)
from tracebound.projections.sqlite_views import VIEWS_FILENAME, SQLiteViews
from tracebound.store.port import LedgerStore
from tracebound.store.reconnect import DEFAULT_GIVE_UP_AFTER
from tracebound.store.url import POSTGRES_SCHEMES, open_store, store_path
from tracebound.store.witness import store_identity

if TYPE_CHECKING:
    from tracebound.projections.postgres_views import PostgresViews

__all__ = ["ViewsOpt", "open_runner", "open_views", "project_app", "views_path"]

project_app = typer.Typer(
    help="Keep the materialised views (cost, ROI, trail, plugins, gates, learning) current.",
    no_args_is_help=True,
)

ViewsOpt = Annotated[
    str | None,
    typer.Option(
        "--views",
        envvar="TRACEBOUND_VIEWS",
        metavar="FILE|URL",
        help="Views database: a SQLite file (or sqlite:///path), or "
        "postgresql://user@host/db?schema=name (default schema tracebound_views). "
        "Default: views.db beside the ledger; for a PostgreSQL ledger, "
        ".tracebound/views-<place>.db, one file per ledger.",
        show_default=False,
    ),
]
BatchOpt = Annotated[int, typer.Option("--batch", min=1, help="Events per views transaction.")]


def _scheme(views: str | Path | None) -> str | None:
    """The URL scheme of a ``--views`` value (lower case), or None for a plain path.

    Raises:
        ConfigError: a URL ``urlsplit`` cannot read (a bracket left open, say).
    """
    if views is None or "://" not in str(views):
        return None
    try:
        return urlsplit(str(views)).scheme.lower()
    except ValueError as exc:  # the message does not quote the URL: it may hold a password
        raise ConfigError(f"invalid --views URL: {exc}") from None


def views_path(
    store: str | None, views: str | Path | None, ledger: LedgerStore | None = None
) -> Path:
    """Where the SQLite views database is: ``--views`` (a path or ``sqlite:///path``), else
    ``views.db`` in the store directory; for a PostgreSQL ``ledger``, a file of its own in
    the local ``.tracebound`` (``views-<blake3 of its place>.db``).

    A PostgreSQL ledger has no folder of its own, and two ledgers sharing one views file
    would refuse each other's views (``ViewsOfAnotherLog``) at every run.

    Raises:
        ConfigError: ``--views`` is a URL of another scheme. (A ``postgresql://`` URL names
            no file: see :func:`open_views`.) It is refused rather than taken for a file
            name, which would create a SQLite file at a path like ``mysql:/host/db``.
    """
    if views is None:
        if ledger is not None and _is_postgres(ledger.url):
            place = blake3(store_identity(ledger).encode()).hexdigest()[:16]
            return store_dir(store) / f"views-{place}.db"
        return store_dir(store) / VIEWS_FILENAME
    scheme = _scheme(views)
    if scheme is None:
        return Path(views)
    if scheme != "sqlite":
        raise ConfigError(
            f"unsupported --views URL scheme {scheme!r}; use a file path, sqlite:///path "
            "or postgresql://user@host/db?schema=name"
        )
    return store_path(str(views))


def _is_postgres(views: str | Path | None) -> bool:
    return _scheme(views) in POSTGRES_SCHEMES


def open_views(
    store: str | None,
    views: str | Path | None,
    *,
    existing: bool = False,
    ledger: LedgerStore | None = None,
) -> SQLiteViews | PostgresViews:
    """The views a ``--views`` value names: a PostgreSQL schema for a ``postgresql://`` URL
    (psycopg is imported only then), else the SQLite file (:func:`views_path`; ``ledger``
    is the opened store, which names the default file of a PostgreSQL ledger).

    With ``existing``, views that are not there yet are a ``ConfigError`` rather than
    created: a read-only command must not leave a file or a schema behind.
    """
    if _is_postgres(views):
        try:
            from tracebound.projections.postgres_views import PostgresViews  # noqa: PLC0415
        except ImportError as exc:  # psycopg is the optional `postgres` extra
            raise ConfigError(
                f"postgresql:// views need psycopg: pip install 'tracebound[postgres]' ({exc})"
            ) from exc
        return PostgresViews(str(views), create=not existing)
    path = views_path(store, views, ledger)
    if path.is_dir():  # SQLiteViews keeps its file in a folder it is given: look there
        path = path / VIEWS_FILENAME
    if existing and not path.is_file():
        raise ConfigError(
            f"no views database at {path}; `tracebound project run` creates it"
            + ("" if views is None else " (with the same --views)")
        )
    return SQLiteViews(path)


@contextmanager
def open_runner(
    store: str | None,
    views: str | Path | None,
    *,
    batch: int = DEFAULT_BATCH,
    update: bool = False,
    existing: bool = False,
    progress: bool = False,
) -> Iterator[ProjectionRunner[Any]]:
    """A runner over the store's log and the views (SQLite or PostgreSQL); both closed after.

    With ``update``, the views catch up with the log first (what every report does unless
    told not to), with a progress bar on a terminal when ``progress``. With ``existing``,
    views that are not there (a SQLite file, a PostgreSQL schema) are an error
    (``ConfigError``) rather than created: a read-only command must not leave them behind.
    ``Any``: the reports read either kind of views through the same ``select``.
    """
    backend = open_store(store)
    try:
        db = open_views(store, views, existing=existing, ledger=backend)
        try:
            runner = ProjectionRunner(backend, db, batch_size=batch)
            if update:
                runner = _catch_up(runner, show=progress)
            yield runner
        finally:
            db.close()
    finally:
        backend.close()


_CATCH_UP_TRIES: Final = 5
"""How often a report starts its catch-up over when another runner commits first."""


def _catch_up(runner: ProjectionRunner[Any], *, show: bool) -> ProjectionRunner[Any]:
    """Catch the views up for a report, beside any other runner of the same views.

    A `project run --follow` in another terminal applies the same events: when it commits
    a batch between this runner's read of the positions and its own commit, the commit is
    refused (ConcurrencyConflict) and nothing of it is written. The events are then applied
    already, so the report starts over from the positions as they now are, with a fresh
    runner (the old one's cached rows are those of the refused batch).
    """
    for _ in range(_CATCH_UP_TRIES - 1):
        try:
            _run_with_progress(runner, rebuild=False, show=show)
            break
        except ConcurrencyConflict:
            runner = ProjectionRunner(runner.store, runner.views, batch_size=runner.batch_size)
    else:
        _run_with_progress(runner, rebuild=False, show=show)  # the last try: a conflict is raised
    runner.on_commit = None
    return runner


def _report_dict(report: RunReport) -> dict[str, object]:
    return {"ok": True, "applied": report.events, "batches": report.batches, "head": report.head}


def _count_commit(report: RunReport, position: int) -> None:
    """Add a follower's commit to the catch-up's report: the summary a ``--follow`` prints
    at Ctrl-C is of everything applied, and says where the views are then."""
    if position > report.head:
        report.events += position - report.head
        report.batches += 1
        report.head = position


def _run_with_progress(
    runner: ProjectionRunner[Any],
    *,
    rebuild: bool,
    show: bool,
    names: list[str] | None = None,
    workers: int = 1,
) -> RunReport:
    """Catch up (or, with ``rebuild``, drop ``names``, default all, and replay) with a bar."""
    with progress_bar("rebuilding" if rebuild else "projecting", enabled=show) as update:
        runner.on_commit = lambda position: update(position, runner.store.size())
        return runner.rebuild(names, workers=workers) if rebuild else runner.run()


@project_app.command("run")
def run_cmd(
    store: StoreOpt = None,
    views: ViewsOpt = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep applying new events until Ctrl-C.")
    ] = False,
    interval: FollowIntervalOpt = 0.05,
    give_up: GiveUpAfterOpt = DEFAULT_GIVE_UP_AFTER,
    batch: BatchOpt = DEFAULT_BATCH,
    as_json: JsonOpt = False,
) -> None:
    """Catch every projection up with the log; with --follow, keep following it.

    A projection that fails on an event stops before it (its position says where) and the
    command exits 2; the others still catch up. Fix the cause and run again: the failed
    event is retried, never skipped. A follower whose PostgreSQL server goes away (a
    restart, a failover) says so on stderr, reconnects and goes on from the views' last
    commit, for up to --give-up-after seconds.
    """
    with handled(as_json), open_runner(store, views, batch=batch) as runner:
        report = _run_with_progress(runner, rebuild=False, show=not as_json)
        if follow:
            if not as_json:
                console.print(f"Caught up at position {report.head:,}; following (Ctrl-C stops).")
            stop = threading.Event()
            try:
                runner.on_commit = lambda position: _count_commit(report, position)
                runner.follow(
                    stop, interval=interval, give_up_after=give_up_after(give_up), say=say_on_stderr
                )
            except KeyboardInterrupt:  # after the last commit; the summary counts it
                stop.set()
    if as_json:
        emit_json(_report_dict(report))
    else:
        console.print(
            f"Applied {report.events:,} event(s) in {report.batches} batch(es); "
            f"views are at position {report.head:,}."
        )


@project_app.command("rebuild")
def rebuild_cmd(
    store: StoreOpt = None,
    views: ViewsOpt = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            metavar="NAME",
            help="Rebuild only this projection (repeatable): "
            + ", ".join(p.name for p in default_projections())
            + ".",
        ),
    ] = None,
    batch: BatchOpt = DEFAULT_BATCH,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            help="Split the projections over this many processes, each reading the log "
            "(a SQLite ledger with SQLite views; otherwise one process, and it says so). "
            "The progress bar follows this process's share.",
        ),
    ] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Drop projections' tables and replay them from position 0."""
    with handled(as_json), open_runner(store, views, batch=batch) as runner:
        used = workers if workers > 1 and runner.can_rebuild_in_parallel() else 1
        if used < workers and not as_json:
            err_console.print(
                "[bold yellow]note:[/] --workers needs a SQLite ledger and SQLite views; "
                "rebuilding in one process"
            )
        report = _run_with_progress(
            runner, rebuild=True, show=not as_json, names=only or None, workers=used
        )
    if as_json:
        emit_json({**_report_dict(report), "workers": used})
    else:
        processes = "" if used == 1 else f" by {used} processes"
        console.print(
            f"Rebuilt from {report.events:,} event(s) in {report.batches} batch(es){processes}."
        )


@project_app.command("status")
def status_cmd(store: StoreOpt = None, views: ViewsOpt = None, as_json: JsonOpt = False) -> None:
    """Each projection's position, lag behind the log, and last failure.

    Views built from another log (another ledger's, or this one's before it was restored
    from an older copy) are shown, and the command exits 1, as `project run` does on them.
    """
    problem: ViewsOfAnotherLog | None = None
    with handled(as_json), open_runner(store, views, existing=True) as runner:
        statuses = runner.status()
        try:
            runner.check_log()
        except ViewsOfAnotherLog as exc:
            problem = exc
    if as_json:
        error = {} if problem is None else {"error": _error_dict(problem)}
        emit_json({"ok": problem is None, "projections": [s.to_dict() for s in statuses], **error})
    else:
        _print_status(statuses)
    if problem is not None:
        if not as_json:
            err_console.print(f"[bold red]error:[/] {safe_text(str(problem))}")
        raise typer.Exit(EXIT_DAMAGED)


def _error_dict(exc: Exception) -> dict[str, str]:
    return {"kind": type(exc).__name__, "message": str(exc)}


def _print_status(statuses: list[ProjectionStatus]) -> None:
    table = Table(title="projections")
    for col in ("projection", "version", "position", "lag", "failed at", "error"):
        table.add_column(col, justify="left" if col in {"projection", "error"} else "right")
    for s in statuses:
        table.add_row(
            s.name,
            str(s.version),
            f"{s.position:,}",
            f"[{'green' if s.lag == 0 else 'yellow'}]{s.lag:,}[/]",
            "-" if s.failed_position is None else f"[red]{s.failed_position:,}[/]",
            safe_text(s.error or ""),  # it may quote recorded text: not rich markup
        )
    fit(table, give={"error": "fold"}, console=console)
    console.print(table)
