"""`tracebound prove-consistency` and `verify-consistency`: the log an auditor saw then is a
prefix of the log signed now (``tracebound-consistency/1``, docs/evidence-format.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tracebound.cli._common import (
    JsonOpt,
    KeyOpt,
    OfflineKeyOpt,
    OriginOpt,
    ProofOutputOpt,
    StoreOpt,
    VerifierOpt,
    console,
    emit_json,
    handled,
    prove_into,
    safe_text,
    try_verifier,
    write_output,
    write_stdout,
)
from tracebound.errors import ConfigError, ProofError
from tracebound.integrity.consistency import (
    ConsistencyBundle,
    ConsistencyResult,
    held_note,
    verify_consistency_bundle,
)
from tracebound.integrity.keys import NoteVerifier
from tracebound.integrity.note import Checkpoint, open_checkpoint
from tracebound.store.keyfile import load_verifier

__all__ = ["prove_consistency", "verify_consistency"]

HeldArg = Annotated[
    Path,
    typer.Argument(
        help="The signed checkpoint you kept: a note file (`checkpoint --note`), or an "
        "inclusion proof, evidence or consistency proof file you received earlier (its "
        "checkpoint is taken).",
        show_default=False,
    ),
]


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc


def _held(path: Path) -> str:
    try:
        return held_note(_read(path, "the checkpoint held"))
    except ProofError as exc:
        raise ProofError(f"{path}: {exc}") from exc


def prove_consistency(
    held: HeldArg,
    store: StoreOpt = None,
    key: KeyOpt = None,
    verifier_key: VerifierOpt = None,
    output: ProofOutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Prove that the log signed now extends a checkpoint someone kept (consistency proof).

    The proof runs from the checkpoint kept, through the hand-over checkpoint of every key
    rotation since, to the newest checkpoint; whoever kept it checks it offline with
    `tracebound verify-consistency` and the key that signed it. Exits 1 when this ledger
    cannot extend it (rewritten since: a fork; rolled back behind it; or a checkpoint none
    of its keys signed), 2 when no checkpoint is signed yet or it is of another log.
    """
    with handled(as_json):
        note = _held(held)
        bundle, text = prove_into(
            store, key, verifier_key, output, lambda led: led.prove_consistency(note)
        )
    if as_json or output is None:
        write_stdout(text)
        return
    first, last = (
        open_checkpoint(s.checkpoint, s.key) for s in (bundle.steps[0], bundle.steps[-1])
    )
    rotations = sum(
        1 for a, b in zip(bundle.steps, bundle.steps[1:], strict=False) if a.key != b.key
    )
    through = f", through {rotations} key hand-over(s)" if rotations else ""
    console.print(
        f"Consistency proof from the checkpoint of {first.size:,} events to the newest of "
        f"{last.size:,}{through} written to [bold]{safe_text(output)}[/]. "
        "Check it with `tracebound verify-consistency`."
    )


KeptKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--verifier-key",
        envvar="TRACEBOUND_VERIFIER_KEY",
        help="The key that signed the checkpoint you kept: the text `tracebound keys show` "
        "printed then (name+hash+key), or a file holding it; nothing else is needed. "
        "Default: this machine's own, when it holds the ledger's signing key.",
        show_default=False,
    ),
]
NewestKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--newest-key",
        help="The key you know signs the ledger now (name+hash+key, or a file): the proof "
        "must end with it. Without it, the key you kept vouches for every key handed over "
        "to since; should that key have leaked, it could vouch for a forgery.",
        show_default=False,
    ),
]


def verify_consistency(
    file: Annotated[
        Path, typer.Argument(help="Proof file written by `tracebound prove-consistency`.")
    ],
    key: OfflineKeyOpt = None,
    verifier_key: KeptKeyOpt = None,
    held: Annotated[
        Path | None,
        typer.Option(
            "--held",
            help="The checkpoint you kept (as for `prove-consistency`): the proof must start "
            "from it. Without it, the proof's own first checkpoint is taken as the one kept.",
            show_default=False,
        ),
    ] = None,
    newest_key: NewestKeyOpt = None,
    origin: OriginOpt = None,
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="Once the proof holds, replace the --held file with the newest checkpoint: "
            "next time, ask for a proof from there.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check offline that the log signed now begins with the log of a checkpoint you kept.

    Needs only the key that signed the checkpoint you kept (--verifier-key); the key
    rotations since are followed through their hand-over checkpoints, which the key before
    each co-signed. Exits 0 when the proof holds, 1 when it does not (a rewritten or
    forked log, an edited file, a signature that does not verify), 2 when a file or key
    cannot be read.
    """
    with handled(as_json):
        if update and held is None:
            raise ConfigError("--update replaces the --held file: give --held")
        verifier = try_verifier(verifier_key, key)
        if verifier is None:
            raise ConfigError(
                "verify-consistency needs --verifier-key (the key that signed the checkpoint "
                "you kept)"
            )
        expected = None if newest_key is None else load_verifier(newest_key)
        kept = None if held is None else open_checkpoint(_held(held), verifier, origin=origin)
        try:
            bundle = ConsistencyBundle.from_json(_read(file, "the proof"))
        except ProofError as exc:
            raise ProofError(f"{file}: {exc}") from exc
        result = verify_consistency_bundle(
            bundle, verifier, origin=origin, held=kept, newest_key=expected
        )
        if update and held is not None:
            write_output(held, bundle.steps[-1].checkpoint.encode("utf-8"), "--held")
    _report(result, held if update else None, as_json=as_json)


def _cp(cp: Checkpoint) -> dict[str, Any]:
    return {"size": cp.size, "root": cp.root.hex()}


def _report(result: ConsistencyResult, updated: Path | None, *, as_json: bool) -> None:
    old, new = result.old, result.new
    if as_json:
        emit_json(
            {
                "ok": True,
                "origin": new.origin,
                "old": _cp(old),
                "new": _cp(new),
                "keys": [k.format() for k in result.keys],
                "handovers": [_cp(c) for c in result.handovers],
                "newest_key": result.newest_key.format(),
                "updated": None if updated is None else str(updated),
            }
        )
        return
    console.print(
        "[bold green]OK[/]: "
        + safe_text(
            f"the first {old.size:,} events of {new.origin} are the ones you kept: the log "
            f"signed now ({new.size:,} events) extends them."
        )
    )
    for key, cp in zip(result.keys[1:], result.handovers, strict=True):
        console.print(safe_text(f"  key handed over at size {cp.size:,} to {_key_id(key)}"))
    if result.handovers:
        console.print(
            safe_text(
                f"The ledger is signed by {result.newest_key.format()} now: check the next "
                "proof from the newest checkpoint with that key."
            )
        )
    if updated is not None:
        console.print(safe_text(f"{updated} now holds the checkpoint of {new.size:,} events."))


def _key_id(key: NoteVerifier) -> str:
    return f"{key.name} ({key.key_hash:08x})"
