"""`tracebound keys rotate`: hand a live ledger over to a new signing key (ADR 0017)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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
from tracebound.ledger import Ledger, RotationRun
from tracebound.store.keyfile import (
    discard_next_key,
    install_rotated_key,
    next_key,
    next_key_is,
    next_key_path,
)
from tracebound.store.rotations import read_rotations

__all__ = ["keys_rotate", "retired_key_refusal"]

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


def retired_key_refusal(
    ledger: Ledger, key: Path | None, refused: KeyRotationRefused
) -> KeyRotationRefused:
    """``refused`` (a checkpoint's key is retired, or a rotation unfinished), saying where
    the key that signs the ledger now is when "sign with that key: --key" names no file:

    * ``<name>.next.key`` beside ``key``: a `keys rotate` here signed its hand-over but did
      not move its key files; running it again puts them in place;
    * otherwise, the key file on the host where the rotation ran (docs/postgresql.md,
      "Several hosts"), to copy here.

    ``refused`` itself when neither applies (an unfinished rotation, or a key not retired).
    """
    rotations = read_rotations(ledger.store)
    signed = max((size for size, _ in ledger.store.checkpoints()), default=0)
    if not rotations or rotations[-1].position > signed:
        return refused  # unfinished: its own message says to run `keys rotate`
    last = rotations[-1]
    path = resolve_key_path(key)
    if next_key_is(path, last.new):
        return KeyRotationRefused(
            f"{refused}. That key is {next_key_path(path)}: a `tracebound keys rotate` was "
            "interrupted before it moved the key files; run it again (same --by) to put "
            "them in place"
        )
    if ledger.signer is not None and ledger.signer.verifier == last.new:
        return refused  # not a retired key
    return KeyRotationRefused(
        f"{refused}. That key is the key file on the host where {last.rotated_by} ran "
        f"`tracebound keys rotate` ({last.timestamp}): copy it (and its .pub) here"
    )
