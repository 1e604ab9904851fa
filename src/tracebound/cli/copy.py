"""`tracebound copy SRC DST`: move a ledger between backends, byte for byte, verifying.

Thin on purpose: the copy, its checks and its resume rule live in
:mod:`tracebound.store.copy`; this module opens the two stores, finds the verifier key the
way every other command does, and renders the report.
"""

from __future__ import annotations

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
from tracebound.store.copy import CHUNK, CopyDiverged, CopyReport, copy_ledger
from tracebound.store.port import LedgerStore
from tracebound.store.url import open_store

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
    as_json: JsonOpt = False,
) -> None:
    """Copy a ledger to another backend: same bytes, same checkpoints, verified as it goes.

    The source is verified chunk by chunk as it is read, and the copy must reach the
    source's signed Merkle roots at every checkpoint (signatures are checked with the
    verifier key, when there is one). Interrupted? Run the same command again: it checks
    what the destination already holds against the source and continues after it.

    Exit 0 when the copy is complete and every check passed; 1 when the source is damaged
    (nothing past the first bad position is written) or the destination holds another
    log; 3 when the copy is complete but signatures could not be checked (no key).
    """
    with handled(as_json):
        if batch % PAGE:  # before the destination is created, not after
            raise ConfigError(f"--batch must be a multiple of {PAGE}, not {batch}")
        verifier = try_verifier(verifier_key, key)
        src = open_store(source)
        try:
            dst = open_store(destination, create=True)
            try:
                if dst.url == src.url:
                    raise ConfigError("source and destination are the same store")
                report = _run(src, dst, verifier, batch, as_json)
            finally:
                dst.close()
        finally:
            src.close()
    if as_json:
        emit_json({"ok": report.complete, **report.as_dict()})
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
    if not report.complete:
        raise typer.Exit(EXIT_INCOMPLETE)


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
