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
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from tracebound.errors import CheckpointError
from tracebound.events.catalog import FINAL_RUN_STATUSES
from tracebound.integrity.keys import NoteSigner, NoteVerifier
from tracebound.integrity.merkle import HASH_SIZE
from tracebound.integrity.note import MAX_TREE_SIZE, SignedNote

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

_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")  # 20 digits at most: see the note module
_HEX = re.compile(r"[0-9a-f]{64}")
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
        if not isinstance(self.origin, str) or not self.origin or "\n" in self.origin:
            raise CheckpointError("run head origin must be a non-empty single line")
        if not isinstance(self.run_id, str) or not self.run_id:
            raise CheckpointError("run head run id must be a non-empty string")
        for name, value, low in (
            ("stream version", self.stream_version, 1),
            ("tree size", self.tree_size, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise CheckpointError(f"run head {name} must be an int")
            if not low <= value <= MAX_TREE_SIZE:
                raise CheckpointError(f"run head {name} {value} is out of range")
        for name, raw in (("hash", self.hash), ("root", self.root)):
            if not isinstance(raw, bytes) or len(raw) != HASH_SIZE:
                raise CheckpointError(f"run head {name} must be {HASH_SIZE} bytes")
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
    lines = [RUN_HEAD_FORMAT, *(f"{k} {v}" for k, v in zip(_KEYS, values, strict=True))]
    return "".join(f"{line}\n" for line in lines)


def parse_run_head(body: str) -> RunHead:
    """Parse run-head note text (no signatures), accepting only the form written.

    Raises:
        CheckpointError: not a run head (another first line, such as a checkpoint's origin),
            a line missing, out of order or extra, or a value not in its one written form.
    """
    if not isinstance(body, str) or not body.endswith("\n"):
        raise CheckpointError("run head text must end with a newline")
    lines = body[:-1].split("\n")
    if lines[0] != RUN_HEAD_FORMAT:
        raise CheckpointError(f"not a run head: the first line is not {RUN_HEAD_FORMAT!r}")
    if len(lines) != 1 + len(_KEYS):
        raise CheckpointError(f"a run head has exactly {1 + len(_KEYS)} lines")
    values: dict[str, str] = {}
    for key, line in zip(_KEYS, lines[1:], strict=True):
        name, sep, value = line.partition(" ")
        if name != key or not sep or not value:
            raise CheckpointError(f"run head line {line[:40]!r} is not '{key} <value>'")
        values[key] = value
    for key in ("stream-version", "tree-size"):
        if not _DECIMAL.fullmatch(values[key]):
            raise CheckpointError(
                f"run head {key} {values[key]!r:.40} is not plain decimal below 2**64"
            )
    for key in ("hash", "root"):
        if not _HEX.fullmatch(values[key]):
            raise CheckpointError(f"run head {key} is not 64 lower-case hex digits")
    try:
        run_id = json.loads(values["run"])
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the stack
        raise CheckpointError("run head run id is not a JSON string") from exc
    if not isinstance(run_id, str) or json.dumps(run_id, ensure_ascii=True) != values["run"]:
        raise CheckpointError("run head run id is not a JSON string in its written form")
    head = RunHead(
        origin=values["origin"],
        run_id=run_id,
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
    return SignedNote.sign(format_run_head_body(head), signers).encode()


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
    signed = SignedNote.open(note, verifiers)
    head = parse_run_head(signed.text)
    if origin is not None and head.origin != origin:
        raise CheckpointError(f"run head is for origin {head.origin!r}, expected {origin!r}")
    return head
