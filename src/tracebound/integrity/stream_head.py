"""Signed stream heads: "in this log, at this size, this stream ends here (or has no record)".

The run head (:mod:`tracebound.integrity.run_head`) says where a run's own stream ends; an
evidence file also proves the run's spend stream (``costs/RUN``), and needs the same
statement about it, including "no record at all": a stream cut back to nothing proves as
well as a genuine empty one. A stream head is a C2SP signed note
(https://c2sp.org/signed-note), signed with the log's checkpoint key, whose text is exactly::

    tracebound-stream-head/1
    origin <origin>
    stream <stream id as a JSON string>
    stream-version <last stream version, decimal; 0: no record of the stream in the tree>
    hash <last record's BLAKE3 chain hash, 64 lower-case hex digits; all zeros for 0>
    tree-size <size of the checkpoint it is bound to, decimal>
    root <that checkpoint's RFC 6962 root, 64 lower-case hex digits>

Like a run head, it never parses as a checkpoint (its second line starts with ``origin ``,
a checkpoint's is a bare number) nor as a run head (another first line), and back.

Parsing is as strict as the run head's: anything not exactly in this form raises
:class:`~tracebound.errors.CheckpointError`; signature problems raise
:class:`~tracebound.errors.SignatureInvalid`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from tracebound.errors import CheckpointError
from tracebound.integrity.chain import GENESIS
from tracebound.integrity.keys import NoteSigner, NoteVerifier
from tracebound.integrity.merkle import HASH_SIZE
from tracebound.integrity.note import MAX_TREE_SIZE, SignedNote

__all__ = [
    "STREAM_HEAD_FORMAT",
    "StreamHead",
    "format_stream_head_body",
    "open_stream_head",
    "parse_stream_head",
    "sign_stream_head",
]

STREAM_HEAD_FORMAT: Final = "tracebound-stream-head/1"
"""The first line of every stream-head note: what the note is, and its version."""

_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")  # 20 digits at most, as the run head
_HEX = re.compile(r"[0-9a-f]{64}")
_KEYS: Final = ("origin", "stream", "stream-version", "hash", "tree-size", "root")


@dataclass(frozen=True, slots=True)
class StreamHead:
    """Where ``stream`` ended in a log of ``tree_size`` records with root ``root``.

    ``stream_version`` 0 (with ``hash`` the 32 zero bytes a stream starts from) says the
    tree holds no record of the stream.
    """

    origin: str
    stream_id: str
    stream_version: int
    hash: bytes
    tree_size: int
    root: bytes

    def __post_init__(self) -> None:
        """Check what the note format can carry.

        Raises:
            CheckpointError: an empty or multi-line origin, an empty stream id, a version or
                size out of range, a hash or root not 32 bytes, or version 0 with a hash
                other than zeros (an empty stream has no last record).
        """
        if not isinstance(self.origin, str) or not self.origin or "\n" in self.origin:
            raise CheckpointError("stream head origin must be a non-empty single line")
        if not isinstance(self.stream_id, str) or not self.stream_id:
            raise CheckpointError("stream head stream id must be a non-empty string")
        for name, value, low in (
            ("stream version", self.stream_version, 0),
            ("tree size", self.tree_size, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise CheckpointError(f"stream head {name} must be an int")
            if not low <= value <= MAX_TREE_SIZE:
                raise CheckpointError(f"stream head {name} {value} is out of range")
        for name, raw in (("hash", self.hash), ("root", self.root)):
            if not isinstance(raw, bytes) or len(raw) != HASH_SIZE:
                raise CheckpointError(f"stream head {name} must be {HASH_SIZE} bytes")
        if self.stream_version == 0 and self.hash != GENESIS:
            raise CheckpointError("a stream head of version 0 has the zero hash")


def format_stream_head_body(head: StreamHead) -> str:
    """Return the note text of ``head``: the bytes its signature covers."""
    values = (
        head.origin,
        json.dumps(head.stream_id, ensure_ascii=True),
        str(head.stream_version),
        head.hash.hex(),
        str(head.tree_size),
        head.root.hex(),
    )
    lines = [STREAM_HEAD_FORMAT, *(f"{k} {v}" for k, v in zip(_KEYS, values, strict=True))]
    return "".join(f"{line}\n" for line in lines)


def _values(body: str) -> dict[str, str]:
    """The note text's values by key, each line in its place."""
    if not isinstance(body, str) or not body.endswith("\n"):
        raise CheckpointError("stream head text must end with a newline")
    lines = body[:-1].split("\n")
    if lines[0] != STREAM_HEAD_FORMAT:
        raise CheckpointError(f"not a stream head: the first line is not {STREAM_HEAD_FORMAT!r}")
    if len(lines) != 1 + len(_KEYS):
        raise CheckpointError(f"a stream head has exactly {1 + len(_KEYS)} lines")
    values: dict[str, str] = {}
    for key, line in zip(_KEYS, lines[1:], strict=True):
        name, sep, value = line.partition(" ")
        if name != key or not sep or not value:
            raise CheckpointError(f"stream head line {line[:40]!r} is not '{key} <value>'")
        values[key] = value
    return values


def parse_stream_head(body: str) -> StreamHead:
    """Parse stream-head note text (no signatures), accepting only the form written.

    Raises:
        CheckpointError: not a stream head (a checkpoint or a run head, say), a line
            missing, out of order or extra, or a value not in its one written form.
    """
    values = _values(body)
    for key in ("stream-version", "tree-size"):
        if not _DECIMAL.fullmatch(values[key]):
            raise CheckpointError(
                f"stream head {key} {values[key]!r:.40} is not plain decimal below 2**64"
            )
    for key in ("hash", "root"):
        if not _HEX.fullmatch(values[key]):
            raise CheckpointError(f"stream head {key} is not 64 lower-case hex digits")
    try:
        stream_id = json.loads(values["stream"])
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the stack
        raise CheckpointError("stream head stream id is not a JSON string") from exc
    if (
        not isinstance(stream_id, str)
        or json.dumps(stream_id, ensure_ascii=True) != values["stream"]
    ):
        raise CheckpointError("stream head stream id is not a JSON string in its written form")
    head = StreamHead(
        origin=values["origin"],
        stream_id=stream_id,
        stream_version=int(values["stream-version"]),
        hash=bytes.fromhex(values["hash"]),
        tree_size=int(values["tree-size"]),
        root=bytes.fromhex(values["root"]),
    )
    if format_stream_head_body(head) != body:  # one head, one text
        raise CheckpointError("stream head text is not in its written form")
    return head


def sign_stream_head(head: StreamHead, signers: NoteSigner | Iterable[NoteSigner]) -> str:
    """Format and sign ``head``; return the signed note text.

    Raises:
        CheckpointError: no signer is given, or the origin holds a forbidden character.
    """
    return SignedNote.sign(format_stream_head_body(head), signers).encode()


def open_stream_head(
    note: str | bytes,
    verifiers: NoteVerifier | Iterable[NoteVerifier],
    *,
    origin: str | None = None,
) -> StreamHead:
    """Verify a signed stream head and return its contents (signatures first, then the text).

    Args:
        origin: If given, the head must name this log.

    Raises:
        CheckpointError: the note or its text is malformed, or names another origin.
        SignatureInvalid: the signatures do not verify.
    """
    signed = SignedNote.open(note, verifiers)
    head = parse_stream_head(signed.text)
    if origin is not None and head.origin != origin:
        raise CheckpointError(f"stream head is for origin {head.origin!r}, expected {origin!r}")
    return head
