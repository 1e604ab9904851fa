"""A content-addressed blob store: artifacts, prompts and logs live here, the ledger keeps digests.

A blob's name is its SHA-256 (``sha256:<hex>``), so the ledger can record a digest that
proves which bytes a step produced without holding them (ARCHITECTURE.md, contract 5), and
the chain verifies without any blob. Blobs are written once (0600 files in 0700 folders,
temp file + fsync + rename + directory fsync) and checked against their name on every read.
Erasing a blob removes its bytes; the caller records the erasure in the ledger.

Redaction is the caller's job and happens before :meth:`BlobStore.put`: what is stored is
what was redacted.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tracebound.errors import ConfigError, IntegrityError, StorageError
from tracebound.ids import Sha256Digest

__all__ = ["BlobRef", "BlobStore", "sha256_digest"]

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


class BlobStore:
    """Blobs under ``root/sha256/<2 hex>/<62 hex>``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, digest: str) -> Path:
        h = _hex_of(digest)
        return self.root / "sha256" / h[:2] / h[2:]

    def put(self, data: bytes) -> BlobRef:
        """Store ``data`` durably and return its reference; storing twice is a no-op."""
        ref = BlobRef(sha256_digest(data), len(data))
        path = self._path(ref.digest)
        if path.exists():
            return ref
        try:
            for directory in (self.root, self.root / "sha256", path.parent):
                directory.mkdir(mode=0o700, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            tmp.replace(path)
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise StorageError(f"could not store blob {ref.digest}: {exc}") from exc
        return ref

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
        if sha256_digest(data) != f"sha256:{_hex_of(digest)}":
            raise IntegrityError(
                f"blob {digest} was altered: its bytes hash to {sha256_digest(data)}"
            )
        return data

    def exists(self, digest: str) -> bool:
        return self._path(digest).exists()

    def erase(self, digest: str) -> bool:
        """Remove a blob's bytes; True if it was there. Record the erasure in the ledger."""
        try:
            self._path(digest).unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"could not erase blob {digest}: {exc}") from exc
        return True
