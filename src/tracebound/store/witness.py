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

The default witness file is named after the log's origin, and the origin is read from the
store, which the attacker holds: renamed, it would point at another (empty) witness. So
beside the witness files a *binding* per store, ``stores/<blake3(identity)>.json`` holding
``{"store": identity, "origin": origin}``, records which origin the store at that place is
(:func:`store_identity`, :func:`read_binding`, :func:`bind_store`); a store that names
another origin than its binding is not the log the witness follows (:class:`OriginMismatch`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable
from urllib.parse import parse_qsl, unquote, urlsplit

from blake3 import blake3

from tracebound.errors import (
    CheckpointError,
    ConfigError,
    DamageKind,
    LedgerDamaged,
    ProofError,
    StorageError,
    StoreNotFound,
    TraceboundError,
)
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
    "OriginMismatch",
    "Witness",
    "bind_store",
    "binding_path",
    "choose_witness",
    "default_witness_dir",
    "default_witness_path",
    "missing_store",
    "place_identity",
    "read_binding",
    "store_identity",
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


def store_identity(store: object) -> str:
    """Where a store is, as a stable name: what its binding to an origin is keyed by.

    SQLite: the database file; JSONL: the directory; both absolute, with the parent
    directory resolved but not the last name, so a store replaced by a symlink to another
    file keeps its place's identity. PostgreSQL: host, port, database and schema (no user,
    no password). Anything else: its ``url``.
    """
    url = str(getattr(store, "url", ""))
    path = getattr(store, "path", None)
    scheme = url.split(":", 1)[0]
    if scheme in {"sqlite", "jsonl"} and path is not None:
        return place_identity(scheme, Path(path))
    if scheme in {"postgresql", "postgres"}:
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        host = parts.hostname or query.get("host", "")
        port = str(parts.port or query.get("port", "5432"))
        dbname = unquote(parts.path.lstrip("/"))
        return f"postgresql://{host}:{port}/{dbname}?schema={query.get('schema', '')}"
    return url


def place_identity(scheme: str, path: Path) -> str:
    """:func:`store_identity` of a SQLite file or JSONL directory, from its path alone (the
    place may hold no store: see :func:`missing_store`)."""
    p = path.expanduser()
    return f"{scheme}://{p.absolute().parent.resolve() / p.name}"


def missing_store(missing: StoreNotFound) -> TraceboundError:
    """What a store found missing means: :class:`LedgerDamaged` when its place is bound to a
    log (``init`` ran there, so a ledger was there and is gone), else ``missing`` itself."""
    if missing.place is None:
        return missing
    scheme, where = missing.place
    identity = place_identity(scheme, Path(where))
    try:
        origin = read_binding(identity)
    except ConfigError:
        return missing
    if origin is None:
        return missing
    return LedgerDamaged(
        DamageKind.TRUNCATION,
        1,
        f"no ledger at {where}, but this place holds the log {origin!r} (bound in "
        f"{binding_path(identity)}): its events are gone, not moved here; restore the ledger "
        "from a copy (if this is a new ledger on purpose, delete that binding file and run "
        "`tracebound init`)",
    )


def binding_path(identity: str) -> Path:
    """The file binding the store ``identity`` to its origin, beside the witness files."""
    # surrogateescape: a path's name may hold bytes that are not UTF-8 (os.fsencode's way)
    key = blake3(identity.encode("utf-8", "surrogateescape")).hexdigest()
    return default_witness_dir() / "stores" / f"{key}.json"


def read_binding(identity: str) -> str | None:
    """The origin the store ``identity`` is bound to, or None when it has no binding yet.

    Raises:
        ConfigError: the binding file is unreadable or is not a binding of this store.
    """
    path = binding_path(identity)
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the store's origin binding {path}: {exc}") from exc
    except RecursionError:  # valid JSON's start, nested past the stack: not a binding
        raise ConfigError(
            f"cannot read the store's origin binding {path}: nested too deeply"
        ) from None
    if (
        not isinstance(data, dict)
        or data.get("store") != identity
        or not isinstance(data.get("origin"), str)
    ):
        raise ConfigError(f"the origin binding {path} is not a binding of the store {identity}")
    origin: str = data["origin"]
    return origin


def bind_store(identity: str, origin: str) -> str:
    """Bind the store ``identity`` to ``origin`` unless it is bound already; return the
    origin it is bound to (``origin``, or the one an earlier binding names).

    The file is created 0600 in a 0700 directory, atomically and never overwritten, so two
    processes binding at once cannot lose either's binding.

    Raises:
        ConfigError: an existing binding file is unreadable or malformed.
        StorageError: the binding could not be written.
    """
    path = binding_path(identity)
    held = read_binding(identity)
    if held is not None:
        return held
    data = json.dumps({"store": identity, "origin": origin}, sort_keys=True).encode() + b"\n"
    try:
        make_private_dir(path.parent)
        write_file_atomic(path, data, mode=0o600, overwrite=False)
    except FileExistsError:
        pass  # another process bound it first: its binding stands
    except OSError as exc:
        raise StorageError(f"cannot write the store's origin binding {path}: {exc}") from exc
    held = read_binding(identity)
    return origin if held is None else held


@dataclass(frozen=True)
class OriginMismatch:
    """The store names another origin than the one its witness follows.

    ``expected`` is the origin the store's binding (``source``) or the explicitly given
    witness file says this store is; ``found`` is the one the store itself names now.
    """

    found: str
    expected: str
    source: str

    def message(self) -> str:
        return (
            f"this store names the origin {self.found!r}, but {self.source} says it is the "
            f"log {self.expected!r}: the log in the store is not the one its witness follows "
            "(renamed, or another ledger's store put in its place)"
        )

    def damage(self, found: LedgerDamaged | None = None) -> LedgerDamaged:
        """FORK damage naming the mismatch (after ``found``'s own finding, if given)."""
        if found is None:
            return LedgerDamaged(DamageKind.FORK, None, self.message())
        return LedgerDamaged(found.kind, found.position, f"{found.detail}; {self.message()}")


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

    def held_origin(self) -> str | None:
        """The origin line of the held note, signature not checked, or None if none is held.

        To choose which origin to expect (:meth:`latest` then checks the signature); the file
        is outside the store, so its holder cannot pick it.
        """
        data = self._read()
        if data is None:
            return None
        return data.split(b"\n", 1)[0].decode("utf-8", "replace")

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
            # Same class (SignatureInvalid stays SignatureInvalid), plus where it came from
            # and what to do: the ledger may be fine, and nothing here repairs either.
            raise type(exc)(
                f"witness file {self.path}: {exc}. The witness file itself is damaged, not "
                "the ledger: restore it from a backup; without one, move it aside and run "
                "`tracebound checkpoint` to start a new witness, which then vouches only for "
                "the ledger as it is now"
            ) from exc

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


def choose_witness(
    store: object, origin: str, store_dir: Path | None, *, explicit: Path | None, binding: bool
) -> tuple[FileWitness, OriginMismatch | None]:
    """The witness a store named ``origin`` is checked against, and whether the store still
    names the origin that witness follows.

    ``explicit`` (``--witness PATH``): the file's own checkpoint names the log it follows.
    Otherwise the default witness of the origin the store is *bound* to; without a binding
    one is written (trust on first use) when the witness is about to be written
    (``binding``: ``checkpoint``) or the witness of the store's origin already exists. On a
    mismatch the witness returned is the expected origin's, so ``verify`` still compares
    the log with it; the caller decides whether to refuse (:meth:`OriginMismatch.damage`).
    """
    if explicit is not None:
        chosen = FileWitness(explicit, origin=origin, store_dir=store_dir)
        try:
            held = chosen.held_origin()
        except (CheckpointError, StorageError):
            return chosen, None  # unreadable or oversized: `latest` reports it as before
        if held is None or held == origin:
            return chosen, None
        found = OriginMismatch(found=origin, expected=held, source=f"the witness file {explicit}")
        return FileWitness(explicit, origin=held, store_dir=store_dir), found
    identity = store_identity(store)
    bound = read_binding(identity)
    if bound is None and (binding or default_witness_path(origin).exists()):
        try:
            bound = bind_store(identity, origin)
        except StorageError:
            if binding:
                raise
            # A read-only witness directory: check as before, bind on the next checkpoint.
    if bound is None or bound == origin:
        return FileWitness(default_witness_path(origin), origin=origin, store_dir=store_dir), None
    found = OriginMismatch(
        found=origin, expected=bound, source=f"its binding {binding_path(identity)}"
    )
    return FileWitness(default_witness_path(bound), origin=bound, store_dir=store_dir), found
