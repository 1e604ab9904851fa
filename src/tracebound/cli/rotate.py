"""`tracebound keys rotate`: hand a live ledger over to a new signing key (ADR 0017)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from tracebound.cli._common import (
    JsonOpt,
    KeyOpt,
    StoreOpt,
    WitnessOpt,
    console,
    emit_json,
    handled,
    open_ledger,
    resolve_key_path,
    safe_text,
    store_dir,
)
from tracebound.errors import KeyRotationRefused, TraceboundError
from tracebound.integrity.keys import NoteSigner
from tracebound.integrity.rotation import Rotation
from tracebound.ledger import Ledger, RotationRun
from tracebound.store.keyfile import (
    discard_next_key,
    install_rotated_key,
    load_signer,
    next_key,
    next_key_path,
)
from tracebound.store.rotations import read_rotations

__all__ = ["keys_rotate", "unmoved_key_hint"]

ByOpt = Annotated[
    str,
    typer.Option(
        "--by",
        help="Who rotates the key (recorded in the rotation event, as an approver's name is).",
    ),
]
ReasonOpt = Annotated[
    str | None,
    typer.Option(help="Why, recorded with it (yearly rotation, a suspected leak...)."),
]


def keys_rotate(
    by: ByOpt,
    reason: ReasonOpt = None,
    store: StoreOpt = None,
    key: KeyOpt = None,
    witness: WitnessOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Hand this ledger over to a new signing key, recorded in the ledger itself.

    Verifies the whole log, makes the new key (beside --key, as <name>.next.key until it
    is in place), appends a signing_key_rotated event naming both public keys and who
    rotated, signs a hand-over checkpoint covering it with the old key AND the new key,
    and updates the witness. Then the old pair is kept as <name>.retired-<key id>.key/.pub
    and the new pair takes --key's place: `checkpoint` signs with it alone, and a
    checkpoint the old key signs beyond the rotation is reported as `retired-key`. Any key
    of the ledger's history still verifies it. Interrupted, run it again: it finishes the
    same rotation.
    """
    with handled(as_json):
        path = resolve_key_path(key)
        with open_ledger(store, key=key, witness=witness, need_signer=True) as ledger:
            old = ledger.signer
            assert old is not None  # need_signer
            new, had = next_key(path, old.name, store_dir=store_dir(store))
            try:
                run = _rotate(ledger, new, by, reason) if not _done(ledger, old, new) else None
            except TraceboundError:
                if not had:  # refused before anything was recorded: leave no new key behind
                    discard_next_key(path)
                raise
        files = install_rotated_key(path, old)
    data: dict[str, Any] = {
        "ok": True,
        **(run.as_dict() if run is not None else {"resumed": True}),
        "key": str(files.private_path),
        "public": str(files.public_path),
        "archived_key": str(files.archived_private),
        "archived_public": str(files.archived_public),
        "new_verifier_key": new.verifier.format(),
        "old_verifier_key": old.verifier.format(),
    }
    if as_json:
        emit_json(data)
        return
    _say(data)


def _done(ledger: Ledger, old: NoteSigner, new: NoteSigner) -> bool:
    """The rotation from ``old`` to ``new`` is signed already; only the key files were
    not moved yet (a run interrupted after the hand-over)."""
    rotations = read_rotations(ledger.store)
    signed = max((size for size, _ in ledger.store.checkpoints()), default=0)
    return bool(
        rotations
        and (rotations[-1].old, rotations[-1].new) == (old.verifier, new.verifier)
        and rotations[-1].position <= signed
    )


def _rotate(ledger: Ledger, new: NoteSigner, by: str, reason: str | None) -> RotationRun:
    if not by.strip():
        raise KeyRotationRefused("--by needs a name: who rotates the key is recorded")
    return ledger.rotate_key(new, rotated_by=by, reason=reason)


def _say(data: dict[str, Any]) -> None:
    if "position" in data:
        handover = data["handover_checkpoint"]
        console.print(
            f"Rotated the signing key at position {data['position']} (by "
            f"{safe_text(data['rotated_by'])}); the hand-over checkpoint of "
            f"{handover['size']} events is signed by the old and the new key."
        )
    else:
        console.print("The rotation was signed already; its key files are now in place.")
    console.print(f"New signing key: [bold]{safe_text(data['key'])}[/]")
    console.print(
        f"Old key kept as [bold]{safe_text(data['archived_key'])}[/] (retired: it can no "
        "longer sign this ledger; keep it secret, or destroy it)"
    )
    console.print(
        f"New verifier key (give this to auditors): [cyan]{data['new_verifier_key']}[/]; "
        f"the old one ({data['old_verifier_key']}) still verifies the ledger too."
    )
    # `resumed`: the event was there already. A `.next.key` left by a run killed before
    # the event was written starts a fresh rotation, which is not said to be finished.
    if data["resumed"]:
        console.print("(an interrupted rotation was finished)")


def unmoved_key_hint(ledger: Ledger, key: Path | None, refused: KeyRotationRefused) -> None:
    """Say how to finish when ``refused`` (the key is retired) is a `keys rotate` that
    signed its hand-over but did not move its key files: the key this ledger is signed by
    now is still ``<name>.next.key``, a file "sign with that key" does not name.

    Raises:
        KeyRotationRefused: ``refused``, with what to run; as it is otherwise.
    """
    pending = next_key_path(resolve_key_path(key))
    rotations = read_rotations(ledger.store)
    signed = max((size for size, _ in ledger.store.checkpoints()), default=0)
    try:
        waiting = (
            bool(rotations)
            and rotations[-1].position <= signed  # its hand-over is signed
            and pending.exists()
            and load_signer(pending).verifier == rotations[-1].new
        )
    except TraceboundError:
        waiting = False
    if not waiting:
        _elsewhere_hint(ledger, rotations, signed, refused)
    raise KeyRotationRefused(
        f"{refused}. That key is {pending}: a `tracebound keys rotate` was interrupted before "
        "it moved the key files; run it again (same --by) to put them in place"
    ) from refused


def _elsewhere_hint(
    ledger: Ledger, rotations: list[Rotation], signed: int, refused: KeyRotationRefused
) -> NoReturn:
    """``refused`` (the key is retired) with no `keys rotate` of this host to finish: the
    rotation ran on another host (docs/postgresql.md, "Several hosts"), whose key file
    this host needs; "sign with that key: --key" names no file.

    Raises:
        KeyRotationRefused: ``refused``, saying where the key is when it was retired.
    """
    key = None if ledger.signer is None else ledger.signer.verifier
    if not rotations or rotations[-1].position > signed or key == rotations[-1].new:
        raise refused  # unfinished, or not a retired key
    raise KeyRotationRefused(
        f"{refused}. That key is the key file on the host where "
        f"{rotations[-1].rotated_by} ran `tracebound keys rotate` "
        f"({rotations[-1].timestamp}): copy it (and its .pub) here"
    ) from refused
