"""`tracebound repair`: cut off the unfinished write a crash left, only when asked.

A torn tail is never dropped or kept silently: reads, appends and `verify` report it until an
operator looks at it and runs this with ``--yes``. The cut bytes stay beside the file and the
cut is recorded, so a repair can itself be audited (and undone by hand).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tracebound.cli._common import EXIT_DAMAGED, JsonOpt, StoreOpt, console, emit_json, handled
from tracebound.store.jsonl import JsonlStore, TornTail
from tracebound.store.url import open_store
from tracebound.system import SystemClock

__all__ = ["repair"]

YesOpt = Annotated[
    bool,
    typer.Option("--yes", help="Cut the torn tail. Without it, only show what would be cut."),
]


def _describe(tail: TornTail) -> str:
    where = "" if tail.position is None else f" (position {tail.position} on)"
    return f"{tail.file}: {tail.length} byte(s) at byte offset {tail.offset}{where}: {tail.reason}"


def repair(store: StoreOpt = None, yes: YesOpt = False, as_json: JsonOpt = False) -> None:
    """Cut off a torn tail (a write a crash left unfinished) from a JSONL store.

    Without --yes, show what would be cut and exit 1. With --yes, keep the cut bytes beside
    the file (<file>.torn-<offset>, mode 0600), record the cut in repairs.jsonl and exit 0.
    SQLite and PostgreSQL need no repair: their write-ahead logs discard torn writes.
    """
    result: dict[str, Any]
    code = 0
    with handled(as_json):
        backend = open_store(store)
        try:
            if not isinstance(backend, JsonlStore):
                scheme = backend.url.split(":", 1)[0]
                message = (
                    f"nothing to repair: {scheme} discards torn writes itself "
                    "(its write-ahead log recovers on open)"
                )
                result = {"ok": True, "store": backend.url, "torn": [], "repaired": []}
            else:
                tails = backend.torn_tails()
                for tail in tails:
                    if not tail.crash:  # inside signed events: cut by hand, not torn
                        raise tail.damage()
                result = {
                    "ok": True,
                    "store": backend.url,
                    "torn": [t.as_dict() for t in tails],
                    "repaired": [],
                }
                if not tails:
                    message = (
                        "nothing to repair: no file ends in a torn write (repair cuts only "
                        "torn tails; `tracebound verify` checks for any other damage)"
                    )
                elif not yes:
                    result["ok"] = False
                    code = EXIT_DAMAGED
                    message = "would cut:\n  " + "\n  ".join(_describe(t) for t in tails)
                    message += "\nRe-run with --yes to cut it; the bytes are kept beside the file."
                else:
                    done = backend.repair(now=SystemClock().now())
                    result["repaired"] = [r.as_dict() for r in done]
                    message = "cut:\n  " + "\n  ".join(
                        f"{r.file}: {r.length} byte(s) at byte offset {r.offset}, "
                        f"kept in {r.kept} (sha256 {r.sha256[:16]}…)"
                        for r in done
                    )
                    message += "\nRecorded in repairs.jsonl. Run `tracebound verify` next."
        finally:
            backend.close()
    result["message"] = message
    if as_json:
        emit_json(result)
    else:
        console.print(message, highlight=False, markup=False)
    if code:
        raise typer.Exit(code)
