"""Signed run heads: the signed statement "in this log, at this size, this run ended here".

A checkpoint proves that records are in the log; it says nothing about where one run's
stream stops, so a copy of a run cut back to a genuine earlier record still proves every
record it keeps. A run head closes that gap. It is a C2SP signed note
(https://c2sp.org/signed-note), signed with the same Ed25519 key as the log's checkpoints,
whose text is exactly::

    tracebound-run-head/1
    origin <origin>
    run <run id as a JSON string>
    stream-version <last stream version, decimal>
    hash <last record's BLAKE3 chain hash, 64 lower-case hex digits>
    status <running|completed|failed|gated|rejected>
    tree-size <size of the checkpoint it is bound to, decimal>
    root <that checkpoint's RFC 6962 root, 64 lower-case hex digits>

A run head can never be read as a checkpoint, nor a checkpoint as a run head: a checkpoint's
second line is its tree size in plain decimal, and a run head's second line starts with
``origin ``, so :func:`~tracebound.integrity.note.parse_checkpoint` refuses every run head
and :func:`parse_run_head` refuses every checkpoint, whatever the origin is called. The run
id is written as a JSON string (ASCII, escaped) so that any id fits on one line.

Parsing is as strict as checkpoint parsing: anything not exactly in this form raises
:class:`~tracebound.errors.CheckpointError`, and signature problems raise
:class:`~tracebound.errors.SignatureInvalid`. The crypto is the signed-note code's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from tracebound.errors import CheckpointError
from tracebound.events.catalog import FINAL_RUN_STATUSES
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
    "RUN_HEAD_FORMAT",
    "RUN_STATUSES",
    "RunHead",
    "format_run_head_body",
    "open_run_head",
    "parse_run_head",
    "sign_run_head",
]

RUN_HEAD_FORMAT: Final = "tracebound-run-head/1"
"""The first line of every run-head note: what the note is, and its version."""

RUN_STATUSES: Final = FINAL_RUN_STATUSES | {"running", "gated"}
"""What a run head (and an evidence file) may say a run is: finished, paused, or going on."""

_WHAT: Final = "run head"
_KEYS: Final = ("origin", "run", "stream-version", "hash", "status", "tree-size", "root")


@dataclass(frozen=True, slots=True)
class RunHead:
    """Where a run's stream ended in a log of ``tree_size`` records with root ``root``."""

    origin: str
    run_id: str
    stream_version: int
    hash: bytes
    status: str
    tree_size: int
    root: bytes

    def __post_init__(self) -> None:
        """Check what the note format can carry.

        Raises:
            CheckpointError: an empty or multi-line origin, a run id that is not a string, a
                version below 1 or a size out of range, a hash or root not 32 bytes, or an
                unknown status.
        """
        check_head_fields(
            _WHAT,
            self.origin,
            ("run id", self.run_id),
            (("stream version", self.stream_version, 1), ("tree size", self.tree_size, 1)),
            (("hash", self.hash), ("root", self.root)),
        )
        if self.status not in RUN_STATUSES:
            raise CheckpointError(f"unknown run status {self.status!r:.60}")


def format_run_head_body(head: RunHead) -> str:
    """Return the note text of ``head``: the bytes its signature covers."""
    values = (
        head.origin,
        json.dumps(head.run_id, ensure_ascii=True),
        str(head.stream_version),
        head.hash.hex(),
        head.status,
        str(head.tree_size),
        head.root.hex(),
    )
    return head_text(RUN_HEAD_FORMAT, _KEYS, values)


def parse_run_head(body: str) -> RunHead:
    """Parse run-head note text (no signatures), accepting only the form written.

    Raises:
        CheckpointError: not a run head (another first line, such as a checkpoint's origin),
            a line missing, out of order or extra, or a value not in its one written form.
    """
    values = head_values(_WHAT, RUN_HEAD_FORMAT, _KEYS, body)
    head = RunHead(
        origin=values["origin"],
        run_id=head_id(_WHAT, "run id", values["run"]),
        stream_version=int(values["stream-version"]),
        hash=bytes.fromhex(values["hash"]),
        status=values["status"],
        tree_size=int(values["tree-size"]),
        root=bytes.fromhex(values["root"]),
    )
    if format_run_head_body(head) != body:  # one head, one text
        raise CheckpointError("run head text is not in its written form")
    return head


def sign_run_head(head: RunHead, signers: NoteSigner | Iterable[NoteSigner]) -> str:
    """Format and sign ``head``; return the signed note text.

    Raises:
        CheckpointError: no signer is given, or the origin holds a forbidden character.
    """
    return sign_head_text(format_run_head_body(head), signers)


def open_run_head(
    note: str | bytes,
    verifiers: NoteVerifier | Iterable[NoteVerifier],
    *,
    origin: str | None = None,
) -> RunHead:
    """Verify a signed run head and return its contents (signatures first, then the text).

    Args:
        origin: If given, the head must name this log.

    Raises:
        CheckpointError: the note or its text is malformed, or names another origin.
        SignatureInvalid: the signatures do not verify.
    """
    head = parse_run_head(open_head_text(note, verifiers))
    check_origin(_WHAT, head.origin, origin)
    return head
