"""Witnesses: keep the newest signed checkpoint outside the store, and refuse to go back.

A signed checkpoint proves what the log looked like, but an attacker who can write the store
can also delete its newest checkpoints and every event after an older one: the older,
genuinely signed state still verifies. A witness closes that hole by remembering the newest
checkpoint somewhere the attacker is assumed not to reach, and by accepting only checkpoints
that extend the one it holds (same origin, not smaller, consistent by an RFC 6962 proof).
``verify`` then compares the store with the witness: a log shorter than the witnessed
checkpoint is a ``rollback``; one as long or longer whose tree at that size has another
root (the witnessed tree is no prefix of it: a store put back and grown again, or
rewritten) is a ``fork``.

:class:`Witness` is the protocol; :class:`FileWitness` keeps one note file per log, by default
in ``$TRACEBOUND_WITNESS_DIR`` or ``~/.local/state/tracebound/witness``. Other witness kinds
(a remote cosigning witness, for example) can implement the same protocol later.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from tracebound.errors import CheckpointError, ConfigError, ProofError, StorageError
from tracebound.integrity.keys import NoteVerifier
from tracebound.integrity.merkle import verify_consistency
from tracebound.integrity.note import MAX_NOTE_BYTES, Checkpoint, open_checkpoint
from tracebound.store.files import make_private_dir, write_file_atomic
from tracebound.store.keyfile import file_stem

try:  # POSIX advisory locks; elsewhere updates are still atomic, only not serialised.
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "WITNESS_DIR_ENV",
    "FileWitness",
    "Witness",
    "default_witness_dir",
    "default_witness_path",
]

WITNESS_DIR_ENV = "TRACEBOUND_WITNESS_DIR"
"""Environment variable naming the directory for witness files."""


@runtime_checkable
class Witness(Protocol):
    """Something that holds a log's newest checkpoint and only lets it move forward."""

    def latest(self, verifier: NoteVerifier) -> Checkpoint | None:
        """Return the held checkpoint, verified with ``verifier``, or None if none is held.

        Raises:
            CheckpointError: what is held is malformed (SignatureInvalid if its signature
                does not verify).
        """
        ...

    def update(
        self, note_text: str, verifier: NoteVerifier, consistency_proof: Sequence[bytes]
    ) -> Checkpoint:
        """Replace the held checkpoint with ``note_text`` if it extends it; return the new one.

        Raises:
            CheckpointError: bad signature, other origin, smaller size (``rollback: ...``)
                or same size with another root (``fork: ...``).
            ProofError: larger, but the consistency proof from the held checkpoint does not
                verify (``fork: ...``: the log forked, or the proof is wrong).
        """
        ...


def default_witness_dir() -> Path:
    """Return ``$TRACEBOUND_WITNESS_DIR`` if set, else ``~/.local/state/tracebound/witness``."""
    env = os.environ.get(WITNESS_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "state" / "tracebound" / "witness"


def default_witness_path(origin: str) -> Path:
    """Return the default witness file for the log ``origin``."""
    return default_witness_dir() / f"{file_stem(origin)}.note"


def _check_extends(held: Checkpoint, new: Checkpoint, proof: Sequence[bytes]) -> None:
    """Raise unless ``new`` is the same tree as ``held`` or a consistent extension of it."""
    if new.origin != held.origin:
        raise CheckpointError(
            f"checkpoint is for origin {new.origin!r}, but the witness holds {held.origin!r}"
        )
    if new.size < held.size:
        raise CheckpointError(
            f"rollback: checkpoint of size {new.size} is older than the witnessed size {held.size}"
        )
    if new.size == held.size:
        if new.root != held.root:
            raise CheckpointError(
                f"fork: checkpoint of size {new.size} has a different root than the witnessed "
                "checkpoint of the same size"
            )
        if proof:
            raise ProofError("equal tree sizes need an empty consistency proof")
        return
    if held.size == 0:
        # Every tree extends the empty tree; a non-empty "proof" is a caller error.
        if proof:
            raise ProofError("a consistency proof from the empty tree must be empty")
        return
    try:
        verify_consistency(held.size, new.size, held.root, new.root, proof)
    except ProofError as exc:
        # The witness cannot tell a forked log from a wrong proof of a good one; a ledger
        # checks its proof before handing it over, so from there it is a fork.
        raise ProofError(
            f"fork: checkpoint of size {new.size} is not shown to extend the witnessed "
            f"checkpoint of size {held.size} (the consistency proof does not verify: the "
            f"log forked after it, or the proof is wrong): {exc}"
        ) from exc


class FileWitness:
    """A witness that keeps the newest signed checkpoint in one file outside the store.

    The file holds the signed note text exactly as signed, so it can be checked by any
    C2SP tool. Writes are atomic and durable (temporary file, fsync, rename, directory fsync)
    and serialised between processes by an advisory lock on ``<path>.lock``.
    """

    def __init__(
        self,
        path: Path,
        *,
        origin: str | None = None,
        store_dir: Path | None = None,
    ) -> None:
        """Use the witness file at ``path``.

        Args:
            path: The note file. Its directory is created 0700 on first update.
            origin: If given, only checkpoints of this origin are accepted or returned.
            store_dir: The store this witness watches; the file may not be inside it, since
                a witness the attacker can rewrite protects nothing.

        Raises:
            ConfigError: ``path`` is inside ``store_dir``.
        """
        self.path = Path(path).expanduser()
        self.origin = origin
        if store_dir is not None:
            here = self.path.resolve()
            store = Path(store_dir).expanduser().resolve()
            if here == store or here.is_relative_to(store):
                raise ConfigError(
                    f"the witness file {self.path} must be outside the store {store_dir}: an "
                    "attacker who can rewrite the store could then roll the witness back too"
                )

    @classmethod
    def for_origin(
        cls, origin: str, *, directory: Path | None = None, store_dir: Path | None = None
    ) -> FileWitness:
        """Return the witness for ``origin`` in ``directory`` (default: the state dir)."""
        base = Path(directory).expanduser() if directory is not None else default_witness_dir()
        return cls(base / f"{file_stem(origin)}.note", origin=origin, store_dir=store_dir)

    def __repr__(self) -> str:
        return f"FileWitness({str(self.path)!r}, origin={self.origin!r})"

    def _read(self) -> bytes | None:
        try:
            with self.path.open("rb") as fh:
                data = fh.read(MAX_NOTE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read witness file {self.path}: {exc}") from exc
        if len(data) > MAX_NOTE_BYTES:
            raise CheckpointError(f"witness file {self.path} is larger than any checkpoint")
        return data

    def latest(self, verifier: NoteVerifier) -> Checkpoint | None:
        """Return the held checkpoint after checking its signature, or None if none is held.

        Raises:
            SignatureInvalid: the held note's signature does not verify (tampered file).
            CheckpointError: the held note is malformed or of another origin.
            StorageError: the file exists but cannot be read.
        """
        data = self._read()
        return None if data is None else self._open_held(data, verifier)

    def _open_held(self, data: bytes, verifier: NoteVerifier) -> Checkpoint:
        try:
            return open_checkpoint(data, verifier, origin=self.origin)
        except CheckpointError as exc:
            # Same class (SignatureInvalid stays SignatureInvalid), plus where it came from.
            raise type(exc)(f"witness file {self.path}: {exc}") from exc

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _make_dir(self) -> None:
        make_private_dir(self.path.parent)

    def update(
        self, note_text: str, verifier: NoteVerifier, consistency_proof: Sequence[bytes]
    ) -> Checkpoint:
        """Accept ``note_text`` only if it verifies and extends the held checkpoint.

        The first checkpoint is accepted on its signature alone (trust on first use). After
        that the new checkpoint must have the same origin, a size not smaller than the held
        one, and either the same root (same size) or a valid consistency proof from the held
        checkpoint. On any refusal the held file is left untouched.

        Raises:
            SignatureInvalid: the new note (or the held one) does not verify.
            CheckpointError: malformed note, other origin, rollback (smaller), or fork
                (same size, another root).
            ProofError: fork (larger, but not consistent with the held checkpoint).
            StorageError: the file could not be read or written.
        """
        new = open_checkpoint(note_text, verifier, origin=self.origin)
        encoded = note_text.encode("utf-8")
        try:
            self._make_dir()
            with self._locked():
                held_bytes = self._read()
                if held_bytes is not None:
                    held = self._open_held(held_bytes, verifier)
                    _check_extends(held, new, consistency_proof)
                    if held_bytes == encoded:
                        return new
                write_file_atomic(self.path, encoded, mode=0o600, overwrite=True)
        except OSError as exc:
            raise StorageError(f"cannot update witness file {self.path}: {exc}") from exc
        return new
