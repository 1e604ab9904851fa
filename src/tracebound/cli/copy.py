"""`tracebound copy SRC DST`: move a ledger between backends, byte for byte, verifying.

Thin on purpose: the copy, its checks and its resume rule live in
:mod:`tracebound.store.copy`; this module opens the two stores, finds the verifier key the
way every other command does, and renders the report.
"""

from __future__ import annotations

from contextlib import ExitStack, closing
from pathlib import Path
from typing import Annotated

import typer

from tracebound.cli._common import (
    EXIT_DAMAGED,
    EXIT_INCOMPLETE,
    JsonOpt,
    KeyOpt,
    VerifierOpt,
    console,
    emit_json,
    fail,
    handled,
    interruption,
    progress_bar,
    safe_text,
    try_verifier,
)
from tracebound.errors import ConfigError, LedgerDamaged, TraceboundError
from tracebound.integrity.keys import NoteVerifier
from tracebound.integrity.verify import PAGE
from tracebound.ledger import stored_origin
from tracebound.store.blobs import FileBlobStore
from tracebound.store.copy import (
    CHUNK,
    BlobListing,
    CopyDiverged,
    CopyReport,
    copy_blobs,
    copy_ledger,
)
from tracebound.store.jsonl import JsonlStore
from tracebound.store.port import LedgerStore
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.sqlite_blobs import SQLiteBlobStore
from tracebound.store.url import is_postgres_url, open_store
from tracebound.store.witness import binding_path, read_binding, store_identity

__all__ = ["copy"]


def copy(
    source: Annotated[
        str, typer.Argument(metavar="SRC_URL", help="Store URL to copy from (it is only read).")
    ],
    destination: Annotated[
        str,
        typer.Argument(
            metavar="DST_URL",
            help="Store URL to copy into: created if missing, or a partial copy to resume.",
        ),
    ],
    key: KeyOpt = None,
    verifier_key: VerifierOpt = None,
    batch: Annotated[
        int,
        typer.Option(
            "--batch",
            min=PAGE,
            help=f"Events verified and written per destination transaction (multiple of {PAGE}).",
        ),
    ] = CHUNK,
    blobs: Annotated[
        Path | None,
        typer.Option(
            "--blobs",
            help="Folder to copy the artifacts (blobs) into. Default: the destination's own "
            "(a SQLite ledger's file, a JSONL ledger's blobs/); needed for PostgreSQL.",
        ),
    ] = None,
    source_blobs: Annotated[
        Path | None,
        typer.Option(
            "--source-blobs",
            help="Folder the source's blobs are in. Default: the source's own (a SQLite "
            "ledger's file, a JSONL ledger's blobs/); a PostgreSQL ledger has none.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Copy a ledger to another backend: same bytes, same checkpoints, verified as it goes.

    The source is verified chunk by chunk as it is read, and the copy must reach the
    source's signed Merkle roots at every checkpoint (signatures are checked with the
    verifier key, when there is one). The artifacts the events name (blobs) go along, each
    checked against its digest. Interrupted? Run the same command again: it checks what
    the destination already holds against the source and continues after it.

    Exit 0 when the copy is complete and every check passed; 1 when the source is damaged
    (nothing past the first bad position is written) or the destination holds another
    log; 3 when the copy is complete but signatures could not be checked (no key).
    """
    with handled(as_json):
        if batch % PAGE:  # before the destination is created, not after
            raise ConfigError(f"--batch must be a multiple of {PAGE}, not {batch}")
        verifier = try_verifier(verifier_key, key)
        with ExitStack() as opened:
            src = opened.enter_context(closing(open_store(source)))
            src_blobs = _blob_place(src, source_blobs)
            if isinstance(src_blobs, SQLiteBlobStore):
                opened.enter_context(src_blobs)
            if src_blobs is not None and blobs is None and is_postgres_url(destination):
                _refuse_blobs_into_postgres(src_blobs)
            dst = opened.enter_context(closing(open_store(destination, create=True)))
            if store_identity(dst) == store_identity(src):
                raise ConfigError("source and destination are the same store")
            _refuse_place_of_another_log(src, dst)
            report = _run(src, dst, verifier, batch, as_json)
            moved = _copy_blobs(src_blobs, dst, blobs, as_json)
    if as_json:
        emit_json({"ok": report.complete, **report.as_dict(), "blobs": moved})
    else:
        resumed = f" (resumed after {report.resumed_from:,})" if report.resumed_from else ""
        console.print(
            f"Copied [bold]{report.size:,}[/] event(s) to "
            f"{safe_text(report.destination)}{resumed}: "
            f"{report.imported:,} written now, root {report.root[:16]}…"
        )
        console.print(
            f"Checkpoints: {len(report.checkpoints)} matched ({report.checkpoints_copied} "
            f"copied now); signatures: {report.signatures}."
        )
        if moved is None:
            console.print(
                "Blobs: none copied: a PostgreSQL ledger keeps its artifacts in the folder "
                "its runs were given; name it with --source-blobs DIR to copy them."
            )
        else:
            console.print(f"Blobs: {moved['copied']:,} copied, {moved['present']:,} already there.")
    if not report.complete:
        raise typer.Exit(EXIT_INCOMPLETE)


def _refuse_place_of_another_log(src: LedgerStore, dst: LedgerStore) -> None:
    """Refuse a destination whose place is bound to another origin (a ledger that was there
    and is gone): the copy would pass, and the next ``verify`` there report it DAMAGED
    against that origin's witness (README, "What is checked, and against whom")."""
    origin = stored_origin(src)
    if origin is None or stored_origin(dst) is not None:
        return  # a destination with an origin of its own is judged by copy_ledger
    identity = store_identity(dst)
    bound = read_binding(identity)
    if bound is None or bound == origin:
        return
    raise ConfigError(
        f"the destination's place is bound to the log {bound!r} ({binding_path(identity)}), "
        f"not to the source's {origin!r}: a copy there would be judged against the other "
        "log's witness; copy elsewhere, or, if that log is gone on purpose, delete the "
        "binding file (its witness no longer guards this place) and run the copy again"
    )


def _run(
    src: LedgerStore, dst: LedgerStore, verifier: NoteVerifier | None, batch: int, as_json: bool
) -> CopyReport:
    """The copy with a progress bar; damage and divergence are reported with their position."""
    try:
        with progress_bar("copying", enabled=not as_json) as update:
            return copy_ledger(src, dst, verifier=verifier, chunk=batch, progress=update)
    except LedgerDamaged as exc:
        written = dst.size()
        fail(
            f"the source is damaged: {exc}; the destination holds {written:,} verified event(s)",
            code=EXIT_DAMAGED,
            as_json=as_json,
            kind=type(exc).__name__,
            damage=exc.as_dict(),  # the shape every command prints damage in
            position=exc.position,
            written=written,
        )
    except CopyDiverged as exc:
        fail(
            str(exc),
            code=EXIT_DAMAGED,
            as_json=as_json,
            kind=type(exc).__name__,
            position=exc.position,
        )
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM
        try:  # the session may have died with the statement Ctrl-C cut short
            level: int | None = dst.size()
        except TraceboundError:
            level = None
        held = "" if level is None else f"; the destination holds {level:,} verified event(s)"
        message, code, extra = interruption(exc)
        fail(
            f"{message}{held}: run the same command again to resume",
            code=code,
            as_json=as_json,
            written=level,
            **extra,
        )


def _blob_place(
    store: LedgerStore, folder: Path | None, *, durable: bool = False
) -> BlobListing | None:
    """The store's blobs, where a run on it keeps them (``RunnerConfig.blob_store``): the
    folder given, a SQLite ledger's own file (with the blob files an older version left
    beside it), a JSONL ledger's ``blobs`` folder; None for PostgreSQL without a folder."""
    if folder is not None:
        return FileBlobStore(folder.expanduser())
    if isinstance(store, SQLiteStore):
        legacy = store.path.parent / "blobs"
        fallback = FileBlobStore(legacy) if legacy.is_dir() else None
        # Durable when written to: a copy appends no entry after its blobs (ADR 0009).
        return SQLiteBlobStore(store, fallback=fallback, durable=durable)
    if isinstance(store, JsonlStore):
        return FileBlobStore(store.path / "blobs")
    return None


def _refuse_blobs_into_postgres(src_blobs: BlobListing) -> None:
    """Before the destination is made: its blobs would have nowhere to go."""
    held = len(src_blobs.digests())
    if held:
        raise ConfigError(
            f"the source holds {held:,} blob(s) (the artifacts its events name) and a "
            "PostgreSQL ledger keeps none: pass --blobs DIR, the folder its runs will be "
            "given as --blobs"
        )


def _copy_blobs(
    src_blobs: BlobListing | None, dst: LedgerStore, folder: Path | None, as_json: bool
) -> dict[str, int] | None:
    """Copy the blobs after the events; None when the source's blobs are not known."""
    if src_blobs is None:
        return None
    target = _blob_place(dst, folder, durable=True)
    if target is None:  # a PostgreSQL destination, and the source held no blob
        return {"copied": 0, "present": 0}
    try:
        copied, present = copy_blobs(src_blobs, target)
    except KeyboardInterrupt as exc:
        message, code, extra = interruption(exc)
        fail(
            f"{message} while copying the blobs (every event is copied): run the same command "
            "again to copy the rest",
            code=code,
            as_json=as_json,
            **extra,
        )
    finally:
        if isinstance(target, SQLiteBlobStore):
            target.close()
    return {"copied": copied, "present": present}
