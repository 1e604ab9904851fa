"""One contract for every BlobStore: the file store and the SQLite store run the same tests.

Each store is real: files in a temporary folder, or the ``blobs`` table of a real SQLite
ledger file. ``alter`` rewrites a stored blob's bytes behind the store's back, the way an
attacker holding the store's files would.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tracebound.errors import ConfigError, IntegrityError, StorageError
from tracebound.store.blobs import BlobStore, FileBlobStore, sha256_digest
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.sqlite_blobs import SQLiteBlobStore


@dataclass
class Subject:
    store: BlobStore
    alter: Callable[[str, bytes], None]  # (digest, new bytes)
    reopen: Callable[[], BlobStore]  # a second handle on the same blobs


def _file(tmp_path: Path) -> Iterator[Subject]:
    root = tmp_path / "blobs"
    store = FileBlobStore(root)

    def alter(digest: str, data: bytes) -> None:
        store._path(digest).write_bytes(data)

    yield Subject(store, alter, lambda: FileBlobStore(root))


def _sqlite(tmp_path: Path) -> Iterator[Subject]:
    ledger = SQLiteStore(tmp_path / "store")
    store = SQLiteBlobStore(ledger)
    handles = [store]

    def alter(digest: str, data: bytes) -> None:
        with sqlite3.connect(ledger.path) as conn:
            changed = conn.execute("UPDATE blobs SET data = ? WHERE digest = ?", (data, digest))
            assert changed.rowcount == 1

    def reopen() -> BlobStore:
        handles.append(SQLiteBlobStore(ledger.path))
        return handles[-1]

    yield Subject(store, alter, reopen)
    for handle in handles:
        handle.close()
    ledger.close()


@pytest.fixture(params=["file", "sqlite"])
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    make = _file if request.param == "file" else _sqlite
    yield from make(tmp_path)


def test_put_then_get_round_trips_by_digest_and_pointer(subject: Subject) -> None:
    store = subject.store
    ref = store.put(b"hello")
    assert ref.digest == sha256_digest(b"hello") and ref.size == 5
    assert ref.pointer == f"blob://{ref.digest}"
    assert store.get(ref.digest) == b"hello"
    assert store.get(ref.pointer) == b"hello"
    assert store.exists(ref.digest) and store.exists(ref.pointer)
    assert store.put(b"hello") == ref  # a second put is a no-op
    assert subject.reopen().get(ref.digest) == b"hello"  # another handle sees it


def test_empty_and_large_blobs_round_trip(subject: Subject) -> None:
    large = bytes(range(256)) * 8192  # 2 MiB: SQLite overflow pages, several file writes
    for data in (b"", large):
        ref = subject.store.put(data)
        assert ref.size == len(data)
        assert subject.store.get(ref.digest) == data


def test_unknown_blob_is_a_storage_error(subject: Subject) -> None:
    digest = sha256_digest(b"never stored")
    assert not subject.store.exists(digest)
    with pytest.raises(StorageError, match="erased or never stored"):
        subject.store.get(digest)


def test_a_malformed_digest_is_a_config_error(subject: Subject) -> None:
    for bad in ("sha256:" + "A" * 64, "md5:abc", "blob://sha256:12", "../../etc/passwd"):
        with pytest.raises(ConfigError, match="not a sha256 blob digest"):
            subject.store.get(bad)
        with pytest.raises(ConfigError):
            subject.store.exists(bad)
        with pytest.raises(ConfigError):
            subject.store.erase(bad)


def test_altered_bytes_are_refused_on_read(subject: Subject) -> None:
    ref = subject.store.put(b"original")
    subject.alter(ref.digest, b"altered")
    with pytest.raises(IntegrityError, match="was altered"):
        subject.store.get(ref.digest)
    assert subject.store.exists(ref.digest)  # present, but not what was stored
    # Storing the right bytes again does not repair them silently: put is a no-op.
    subject.store.put(b"original")
    with pytest.raises(IntegrityError):
        subject.reopen().get(ref.digest)


def test_erase_removes_the_bytes_once(subject: Subject) -> None:
    keep = subject.store.put(b"keep")
    ref = subject.store.put(b"gone")
    assert subject.store.erase(ref.pointer) is True
    assert subject.store.erase(ref.digest) is False
    assert not subject.store.exists(ref.digest)
    with pytest.raises(StorageError, match="erased or never stored"):
        subject.store.get(ref.digest)
    with pytest.raises(StorageError):
        subject.reopen().get(ref.digest)
    assert subject.store.get(keep.digest) == b"keep"
    assert subject.store.put(b"gone") == ref  # an erased blob can be stored again
    assert subject.store.get(ref.digest) == b"gone"


def test_threads_putting_and_erasing_the_same_blob_do_not_collide(subject: Subject) -> None:
    errors: list[BaseException] = []

    def churn(n: int) -> None:
        try:
            for i in range(50):
                subject.store.put(b"shared")
                subject.store.erase(sha256_digest(b"shared"))
                mine = subject.store.put(f"thread {n} blob {i}".encode())
                assert subject.store.get(mine.digest) == f"thread {n} blob {i}".encode()
        except BaseException as exc:  # noqa: BLE001 - collected and asserted on below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
