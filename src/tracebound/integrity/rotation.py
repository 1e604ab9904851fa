"""Signing-key rotation inside one ledger: which key may sign a checkpoint of which size.

A ledger's key changes by an event in the log (``signing_key_rotated`` on :data:`KEY_STREAM`,
ADR 0017) that names the outgoing and the incoming verifier key. The first checkpoint that
covers such an event is the *hand-over*: both keys sign it. After it the incoming key signs
alone, and the outgoing key is *retired*: a checkpoint it signs of a log that holds its own
rotation is forged (whoever still has it, a leak for instance, cannot extend the ledger).

So the rotation events, in log order, give the ledger's key history K1 -> K2 -> ... and
every checkpoint size a required set of keys: the key active at that size, plus the outgoing
key of each rotation it is the hand-over of. :func:`open_checkpoints` checks stored
checkpoints against that, given *any* key of the history as the trust root:

* with an old key as root, its own checkpoints verify, and the hand-over it signed vouches
  for the rotation event (once the log's root at that size is compared with the hand-over's,
  which the caller does for every checkpoint), and so for the next key;
* with a newer key as root, its checkpoints cover the rotation events that name the older
  keys, so the older checkpoints are checked with those.

Rotation events are read from the store, which its holder may rewrite; they are trusted only
because every checkpoint checked here is also compared with the log's Merkle root at its size
(:func:`~tracebound.integrity.verify.check_against_checkpoints`): a rewritten rotation event
changes that root. A rotation after the newest checkpoint is *pending*: nothing signed covers
it, so it changes no required key (`keys rotate` finishes it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from tracebound.errors import (
    CheckpointError,
    DamageKind,
    LedgerDamaged,
    SignatureInvalid,
    SigningKeyError,
)
from tracebound.integrity.keys import NoteVerifier
from tracebound.integrity.note import Checkpoint, SignedNote, parse_checkpoint
from tracebound.integrity.strict_json import loads_canonical_record

__all__ = [
    "KEY_STREAM",
    "ROTATION_TYPE",
    "KeyHistory",
    "Rotation",
    "open_checkpoints",
    "rotation_from_record",
    "signed_by",
]

KEY_STREAM: Final = "tracebound.keys"
"""The stream the ledger's key rotations are recorded on; only ``Ledger.rotate_key`` writes it."""

ROTATION_TYPE: Final = "signing_key_rotated"


def _key_id(key: NoteVerifier) -> str:
    return f"{key.name!r} ({key.key_hash:08x})"


@dataclass(frozen=True, slots=True)
class Rotation:
    """One hand-over from ``old`` to ``new``, recorded at log ``position``."""

    position: int
    old: NoteVerifier
    new: NoteVerifier
    rotated_by: str
    reason: str | None
    timestamp: str

    def describe(self) -> str:
        """``the rotation at position 7 (2026-..., by alice)``: for messages."""
        return f"the rotation at position {self.position} ({self.timestamp}, by {self.rotated_by})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "old_key": self.old.format(),
            "new_key": self.new.format(),
            "rotated_by": self.rotated_by,
            "reason": self.reason,
            "timestamp": self.timestamp,
        }


def rotation_from_record(position: int, body: bytes) -> Rotation:
    """The rotation a hashed record states, read as only the ledger writes it.

    Raises:
        LedgerDamaged: TAMPER at ``position``: not a canonical record, not a
            ``signing_key_rotated`` event on :data:`KEY_STREAM`, or keys that do not parse.
    """

    def damaged(why: str) -> LedgerDamaged:
        return LedgerDamaged(DamageKind.TAMPER, position, f"the key rotation record {why}")

    try:
        record = loads_canonical_record(body)
    except ValueError as exc:
        raise damaged(f"is {exc}") from exc
    payload = record.get("payload")
    if (
        record.get("stream_id") != KEY_STREAM
        or record.get("event_type") != ROTATION_TYPE
        or not isinstance(payload, dict)
        or record.get("position") != position
    ):
        raise damaged(f"is not a {ROTATION_TYPE} event on {KEY_STREAM} at this position")
    by, reason, timestamp = (
        payload.get("rotated_by"),
        payload.get("reason"),
        record.get("timestamp"),
    )
    if not isinstance(by, str) or not isinstance(timestamp, str):
        raise damaged("has no rotated_by or timestamp")
    if reason is not None and not isinstance(reason, str):
        raise damaged("has a reason that is not text")
    try:
        old = NoteVerifier.parse(str(payload.get("old_key")))
        new = NoteVerifier.parse(str(payload.get("new_key")))
    except SigningKeyError as exc:
        raise damaged(f"names a key that does not parse: {exc}") from exc
    return Rotation(position, old, new, by, reason, timestamp)


class KeyHistory:
    """The ledger's signing keys in order, from its rotations (oldest first).

    ``rotations`` must be in log order. Without any, the history is the one key ``root``
    (the ledger's only key, as far as the log says).

    Raises:
        LedgerDamaged: TAMPER at a rotation whose outgoing key is not the previous one's
            incoming key (the chain of keys is broken).
    """

    def __init__(self, rotations: Sequence[Rotation], root: NoteVerifier) -> None:
        self.rotations = tuple(rotations)
        for rotation in self.rotations:
            if rotation.old == rotation.new:
                raise LedgerDamaged(
                    DamageKind.TAMPER,
                    rotation.position,
                    f"the key rotation here hands over from {_key_id(rotation.old)} to itself: "
                    "the ledger's own rotations could not have recorded it",
                )
        for before, after in zip(self.rotations, self.rotations[1:], strict=False):
            if after.old != before.new:
                raise LedgerDamaged(
                    DamageKind.TAMPER,
                    after.position,
                    f"the key rotation here hands over from {_key_id(after.old)}, but "
                    f"{before.describe()} handed the ledger to {_key_id(before.new)}",
                )
        first = self.rotations[0].old if self.rotations else root
        self.keys: tuple[NoteVerifier, ...] = (first, *(r.new for r in self.rotations))

    def active(self, size: int) -> NoteVerifier:
        """The key that signs a checkpoint of ``size`` events: the newest one whose
        rotation is inside the log of that size."""
        return self.keys[sum(1 for r in self.rotations if r.position <= size)]

    def handed_over(self, previous: int, size: int) -> list[Rotation]:
        """The rotations a checkpoint of ``size`` is the hand-over of, after one of
        ``previous`` events (the store's previous checkpoint; 0 for none)."""
        return [r for r in self.rotations if previous < r.position <= size]

    def retired_by(self, key: NoteVerifier) -> Rotation | None:
        """The rotation that retired ``key``, if it is a retired key of this history."""
        return next((r for r in self.rotations if r.old == key), None)

    def describe(self) -> str:
        """``K1 -> K2 (rotated at position 7)``: for messages."""
        parts = [_key_id(self.keys[0])]
        parts += [f"{_key_id(r.new)} (rotated at position {r.position})" for r in self.rotations]
        return " -> ".join(parts)


def _open(note: str, keys: Sequence[NoteVerifier]) -> Checkpoint:
    return parse_checkpoint(SignedNote.open(note, keys).text)


def _forged(size: int, why: str) -> LedgerDamaged:
    return LedgerDamaged(
        DamageKind.FORGED_SIGNATURE, size, f"the checkpoint stored for size {size} {why}"
    )


def signed_by(note: str, key: NoteVerifier) -> bool:
    """Whether ``key`` signed ``note`` (a malformed note: no)."""
    try:
        SignedNote.open(note, key)
    except CheckpointError:
        return False
    return True


def _judge(
    note: str,
    size: int,
    need: list[NoteVerifier],
    history: KeyHistory,
    exc: CheckpointError,
    *,
    hint: str,
) -> LedgerDamaged:
    """Why a checkpoint does not verify with the keys it needs, as precisely as known."""
    active = need[0]
    if not isinstance(exc, SignatureInvalid):
        return _forged(size, f"does not verify: {exc}")
    for key in history.keys:
        retired = history.retired_by(key)
        if (
            key != active
            and retired is not None
            and retired.position <= size
            and signed_by(note, key)
            and not signed_by(note, active)
        ):
            return LedgerDamaged(
                DamageKind.RETIRED_KEY,
                size,
                f"the checkpoint stored for size {size} is signed by {_key_id(key)}, a key "
                f"retired by {retired.describe()}, and not by {_key_id(active)}, which "
                "signs this ledger from there on: a retired key cannot extend the ledger "
                "(the checkpoint is forged; whoever signed it holds the retired key: treat "
                "it as leaked)",
            )
    handover = [k for k in need[1:] if not signed_by(note, k)]
    if handover and signed_by(note, active):
        rotation = history.retired_by(handover[0])
        where = rotation.describe() if rotation is not None else "a key rotation"
        return _forged(
            size,
            f"is the first to cover {where} but is not signed by the outgoing key "
            f"{_key_id(handover[0])}: nothing that key signed hands the ledger over to "
            f"{_key_id(active)}",
        )
    rotated = f"; the ledger's keys are {history.describe()}" if history.rotations else ""
    return _forged(size, f"does not verify: {exc}{rotated}{hint}")


def open_checkpoints(
    notes: Sequence[tuple[int, str]],
    root: NoteVerifier,
    rotations: Sequence[Rotation],
    *,
    origin: str | None,
    hint: str = "",
) -> tuple[list[Checkpoint], KeyHistory]:
    """Check stored checkpoints (smallest first) against the key history, from ``root``.

    Rotations after the newest checkpoint are pending and left out of the history. Each
    checkpoint must be signed by the key active at its size, and a hand-over also by the
    outgoing key of each rotation it is the first to cover. ``root`` must be one of the
    history's keys. ``hint`` ends the message of a checkpoint signed by none of them.

    Raises:
        LedgerDamaged: FORGED_SIGNATURE (at the checkpoint's size: a bad or missing
            signature, another origin or size, a root outside the history, a hand-over the
            outgoing key did not sign), RETIRED_KEY (a checkpoint signed by a retired key
            beyond its rotation), or TAMPER (a broken chain of keys).
    """
    newest = max((size for size, _ in notes), default=0)
    history = KeyHistory([r for r in rotations if r.position <= newest], root)
    if notes and root not in history.keys:
        raise _foreign_root(notes[0][0], root, history, hint)
    if notes:
        _check_pending(history, [r for r in rotations if r.position > newest])
    out: list[Checkpoint] = []
    previous = 0
    for size, note in notes:
        need = [history.active(size), *(r.old for r in history.handed_over(previous, size))]
        try:
            cp = _open(note, need)
        except CheckpointError as exc:
            raise _judge(note, size, need, history, exc, hint=hint) from exc
        if cp.size != size or (origin is not None and cp.origin != origin):
            raise _forged(size, f"is for {cp.origin!r} size {cp.size}")
        out.append(cp)
        previous = size
    return out, history


def _check_pending(history: KeyHistory, pending: Sequence[Rotation]) -> None:
    """A rotation no checkpoint covers yet must still be one ``rotate_key`` could have
    written: from the key that signs the newest checkpoint (or the pending one before it)
    to another key. Any other is no interrupted rotation to finish, only an event someone
    with write access to the store appended (nothing signed it); it would stop every
    checkpoint, so it is reported, not left for `checkpoint` to trip over.

    Raises:
        LedgerDamaged: TAMPER at the first such rotation.
    """
    signing = history.keys[-1]
    for rotation in pending:
        if rotation.old != signing or rotation.new == rotation.old:
            raise LedgerDamaged(
                DamageKind.TAMPER,
                rotation.position,
                f"the key rotation here (not yet covered by a checkpoint) hands over from "
                f"{_key_id(rotation.old)} to {_key_id(rotation.new)}, but the ledger is "
                f"signed by {_key_id(signing)} there: its own rotations could not have "
                "recorded it (someone appended it to the store; nothing signed it)",
            )
        signing = rotation.new


def _foreign_root(size: int, root: NoteVerifier, history: KeyHistory, hint: str) -> LedgerDamaged:
    return LedgerDamaged(
        DamageKind.FORGED_SIGNATURE,
        size,
        f"the checkpoint stored for size {size} does not verify: it is not signed by "
        f"{_key_id(root)}, the key it was checked with, which is none of this ledger's "
        f"keys ({history.describe()}){hint}",
    )
