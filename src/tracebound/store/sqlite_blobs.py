"""Blobs inside a SQLite ledger's own file, made durable by the ledger's next commit (ADR 0009).

A traced step stores its artifact, then appends the ARL entry that names it. With blobs as
files that cost three fsyncs (the blob, its folder, the WAL commit); here it costs one. The
blob goes into a ``blobs`` table of the ledger's database, in its own transaction, on a
connection with ``synchronous=NORMAL``: the commit appends the blob's pages to the WAL and
does not fsync. The ARL append then commits with ``synchronous=FULL``, and the fsync of the
WAL that makes the entry durable also makes every earlier frame durable, the blob's among
them (fsync flushes the whole file, whoever wrote it). After a power loss SQLite recovers
the WAL only up to its first invalid frame (checksums are cumulative), so the entry never
survives without the blob. ADR 0009 has the whole argument, with checkpoints and other
processes, and its sources.

So, unlike :class:`~tracebound.store.blobs.FileBlobStore`, :meth:`SQLiteBlobStore.put` does
not make a blob durable by itself: the next durable commit to the same file does. That is
all the Runner needs (the blob is durable no later than the entry that names it), and the
store is only ever paired with the ledger whose file it shares
(:meth:`~tracebound.pipeline.config.RunnerConfig.blob_store`).

The table is a rowid table keyed by the digest, not ``WITHOUT ROWID``: SQLite advises
``WITHOUT ROWID`` only for rows under about 1/20 of a page, and a ~1 KB artifact is four
times that; measured, a 1 KB put writes 3.0 WAL frames as a rowid row and 4.6 without.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from tracebound.errors import ConfigError, StorageError, StoreClosed, StoreNotFound
from tracebound.ids import Sha256Digest
from tracebound.store.blobs import (
    BlobRef,
    BlobStore,
    FileBlobStore,
    checked_blob,
    parse_digest,
    sha256_digest,
)
from tracebound.store.sqlite import _WAL_AUTOCHECKPOINT, DB_FILENAME, SQLiteStore

__all__ = ["BLOB_TABLE", "SQLiteBlobStore"]

BLOB_TABLE: Final = "blobs"
_SCHEMA: Final = (
    f"CREATE TABLE IF NOT EXISTS {BLOB_TABLE} (digest TEXT PRIMARY KEY, data BLOB NOT NULL)"
)
# Constant table name, bound values only.
_INSERT: Final = f"INSERT OR IGNORE INTO {BLOB_TABLE} (digest, data) VALUES (?, ?)"  # noqa: S608
# CAST, as the ledger's reads do: a row rewritten as TEXT is judged by its bytes.
_SELECT: Final = f"SELECT CAST(data AS BLOB) FROM {BLOB_TABLE} WHERE digest = ?"  # noqa: S608
_EXISTS: Final = f"SELECT 1 FROM {BLOB_TABLE} WHERE digest = ?"  # noqa: S608
_DIGESTS: Final = f"SELECT digest FROM {BLOB_TABLE}"  # noqa: S608
_DELETE: Final = f"DELETE FROM {BLOB_TABLE} WHERE digest = ?"  # noqa: S608


def _connect(path: Path, busy_timeout: float, *, durable: bool) -> sqlite3.Connection:
    """The blob connection: WAL checked, no fsync at commit (unless ``durable``), the blobs
    table made."""
    conn = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
    )
    try:
        (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
        wal = str(mode).lower() == "wal"
        if wal:
            # No fsync at commit: the ledger's FULL commit of the entry that names the
            # blob syncs the WAL, this blob's frames included (module docstring).
            conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            # The ledger's own threshold: a lower one here would checkpoint on blob puts
            # more often, and a checkpoint is two fsyncs inside someone's step.
            conn.execute(f"PRAGMA wal_autocheckpoint={_WAL_AUTOCHECKPOINT}")
            # erase() must remove a blob's bytes, not only unlink its row: zero them.
            conn.execute("PRAGMA secure_delete=ON")
            conn.execute(_SCHEMA)
    except BaseException:
        conn.close()
        raise
    if not wal:
        conn.close()
        raise ConfigError(
            f"{path} is in journal_mode={mode}, not WAL: a blob committed without fsync "
            "is made durable by the ledger's next commit only through a shared WAL"
        )
    return conn


class SQLiteBlobStore:
    """Blobs in the ``blobs`` table of a SQLite ledger's database file.

    Args:
        ledger: the ledger's :class:`SQLiteStore`, or its path (file or directory) as
            :class:`SQLiteStore` takes it. The file must exist and be in WAL mode: the
            durability argument above needs the blob and the entry in one WAL.
        fallback: read from here what the table does not hold, and erase there too. For
            stores from before ADR 0009, whose blobs are files beside the ledger; new blobs
            always go to the table.
        busy_timeout: seconds a put waits for another writer's lock.
        durable: make each put durable when it returns (an fsync each), for a writer
            that appends no entry after it: ``tracebound copy`` moving a ledger's blobs.

    Safe to share between threads (one connection, used under a lock) and processes.

    Raises:
        StoreNotFound: there is no ledger file at ``ledger``.
        ConfigError: the database is not in WAL mode.
    """

    def __init__(
        self,
        ledger: SQLiteStore | str | Path,
        *,
        fallback: BlobStore | None = None,
        busy_timeout: float = 60.0,
        durable: bool = False,
    ) -> None:
        path = ledger.path if isinstance(ledger, SQLiteStore) else self.database_file(ledger)
        if not path.is_file():
            raise StoreNotFound(
                f"no ledger at {path}: SQLite blobs live in the ledger's own file; "
                "run `tracebound init` first"
            )
        self.path = path
        self.fallback = fallback
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._conn = _connect(path, busy_timeout, durable=durable)
        except sqlite3.Error as exc:
            raise StorageError(f"sqlite open of {path} failed: {exc}") from exc

    @staticmethod
    def database_file(path: str | Path) -> Path:
        """The file a ledger path names, resolved exactly as :class:`SQLiteStore` does."""
        p = Path(path)
        if p.is_dir() or (not p.suffix and not p.exists()):
            p = p / DB_FILENAME
        return p

    # -- the BlobStore protocol ---------------------------------------------------------

    def put(self, data: bytes) -> BlobRef:
        """Store ``data`` (durable with the next durable commit to this file); idempotent.

        One statement in autocommit mode is one transaction; SQLite retries its write lock
        through the busy handler, as it does for ``BEGIN IMMEDIATE``.
        """
        ref = BlobRef(sha256_digest(data), len(data))
        with self._using("store blob") as conn:
            conn.execute(_INSERT, (ref.digest, data))
        return ref

    def get(self, digest: str) -> bytes:
        """The blob's bytes, checked against its digest.

        Raises:
            StorageError: no such blob (never stored, or erased).
            IntegrityError: the stored bytes do not match the digest.
        """
        key = parse_digest(digest)
        with self._using("read blob") as conn:
            row = conn.execute(_SELECT, (key,)).fetchone()
        if row is None:
            if self.fallback is not None and self.fallback.exists(key):
                return self.fallback.get(key)
            raise StorageError(f"blob {digest} is not in {self.path} (erased or never stored)")
        return checked_blob(digest, bytes(row[0]))

    def exists(self, digest: str) -> bool:
        key = parse_digest(digest)
        with self._using("read blob") as conn:
            found = conn.execute(_EXISTS, (key,)).fetchone() is not None
        return found or (self.fallback is not None and self.fallback.exists(key))

    def digests(self) -> list[Sha256Digest]:
        """Every blob here (the fallback's too), by name, sorted: what ``tracebound copy``
        moves."""
        with self._using("list blobs") as conn:
            found = {Sha256Digest(str(d)) for (d,) in conn.execute(_DIGESTS).fetchall()}
        if isinstance(self.fallback, FileBlobStore):
            found.update(self.fallback.digests())
        return sorted(found)

    def erase(self, digest: str) -> bool:
        """Remove a blob's bytes; True if it was there. Record the erasure in the ledger.

        ``secure_delete`` zeroes the row's bytes in the database's pages, but the WAL can
        still hold earlier images of those pages, so a checkpoint copies the WAL back and
        truncates it. It waits for other connections' transactions up to the busy timeout;
        if one outlasts it, the old images stay in the WAL until SQLite reuses the file.
        """
        key = parse_digest(digest)
        with self._using("erase blob") as conn:
            removed = conn.execute(_DELETE, (key,)).rowcount > 0
            if removed:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        if self.fallback is not None and self.fallback.erase(key):
            removed = True
        return removed

    # -- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __enter__(self) -> SQLiteBlobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _using(self, what: str) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock; sqlite3 errors become StorageError."""
        with self._lock:
            if self._closed:
                raise StoreClosed(f"the blob store in {self.path} is closed")
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise StorageError(f"sqlite {what} in {self.path} failed: {exc}") from exc
