"""`tracebound inspect RUN-ID`: a remediation run, its RetryLedger re-verified every time.

`tracebound inspect` takes a ledger stream id (cli/app.py) or a remediation run id: when
``<store>/remediation/<id>/attempts.jsonl`` exists, or ``--attempts PATH`` is given, the
RetryLedger of that run is re-verified from ``chain_head.bin`` through every line (ADR-0005:
"inspect re-verifies the chain on every invocation") and its attempts are shown. When the
store holds the planning side's stream ``attempts/<id>``, its last anchor's hash must be
what chain_head.bin holds, and vouches for it when it is newer than the last recorded
attempt (an attempt not yet entered); otherwise the file must be exactly the head the last
line continued.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tracebound.cli._common import (
    EXIT_DAMAGED,
    EXIT_USAGE,
    console,
    emit_json,
    err_console,
    fail,
    handled,
    safe_text,
    store_dir,
)
from tracebound.cli._tables import fit
from tracebound.errors import ConfigError, StoreNotFound
from tracebound.pipeline.retry.ledger import (
    ATTEMPTS_FILE,
    REMEDIATION,
    AttemptsVerification,
    planning_head,
    verify_attempts,
)
from tracebound.store.url import open_store

__all__ = ["AttemptsOpt", "inspect_remediation"]


def _planning_head(store: str | None, run_id: str) -> bytes | None:
    """The ledger's view of the planning head, when there is a ledger holding the run."""
    try:
        backend = open_store(store)
    except (StoreNotFound, ConfigError):
        return None
    try:
        head = planning_head(backend, run_id)
    finally:
        backend.close()
    return None if head is None else bytes(head)


def _attempts_table(state: AttemptsVerification) -> Table:
    table = Table(title=f"remediation run {safe_text(state.run_dir.name)}", show_lines=False)
    for col in ("#", "attempt", "plan", "gates", "confidence", "score", "chain hash"):
        table.add_column(col)
    for record, digest in zip(state.attempts, state.hashes, strict=True):
        trust = record.trust
        verdict = "-"
        if trust is not None:
            verdict = "[green]passed[/]" if trust.passed else "[red]failed[/]"
        table.add_row(
            str(record.attempt_index),
            str(record.attempt_id)[:8],
            safe_text(record.plan_tag),
            verdict,
            "-" if trust is None else safe_text(trust.confidence),
            "-" if trust is None else str(trust.score),
            digest.hex()[:12],
        )
    fit(table, give={"plan": "ellipsis", "chain hash": "crop"}, console=console)
    return table


def _inspect_run(run_dir: Path, run_id: str, store: str | None, as_json: bool) -> None:
    with handled(as_json):
        if not (run_dir / ATTEMPTS_FILE).is_file():
            raise ConfigError(f"no {ATTEMPTS_FILE} in {run_dir}/")
        state = verify_attempts(run_dir, prev_chain_head=_planning_head(store, run_id))
    damage = state.damage
    if as_json:
        emit_json(
            {
                "ok": damage is None,
                "run_dir": str(run_dir),
                "planning_head": None if state.planning_head is None else state.planning_head.hex(),
                "head": None if state.head is None else state.head.hex(),
                "pending_attempt": state.pending,
                "attempts": [
                    {**r.model_dump(mode="json"), "chain_hash": h.hex()}
                    for r, h in zip(state.attempts, state.hashes, strict=True)
                ],
                "damage": None
                if damage is None
                else {
                    "kind": "AuditChainCorrupted",
                    "line": damage.line,
                    "detail": damage.detail,
                    "message": damage.message(),
                    "remediation": REMEDIATION,
                },
            }
        )
    else:
        if state.attempts:
            console.print(_attempts_table(state))
        if damage is None:
            tail = " (the planning side has an attempt in flight)" if state.pending else ""
            head = "-" if state.head is None else state.head.hex()[:16] + "…"
            console.print(
                f"[green]chain ok[/]: {len(state.attempts)} attempt(s) continue the planning "
                f"chain, head {head}{tail}"
            )
        else:
            err_console.print(f"[bold red]{safe_text(damage.message())}[/]")
    if damage is not None:
        raise typer.Exit(EXIT_DAMAGED)


AttemptsOpt = Annotated[
    Path | None,
    typer.Option(
        "--attempts",
        help="A remediation run's attempts.jsonl to re-verify (chain_head.bin beside it).",
        dir_okay=False,
        show_default=False,
    ),
]


def inspect_remediation(
    target: str | None, *, store: str | None, attempts: Path | None, as_json: bool
) -> bool:
    """Inspect ``target`` as a remediation run if it is one; False leaves it to stream mode.

    It is one when ``--attempts`` is given or ``<store>/remediation/<target>/attempts.jsonl``
    exists. With ``--attempts``, ``target`` is optional: the run id is then the name of the
    run's folder. Exits 1 (after saying where and what to do) when the chain does not verify.
    """
    if attempts is not None:
        run_dir = attempts if attempts.is_dir() else attempts.parent
        if not attempts.exists():
            fail(
                f"--attempts: no such file or folder: {attempts}",
                code=EXIT_USAGE,
                as_json=as_json,
                kind=ConfigError.__name__,
            )
        if not attempts.is_dir() and attempts.name != ATTEMPTS_FILE:
            fail(
                f"--attempts names {attempts}; give a run's {ATTEMPTS_FILE} (with "
                "chain_head.bin beside it) or the run's folder",
                code=EXIT_USAGE,
                as_json=as_json,
                kind=ConfigError.__name__,
            )
        _inspect_run(run_dir, target or run_dir.resolve().name, store, as_json)
        return True
    if target is None or "/" in target or target in ("", ".", ".."):
        return False
    run_dir = store_dir(store) / "remediation" / target
    if not (run_dir / ATTEMPTS_FILE).is_file():
        return False
    _inspect_run(run_dir, target, store, as_json)
    return True
