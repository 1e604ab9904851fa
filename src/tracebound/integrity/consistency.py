"""Consistency proofs between signed checkpoints: the log you saw then is a prefix of the
log signed now.

An auditor who kept a signed checkpoint (size N, root R) can later ask the ledger for a
``tracebound-consistency/1`` file and check it offline, with only the key that signed the
checkpoint they kept. If it holds, the first N events of today's log are exactly the ones
they saw: nothing written before was changed, removed or reordered since, whatever the
ledger's operator did to the store in between (RFC 6962 §2.1.2 consistency proofs; the
witness makes the same check inside the ledger on every checkpoint).

The file is a chain of signed checkpoints, each with a consistency proof from the one
before it: first the checkpoint held, last the newest. Between them come the hand-over
checkpoints of the key rotations since (ADR 0017), so that a proof still checks with the
auditor's old key after the ledger moved to a new one. Each step names the key that signs
the ledger at its size; a step whose key is not the current one must be signed by both
(the hand-over, which only the holder of the current key could co-sign), and from there the
new key alone is accepted: a retired key cannot extend the chain.

Everything in the file is either signed (the notes), bound by a signed note (the proofs
lead to the signed roots) or a public key a signed note vouches for; nothing else may ride
along (:func:`ConsistencyBundle.from_dict` refuses unknown members).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from tracebound.errors import (
    CheckpointError,
    ProofError,
    SignatureInvalid,
    SigningKeyError,
    short_repr,
)
from tracebound.integrity.bundle_fields import (
    check_members,
    field_hash,
    field_text,
    json_kind,
)
from tracebound.integrity.keys import NoteVerifier
from tracebound.integrity.merkle import MAX_PROOF_PATH, verify_consistency
from tracebound.integrity.note import Checkpoint, open_checkpoint
from tracebound.integrity.strict_json import loads_strict

__all__ = [
    "CONSISTENCY_FORMAT",
    "ConsistencyBundle",
    "ConsistencyResult",
    "ConsistencyStep",
    "held_note",
    "verify_consistency_bundle",
]

CONSISTENCY_FORMAT: Final = "tracebound-consistency/1"
MAX_STEPS: Final = 10_001  # the checkpoint held, then up to 10,000 key hand-overs and the newest
_WHAT: Final = "consistency proof"
_MEMBERS: Final = frozenset({"format", "checkpoints"})
_STEP_MEMBERS: Final = frozenset({"checkpoint", "key", "proof"})


@dataclass(frozen=True)
class ConsistencyStep:
    """One signed checkpoint of the chain and the proof that leads to it."""

    checkpoint: str  # the signed note
    key: NoteVerifier  # the key that signs the ledger at this checkpoint's size
    proof: tuple[bytes, ...]  # from the previous step's tree to this one's; () for the first

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "key": self.key.format(),
            "proof": [p.hex() for p in self.proof],
        }


@dataclass(frozen=True)
class ConsistencyBundle:
    """The chain from a checkpoint someone holds to the newest one (see the module doc)."""

    steps: tuple[ConsistencyStep, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"format": CONSISTENCY_FORMAT, "checkpoints": [s.as_dict() for s in self.steps]}

    @classmethod
    def from_dict(cls, d: Any) -> ConsistencyBundle:
        """Read a bundle from its JSON form (:meth:`as_dict`), strictly.

        Raises:
            ProofError: not a consistency proof, or a member missing, unknown or malformed;
                the message names it.
        """
        if not isinstance(d, dict):
            raise ProofError(f"not a tracebound {_WHAT}: a JSON {json_kind(d)}, not an object")
        if d.get("format") != CONSISTENCY_FORMAT:
            raise ProofError(
                f"not a tracebound {_WHAT} (format={short_repr(d.get('format'))}, "
                f"expected {CONSISTENCY_FORMAT!r})"
            )
        check_members(d, _MEMBERS, _WHAT)
        steps = d["checkpoints"]
        if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_STEPS:
            raise ProofError(
                f"malformed {_WHAT}: checkpoints must be a list of 1 to {MAX_STEPS} steps"
            )
        return cls(tuple(_step(step, i) for i, step in enumerate(steps)))

    @classmethod
    def from_json(cls, data: bytes | str) -> ConsistencyBundle:
        """Parse a file's bytes: strict JSON (:func:`loads_strict`), then :meth:`from_dict`.

        Raises:
            ProofError: not UTF-8, not JSON, ambiguous JSON, or not a consistency proof.
        """
        try:
            doc = loads_strict(data)
        except ValueError as exc:
            raise ProofError(f"not a {_WHAT}: {exc}") from exc
        return cls.from_dict(doc)


def _step(d: Any, i: int) -> ConsistencyStep:
    part = f"checkpoints[{i}]"
    check_members(d, _STEP_MEMBERS, _WHAT, part)
    proof = d["proof"]
    if not isinstance(proof, list) or len(proof) > 2 * MAX_PROOF_PATH:
        raise ProofError(
            f"malformed {_WHAT}: {part}.proof must be a list of at most {2 * MAX_PROOF_PATH} hashes"
        )
    key_text = field_text(d, "key", _WHAT)
    try:
        key = NoteVerifier.parse(key_text)
    except SigningKeyError as exc:
        raise ProofError(f"malformed {_WHAT}: {part}.key is no verifier key: {exc}") from exc
    if key.format() != key_text:  # one spelling: what is shown is what was checked
        raise ProofError(f"malformed {_WHAT}: {part}.key is not in its canonical form")
    return ConsistencyStep(
        checkpoint=field_text(d, "checkpoint", _WHAT),
        key=key,
        proof=tuple(field_hash(p, f"{part}.proof[{j}]", _WHAT) for j, p in enumerate(proof)),
    )


@dataclass(frozen=True)
class ConsistencyResult:
    """What a consistency proof that holds establishes."""

    old: Checkpoint  # the checkpoint held
    new: Checkpoint  # the newest: its first old.size events are old's
    keys: tuple[NoteVerifier, ...]  # the verifier's key, then each key handed over to
    handovers: tuple[Checkpoint, ...]  # the checkpoints that handed over, in order

    @property
    def newest_key(self) -> NoteVerifier:
        """The key that signs the ledger now: check the next proof with it."""
        return self.keys[-1]


def _label(i: int, count: int) -> str:
    if i == 0:
        return "the checkpoint held"
    return "the newest checkpoint" if i == count - 1 else f"checkpoints[{i}]"


def _open_step(
    step: ConsistencyStep, current: NoteVerifier, label: str, origin: str | None, *, first: bool
) -> Checkpoint:
    """The step's checkpoint, signed by the current key (and by the step's key, when that
    is another: a hand-over).

    Raises:
        SignatureInvalid, CheckpointError: as :func:`open_checkpoint`, naming the step.
    """
    keys = [current] if step.key == current else [current, step.key]
    try:
        return open_checkpoint(step.checkpoint, keys, origin=origin)
    except CheckpointError as exc:
        role = ""
        if step.key != current:
            role = (
                f" (said to be signed by {_key_id(step.key)}: check the proof with the key "
                "that signed the checkpoint you kept)"
                if first
                else f" (a hand-over to {_key_id(step.key)})"
            )
        raise type(exc)(f"{label}{role}: {exc}") from exc


def _key_id(key: NoteVerifier) -> str:
    return f"{key.name!r} ({key.key_hash:08x})"


def _extends(old: Checkpoint, new: Checkpoint, proof: tuple[bytes, ...], label: str) -> None:
    """``new``'s tree begins with ``old``'s.

    Raises:
        ProofError: another log, a smaller tree, or a proof that does not lead to both roots.
    """
    if new.origin != old.origin:
        raise ProofError(f"{label} is of log {new.origin!r}, not {old.origin!r}")
    if old.size == 0 and new.size > 0:
        if proof:  # every log extends the empty one: there is nothing to prove
            raise ProofError(f"{label}: a proof from the empty tree must be empty")
        return
    try:
        verify_consistency(old.size, new.size, old.root, new.root, list(proof))
    except ProofError as exc:
        raise ProofError(
            f"{label} (size {new.size}) does not extend the checkpoint of size {old.size} "
            f"before it: {exc}"
        ) from exc


def verify_consistency_bundle(
    bundle: ConsistencyBundle,
    verifier: NoteVerifier,
    *,
    origin: str | None = None,
    held: Checkpoint | None = None,
    newest_key: NoteVerifier | None = None,
) -> ConsistencyResult:
    """Check a consistency proof offline, from the key that signed the checkpoint held.

    Args:
        verifier: The key the auditor trusts: the one that signed the checkpoint they hold.
        origin: When given, every checkpoint must name this log.
        held: The checkpoint the auditor kept (already checked with ``verifier``); the
            chain must start from it (same origin, size and root).
        newest_key: The key the auditor knows signs the ledger now, when they know it:
            the chain must end with it. Without it, a chain is trusted as far as
            ``verifier`` vouches, and a retired ``verifier`` that leaked could vouch for a
            forged continuation (nothing offline says it was retired).

    Raises:
        SignatureInvalid: a checkpoint is not signed by the key that signs the ledger at its
            size, a hand-over not also by the key before it, or the chain does not end
            with ``newest_key``.
        CheckpointError: a checkpoint is malformed or of another origin.
        ProofError: the chain does not start from ``held``, or a tree does not extend the
            one before it (the log was rewritten, or the file edited).
    """
    steps = bundle.steps
    if not steps:
        raise ProofError(f"malformed {_WHAT}: no checkpoints")
    current = verifier
    keys = [verifier]
    handovers: list[Checkpoint] = []
    chain: list[Checkpoint] = []
    for i, step in enumerate(steps):
        label = _label(i, len(steps))
        cp = _open_step(step, current, label, origin, first=not chain)
        if step.key != current:
            current = step.key
            keys.append(current)
            handovers.append(cp)
        if chain:
            _extends(chain[-1], cp, step.proof, label)
        elif step.proof:
            raise ProofError(f"{label} is where the chain starts: it cannot carry a proof")
        chain.append(cp)
    old = chain[0]
    if held is not None and (held.origin, held.size, held.root) != (
        old.origin,
        old.size,
        old.root,
    ):
        raise ProofError(
            f"the proof starts from a checkpoint of {old.origin!r} size {old.size} root "
            f"{old.root.hex()[:16]}..., not from the one held ({held.origin!r} size "
            f"{held.size} root {held.root.hex()[:16]}...)"
        )
    if newest_key is not None and current != newest_key:
        raise SignatureInvalid(
            f"the newest checkpoint is signed by {_key_id(current)}, not by "
            f"{_key_id(newest_key)}, the key expected to sign the ledger now"
        )
    return ConsistencyResult(old, chain[-1], tuple(keys), tuple(handovers))


def held_note(data: bytes) -> str:
    """The signed checkpoint a file holds: a note file as ``checkpoint --note`` writes it,
    or the checkpoint inside a proof or evidence file someone received earlier (an
    inclusion proof's, an evidence file's, a consistency proof's newest).

    Nothing here is trusted yet: the caller opens the note with a key.

    Raises:
        ProofError: not UTF-8, or a JSON file that holds no checkpoint.
    """
    try:
        doc = loads_strict(data)
    except ValueError:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProofError(f"not a signed checkpoint: not UTF-8 text ({exc.reason})") from exc
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if fmt == CONSISTENCY_FORMAT:
        return ConsistencyBundle.from_dict(doc).steps[-1].checkpoint
    if isinstance(fmt, str) and fmt.startswith(("tracebound-inclusion/", "tracebound-evidence/")):
        note = doc.get("checkpoint")
        if isinstance(note, str):
            return note
        raise ProofError(f"this {fmt} file holds no signed checkpoint")
    raise ProofError(
        "not a signed checkpoint: a JSON file that is no tracebound proof or evidence file "
        f"(format={short_repr(fmt)})"
    )
