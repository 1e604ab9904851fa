"""Content-addressed blob stores: artifacts, prompts and logs live here, the ledger keeps digests.

A blob's name is its SHA-256 (``sha256:<hex>``), so the ledger can record a digest that
proves which bytes a step produced without holding them (ARCHITECTURE.md, contract 5), and
the chain verifies without any blob. Every store checks bytes against their name on every
read. Erasing a blob removes its bytes; the caller records the erasure in the ledger.

:class:`BlobStore` is the protocol the pipeline, replay and export code use. Two stores
implement it: :class:`FileBlobStore` here (one file per blob, for JSONL and PostgreSQL
ledgers, or when a blob directory is configured) and
:class:`~tracebound.store.sqlite_blobs.SQLiteBlobStore` (a table in a SQLite ledger's own
file, the default there: ADR 0009).

Redaction is the caller's job and happens before :meth:`BlobStore.put`: what is stored is
what was redacted.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from tracebound.errors import ConfigError, IntegrityError, StorageError
from tracebound.ids import Sha256Digest
from tracebound.store.files import fsync_dir

__all__ = [
    "BlobRef",
    "BlobStore",
    "FileBlobStore",
    "checked_blob",
    "parse_digest",
    "sha256_digest",
]

_DIGEST: Final = re.compile(r"^sha256:([0-9a-f]{64})$")
_POINTER_SCHEME: Final = "blob://"


def sha256_digest(data: bytes) -> Sha256Digest:
    """The ``sha256:<hex>`` name of some bytes."""
    return Sha256Digest("sha256:" + hashlib.sha256(data).hexdigest())


@dataclass(frozen=True, slots=True)
class BlobRef:
    """Where a blob is: its digest, a pointer for the ledger, its size."""

    digest: Sha256Digest
    size: int

    @property
    def pointer(self) -> str:
        return f"{_POINTER_SCHEME}{self.digest}"


def _hex_of(digest: str) -> str:
    if digest.startswith(_POINTER_SCHEME):
        digest = digest[len(_POINTER_SCHEME) :]
    m = _DIGEST.match(digest)
    if m is None:
        raise ConfigError(f"not a sha256 blob digest: {digest!r}")
    return m.group(1)


def parse_digest(digest: str) -> Sha256Digest:
    """``sha256:<hex>`` from a digest or a ``blob://sha256:<hex>`` pointer.

    Raises:
        ConfigError: it is neither.
    """
    return Sha256Digest("sha256:" + _hex_of(digest))


def checked_blob(digest: str, data: bytes) -> bytes:
    """``data``, if it hashes to ``digest``: every store's read ends here.

    Raises:
        IntegrityError: the bytes do not match the digest.
    """
    actual = sha256_digest(data)
    if actual != parse_digest(digest):
        raise IntegrityError(f"blob {digest} was altered: its bytes hash to {actual}")
    return data


class BlobStore(Protocol):
    """Where blobs live, by digest; what the Runner, replay and evidence export use.

    Durability, the one guarantee callers rely on: a blob that :meth:`put` returned for is
    durable no later than the ledger entry that names it, provided that entry is appended
    to the ledger the store belongs to. :class:`FileBlobStore` makes it durable before
    ``put`` returns; :class:`~tracebound.store.sqlite_blobs.SQLiteBlobStore` leaves that to
    the ledger's next durable commit in the same file (ADR 0009).
    """

    def put(self, data: bytes) -> BlobRef:
        """Store ``data`` and return its reference; storing twice is a no-op."""
        ...

    def get(self, digest: str) -> bytes:
        """The bytes of a digest or ``blob://`` pointer, checked against it.

        Raises:
            StorageError: no such blob (never stored, or erased).
            IntegrityError: the stored bytes do not match the digest.
        """
        ...

    def exists(self, digest: str) -> bool:
        """Whether the blob's bytes are here (unchecked: :meth:`get` checks them)."""
        ...

    def erase(self, digest: str) -> bool:
        """Remove a blob's bytes; True if it was there. Record the erasure in the ledger."""
        ...


class FileBlobStore:
    """Blobs under ``root/sha256/<2 hex>/<62 hex>``: one file each, durable when put returns.

    Blobs are written once (0600 files in 0700 folders, temp file + fsync + rename +
    directory fsync), so a blob is on disk before any ledger (SQLite, JSONL or PostgreSQL)
    can name it.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        # The shard folders this object made or found, by their two hex digits, so a put
        # neither re-creates (and re-syncs) them nor rebuilds their paths. At most 256; one
        # removed behind our back is made again (see put).
        self._shards: dict[str, Path] = {}
        self._synced_root = False

    def _path(self, digest: str) -> Path:
        h = _hex_of(digest)
        return self.root / "sha256" / h[:2] / h[2:]

    def put(self, data: bytes) -> BlobRef:
        """Store ``data`` durably and return its reference; storing twice is a no-op.

        Durable means on disk when this returns: the file's bytes (fsync), its name (fsync
        of its folder) and the names of the folders above it (each synced by this object
        the first time it uses them, whoever made them). The caller may then record the
        digest in the ledger.
        """
        ref = BlobRef(sha256_digest(data), len(data))
        h = ref.digest[len("sha256:") :]
        shard = self._shards.get(h[:2]) or self.root / "sha256" / h[:2]
        path = shard / h[2:]
        try:
            if shard.name not in self._shards:
                self._use_folders(shard)
            if path.exists():
                # Another writer may have renamed it into place and not synced the folder
                # yet: sync it ourselves before acknowledging.
                fsync_dir(shard)
                return ref
            try:
                self._write(shard, path, data)
            except FileNotFoundError:
                self._shards.clear()  # a folder was removed since we used it: make it again
                self._synced_root = False
                self._use_folders(shard)
                self._write(shard, path, data)
        except OSError as exc:
            raise StorageError(f"could not store blob {ref.digest}: {exc}") from exc
        return ref

    def _write(self, shard: Path, path: Path, data: bytes) -> None:
        # pid and thread: two writers of the same blob never share a temporary file.
        tmp = shard / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:  # os.write may write less than it was given
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # on a full disk, its part would hold space for ever
            raise
        fsync_dir(shard)

    def _use_folders(self, shard: Path) -> None:
        """Make sure ``shard`` and the folders above it exist and that their names are on
        disk, before this object acknowledges any blob in it.

        Syncing only the folders this object made would not do: another thread or process
        may have made a folder and not synced its parent yet (or crashed before it could),
        and a blob inside it would be lost with it. So each object syncs the parents once
        itself, and a shard's parent the first time it uses that shard.
        """
        shards = shard.parent
        if not self._synced_root:
            self.root.mkdir(mode=0o700, exist_ok=True)
            shards.mkdir(mode=0o700, exist_ok=True)
            if not any(shards.iterdir()):
                # A new store: all 256 shard folders at once, so a shard's first use
                # finds it made and pays only the one sync below.
                for index in range(256):
                    (shards / f"{index:02x}").mkdir(mode=0o700, exist_ok=True)
            fsync_dir(self.root.parent)
            fsync_dir(self.root)
            self._synced_root = True
        shard.mkdir(mode=0o700, exist_ok=True)  # an older store, or a shard removed since
        fsync_dir(shards)
        self._shards[shard.name] = shard

    def get(self, digest: str) -> bytes:
        """The blob's bytes, checked against its digest.

        Raises:
            StorageError: no such blob (never stored, or erased).
            IntegrityError: the stored bytes do not match the digest.
        """
        path = self._path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise StorageError(
                f"blob {digest} is not in {self.root} (erased or never stored)"
            ) from None
        except OSError as exc:
            raise StorageError(f"could not read blob {digest}: {exc}") from exc
        return checked_blob(digest, data)

    def exists(self, digest: str) -> bool:
        return self._path(digest).exists()

    def digests(self) -> list[Sha256Digest]:
        """Every blob here, by name, sorted (``tracebound copy`` moves them all); a temporary
        file a writer left (a dot name) or anything else that is not a blob is skipped."""
        found: list[Sha256Digest] = []
        try:
            shards = sorted((self.root / "sha256").iterdir())
        except FileNotFoundError:
            return found
        except OSError as exc:
            raise StorageError(f"could not list the blobs in {self.root}: {exc}") from exc
        for shard in shards:
            try:
                names = sorted(p.name for p in shard.iterdir()) if shard.is_dir() else []
            except OSError as exc:
                raise StorageError(f"could not list the blobs in {shard}: {exc}") from exc
            found.extend(
                Sha256Digest(f"sha256:{shard.name}{name}")
                for name in names
                if _DIGEST.match(f"sha256:{shard.name}{name}")
            )
        return found

    def erase(self, digest: str) -> bool:
        """Remove a blob's bytes; True if it was there. Record the erasure in the ledger."""
        try:
            self._path(digest).unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"could not erase blob {digest}: {exc}") from exc
        return True
