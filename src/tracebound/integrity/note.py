"""C2SP signed notes and tlog checkpoints: the signed statement "the log had this root".

A checkpoint (https://c2sp.org/tlog-checkpoint) is a signed note
(https://c2sp.org/signed-note) whose text is::

    <origin>
    <tree size in decimal>
    <base64 RFC 6962 root>
    [extension lines]

followed by a blank line and one or more signature lines
``— <key name> <base64(4-byte key ID || Ed25519 signature)>``. Using the published format
rather than a private one means any transparency-log tool (Go ``sumdb/note``, witnesses,
monitors) can check tracebound checkpoints.

Parsing is strict because a lenient parser of signed data is an attack surface: any input that
is not exactly well formed raises :class:`~tracebound.errors.CheckpointError`, and any
signature problem raises :class:`~tracebound.errors.SignatureInvalid`. No other exception
escapes, whatever the bytes (a property test feeds random input).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tracebound.errors import CheckpointError, SignatureInvalid
from tracebound.integrity.keys import NoteSigner, NoteVerifier, is_valid_key_name
from tracebound.integrity.merkle import EMPTY_ROOT, HASH_SIZE

__all__ = [
    "MAX_NOTE_BYTES",
    "MAX_SIGNATURES",
    "MAX_TREE_SIZE",
    "Checkpoint",
    "NoteSignature",
    "SignedNote",
    "format_checkpoint_body",
    "open_checkpoint",
    "parse_checkpoint",
    "sign_checkpoint",
]

MAX_SIGNATURES = 100
"""Signature lines accepted per note (the spec requires at least 16; Go allows 100)."""

MAX_NOTE_BYTES = 1 << 20
"""A defensive cap on the encoded size of a note."""

MAX_TREE_SIZE = (1 << 64) - 1
"""Tree sizes are uint64 in the transparency-log ecosystem."""

_SIG_PREFIX = "\u2014 "  # EM DASH, SPACE
# At most 20 digits (2**64 - 1 has 20): the range check follows, and int() of more than
# 4300 digits raises ValueError, which would escape a parser of untrusted text.
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")


def _b64decode_strict(text: str, what: str) -> bytes:
    """Decode standard, padded base64, accepting only its canonical spelling.

    Canonical-only means one byte string has one text form, so a re-encoded checkpoint is
    byte-identical to the one that was signed.
    """
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise CheckpointError(f"{what} is not valid base64") from exc
    if base64.b64encode(raw).decode("ascii") != text:
        raise CheckpointError(f"{what} is not canonical base64")
    return raw


def _check_text(text: str, what: str) -> None:
    """Refuse what a signed note may not contain: control characters and lone surrogates."""
    for c in text:
        o = ord(c)
        if (o < 0x20 and c != "\n") or 0xD800 <= o <= 0xDFFF:
            raise CheckpointError(f"{what} contains a forbidden character U+{o:04X}")


# --- checkpoints ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A log's tree head: origin, size and RFC 6962 root, plus opaque extension lines.

    Invariants are checked on construction, so a ``Checkpoint`` in hand is always one that
    :func:`format_checkpoint_body` can write and :func:`parse_checkpoint` reads back equal.
    """

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Check the invariants of the tlog-checkpoint format.

        Raises:
            CheckpointError: empty or multi-line origin, size out of range, root not 32
                bytes, an empty size-0 root mismatch, or an empty or multi-line extension.
        """
        if not isinstance(self.origin, str) or not self.origin:
            raise CheckpointError("checkpoint origin must be a non-empty string")
        _check_text(self.origin, "checkpoint origin")
        if "\n" in self.origin:
            raise CheckpointError("checkpoint origin must be a single line")
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise CheckpointError("checkpoint size must be an int")
        if not 0 <= self.size <= MAX_TREE_SIZE:
            raise CheckpointError(f"checkpoint size {self.size} is outside [0, 2**64)")
        if not isinstance(self.root, bytes) or len(self.root) != HASH_SIZE:
            raise CheckpointError(f"checkpoint root must be {HASH_SIZE} bytes")
        if self.size == 0 and self.root != EMPTY_ROOT:
            raise CheckpointError("a checkpoint of size 0 must carry the empty-tree root")
        for ext in self.extensions:
            if not isinstance(ext, str) or not ext:
                raise CheckpointError("checkpoint extension lines must be non-empty strings")
            _check_text(ext, "checkpoint extension line")
            if "\n" in ext:
                raise CheckpointError("a checkpoint extension must be a single line")


def format_checkpoint_body(checkpoint: Checkpoint) -> str:
    """Return the note text of ``checkpoint``: the bytes a signature covers."""
    root = base64.b64encode(checkpoint.root).decode("ascii")
    lines = [checkpoint.origin, str(checkpoint.size), root, *checkpoint.extensions]
    return "".join(f"{line}\n" for line in lines)


def parse_checkpoint(body: str) -> Checkpoint:
    """Parse checkpoint note text (no signatures) into a :class:`Checkpoint`.

    Raises:
        CheckpointError: fewer than three lines, an empty line, a missing final newline, a
            size that is not plain decimal without leading zeros, or a root that is not
            canonical base64 of 32 bytes.
    """
    _check_text(body, "checkpoint text")
    if not body.endswith("\n"):
        raise CheckpointError("checkpoint text must end with a newline")
    lines = body[:-1].split("\n")
    if len(lines) < 3:
        raise CheckpointError("checkpoint text needs origin, size and root lines")
    if any(not line for line in lines):
        raise CheckpointError("checkpoint lines must be non-empty")
    origin, size_text, root_text, *extensions = lines
    if not _DECIMAL.fullmatch(size_text):
        raise CheckpointError(
            f"checkpoint size {size_text!r:.40} is not a plain decimal number below 2**64"
        )
    size = int(size_text)
    root = _b64decode_strict(root_text, "checkpoint root")
    if len(root) != HASH_SIZE:
        raise CheckpointError(f"checkpoint root must be {HASH_SIZE} bytes, got {len(root)}")
    return Checkpoint(origin=origin, size=size, root=root, extensions=tuple(extensions))


# --- signed notes --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NoteSignature:
    """One signature line: key name, 32-bit key ID and the raw signature (unverified)."""

    name: str
    key_hash: int
    signature: bytes

    def format(self) -> str:
        """Return the signature line, including its newline."""
        blob = self.key_hash.to_bytes(4, "big") + self.signature
        return f"{_SIG_PREFIX}{self.name} {base64.b64encode(blob).decode('ascii')}\n"


def _signers(signers: NoteSigner | Iterable[NoteSigner]) -> tuple[NoteSigner, ...]:
    keys = (signers,) if isinstance(signers, NoteSigner) else tuple(signers)
    if not all(isinstance(k, NoteSigner) for k in keys):
        raise CheckpointError("expected a NoteSigner or an iterable of them")
    return keys


def _verifiers(verifiers: NoteVerifier | Iterable[NoteVerifier]) -> tuple[NoteVerifier, ...]:
    keys = (verifiers,) if isinstance(verifiers, NoteVerifier) else tuple(verifiers)
    if not all(isinstance(k, NoteVerifier) for k in keys):
        raise CheckpointError("expected a NoteVerifier or an iterable of them")
    return keys


@dataclass(frozen=True, slots=True)
class SignedNote:
    """A note text and its signature lines, as parsed; nothing here is trusted until verified.

    Use :meth:`open` (parse and verify) rather than :meth:`parse` when the text will be acted
    on: the spec says an unverified note's text must be ignored.
    """

    text: str
    signatures: tuple[NoteSignature, ...]

    @classmethod
    def sign(cls, text: str, signers: NoteSigner | Iterable[NoteSigner]) -> SignedNote:
        """Sign ``text`` with one or more keys and return the note.

        Raises:
            CheckpointError: the text is empty, lacks its final newline, contains a control
                character, or no signer is given.
        """
        if not isinstance(text, str) or not text.endswith("\n"):
            raise CheckpointError("note text must be non-empty and end with a newline")
        _check_text(text, "note text")
        keys = _signers(signers)
        if not keys:
            raise CheckpointError("at least one signer is needed to sign a note")
        if len(keys) > MAX_SIGNATURES:
            raise CheckpointError(f"a note carries at most {MAX_SIGNATURES} signatures")
        message = text.encode("utf-8")
        sigs = tuple(NoteSignature(k.name, k.key_hash, k.sign(message)) for k in keys)
        note = cls(text, sigs)
        if len(note.encode().encode("utf-8")) > MAX_NOTE_BYTES:
            raise CheckpointError(f"a note is at most {MAX_NOTE_BYTES} bytes")
        return note

    def encode(self) -> str:
        """Return the note as text: note text, blank line, signature lines."""
        return self.text + "\n" + "".join(s.format() for s in self.signatures)

    def __str__(self) -> str:
        return self.encode()

    @classmethod
    def parse(cls, note: str | bytes) -> SignedNote:
        """Parse a note's syntax without checking any signature.

        Raises:
            CheckpointError: not UTF-8, a control character, no blank line before the
                signatures, a malformed signature line, too many signatures, or over
                :data:`MAX_NOTE_BYTES`.
        """
        if isinstance(note, str):
            text = note
            # Characters first (cheap), then the UTF-8 bytes the limit is about.
            if len(text) > MAX_NOTE_BYTES or (
                len(text) * 4 > MAX_NOTE_BYTES
                and len(text.encode("utf-8", "surrogatepass")) > MAX_NOTE_BYTES
            ):
                raise CheckpointError(f"note is larger than {MAX_NOTE_BYTES} bytes")
        else:
            raw = bytes(note)
            if len(raw) > MAX_NOTE_BYTES:
                raise CheckpointError(f"note is larger than {MAX_NOTE_BYTES} bytes")
            try:
                text = raw.decode("utf-8", errors="strict")
            except UnicodeDecodeError as exc:
                raise CheckpointError("note is not valid UTF-8") from exc
        _check_text(text, "note")
        # The text ends at the LAST blank line; the text itself may contain blank lines.
        split = text.rfind("\n\n")
        if split < 0:
            raise CheckpointError("note has no blank line before its signatures")
        body, sig_block = text[: split + 1], text[split + 2 :]
        if not sig_block or not sig_block.endswith("\n"):
            raise CheckpointError("note must end with signature lines, each ending in newline")
        lines = sig_block[:-1].split("\n")
        if len(lines) > MAX_SIGNATURES:
            raise CheckpointError(f"note has more than {MAX_SIGNATURES} signatures")
        return cls(body, tuple(_parse_signature_line(line) for line in lines))

    def verify(self, verifiers: NoteVerifier | Iterable[NoteVerifier]) -> None:
        """Check the signatures against the expected keys.

        Every expected key must have signed. A signature line from an expected key (same name
        and key ID) that fails to verify rejects the whole note, as the spec advises. Lines
        from unknown keys are ignored, so witness cosignatures and rotated keys do no harm.

        Raises:
            CheckpointError: no verifier given, or two verifiers share a name and key ID.
            SignatureInvalid: a signature from an expected key is bad, or an expected key did
                not sign (including notes signed only by unknown keys).
        """
        keys = _verifiers(verifiers)
        if not keys:
            raise CheckpointError("no verifier given: refusing to trust an unverified note")
        by_id: dict[tuple[str, int], NoteVerifier] = {}
        for v in keys:
            other = by_id.setdefault((v.name, v.key_hash), v)
            if other != v:
                raise CheckpointError(f"two verifier keys share name and key ID {v.name!r}")
        message = self.text.encode("utf-8")
        signed: set[tuple[str, int]] = set()
        for sig in self.signatures:
            ident = (sig.name, sig.key_hash)
            verifier = by_id.get(ident)
            if verifier is None:
                continue
            if not verifier.verify(message, sig.signature):
                raise SignatureInvalid(
                    f"bad signature from key {sig.name!r} ({sig.key_hash:08x}): the note was "
                    "altered or forged"
                )
            signed.add(ident)
        missing = [v for ident, v in by_id.items() if ident not in signed]
        if missing:
            names = ", ".join(f"{v.name!r} ({v.key_hash:08x})" for v in missing)
            raise SignatureInvalid(
                f"note is not signed by expected key(s) {names}{self._others(by_id)}"
            )

    def _others(self, expected: dict[tuple[str, int], NoteVerifier]) -> str:
        """Name the keys that did sign, from their lines' key IDs: a note signed by another
        key (a replaced or lost one, or someone else's) is not one whose signature is bad,
        and whoever checks it needs to know which key to look for."""
        others = [s for s in self.signatures if (s.name, s.key_hash) not in expected]
        if not others:
            return ""
        names = ", ".join(f"key {s.name!r} ({s.key_hash:08x})" for s in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        return (
            f"; it is signed by {names}{more}: another key than the one it was checked with "
            "(the signing key was replaced, or rotated: a ledger whose key was rotated with "
            "`tracebound keys rotate` signs with its newest key, which `tracebound verify` "
            "lists under 'key rotated', and `verify-consistency` names offline, from a "
            "checkpoint kept before the rotation; or someone else signed it)"
        )

    @classmethod
    def open(
        cls, note: str | bytes, verifiers: NoteVerifier | Iterable[NoteVerifier]
    ) -> SignedNote:
        """Parse ``note`` and verify it (see :meth:`verify`); return it only if it verifies.

        Raises:
            CheckpointError: the note is malformed.
            SignatureInvalid: the signatures do not satisfy :meth:`verify`.
        """
        parsed = cls.parse(note)
        parsed.verify(verifiers)
        return parsed


def _parse_signature_line(line: str) -> NoteSignature:
    if not line.startswith(_SIG_PREFIX):
        raise CheckpointError("signature line must start with an em dash and a space")
    name, sep, b64 = line[len(_SIG_PREFIX) :].partition(" ")
    if not sep or not b64:
        raise CheckpointError("signature line must be '— <key name> <base64 signature>'")
    if not is_valid_key_name(name):
        raise CheckpointError(f"invalid key name {name!r} on signature line")
    blob = _b64decode_strict(b64, "signature")
    if len(blob) < 5:
        raise CheckpointError("signature is too short to hold a key ID and a signature")
    return NoteSignature(name, int.from_bytes(blob[:4], "big"), blob[4:])


def sign_checkpoint(checkpoint: Checkpoint, signers: NoteSigner | Sequence[NoteSigner]) -> str:
    """Format and sign ``checkpoint``; return the signed note text.

    Raises:
        CheckpointError: no signer is given.
    """
    return SignedNote.sign(format_checkpoint_body(checkpoint), signers).encode()


def open_checkpoint(
    note: str | bytes,
    verifiers: NoteVerifier | Iterable[NoteVerifier],
    *,
    origin: str | None = None,
) -> Checkpoint:
    """Verify a signed checkpoint and return its contents.

    Signatures are checked before the body is interpreted, so an unsigned body is never
    parsed into a trusted :class:`Checkpoint`.

    Args:
        note: The signed note text (``bytes`` must be UTF-8).
        verifiers: The keys that must all have signed.
        origin: If given, the checkpoint's origin must equal it, so a checkpoint of another
            log signed by the same key is not mistaken for this one.

    Raises:
        CheckpointError: the note or checkpoint text is malformed, or the origin differs.
        SignatureInvalid: the signatures do not verify.
    """
    signed = SignedNote.open(note, verifiers)
    checkpoint = parse_checkpoint(signed.text)
    if origin is not None and checkpoint.origin != origin:
        raise CheckpointError(
            f"checkpoint is for origin {checkpoint.origin!r}, expected {origin!r}"
        )
    return checkpoint
