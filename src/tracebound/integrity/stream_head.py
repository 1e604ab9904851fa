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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from tracebound.errors import CheckpointError
from tracebound.integrity.chain import GENESIS
from tracebound.integrity.head_note import (
    check_head_fields,
    check_origin,
    head_id,
    head_text,
    head_values,
    open_head_text,
    sign_head_text,
)
from tracebound.integrity.keys import NoteSigner, NoteVerifier

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

_WHAT: Final = "stream head"
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
        check_head_fields(
            _WHAT,
            self.origin,
            ("stream id", self.stream_id),
            (("stream version", self.stream_version, 0), ("tree size", self.tree_size, 1)),
            (("hash", self.hash), ("root", self.root)),
        )
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
    return head_text(STREAM_HEAD_FORMAT, _KEYS, values)


def parse_stream_head(body: str) -> StreamHead:
    """Parse stream-head note text (no signatures), accepting only the form written.

    Raises:
        CheckpointError: not a stream head (a checkpoint or a run head, say), a line
            missing, out of order or extra, or a value not in its one written form.
    """
    values = head_values(_WHAT, STREAM_HEAD_FORMAT, _KEYS, body)
    head = StreamHead(
        origin=values["origin"],
        stream_id=head_id(_WHAT, "stream id", values["stream"]),
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
    return sign_head_text(format_stream_head_body(head), signers)


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
    head = parse_stream_head(open_head_text(note, verifiers))
    check_origin(_WHAT, head.origin, origin)
    return head
