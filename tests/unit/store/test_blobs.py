"""The blob store: content-addressed, durable before put returns, checked on every read."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path

import pytest
from tests.file_limit_harness import run_limited

from tracebound.errors import IntegrityError, StorageError
from tracebound.store import blobs as blobs_module
from tracebound.store.blobs import FileBlobStore, sha256_digest
from tracebound.store.files import fsync_dir


def test_put_then_get_round_trips(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    ref = store.put(b"hello")
    assert ref.digest == sha256_digest(b"hello") and ref.size == 5
    assert ref.pointer == f"blob://{ref.digest}"
    assert store.get(ref.digest) == b"hello"
    assert store.get(ref.pointer) == b"hello"
    assert store.put(b"hello") == ref  # a second put is a no-op


def test_files_and_folders_are_private(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    ref = store.put(b"private")
    path = store._path(ref.digest)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for folder in (store.root, store.root / "sha256", path.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left


def test_new_folders_are_synced_in_their_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    real = fsync_dir  # the function blobs imported from tracebound.store.files

    def spy(folder: Path) -> None:
        synced.append(folder)
        real(folder)

    monkeypatch.setattr(blobs_module, "fsync_dir", spy)
    store = FileBlobStore(tmp_path / "blobs")
    ref = store.put(b"first")
    shard = store._path(ref.digest).parent
    shards = store.root / "sha256"
    # root's and sha256's names, the shard's name in sha256 (all 256 made at once), then
    # the blob's own name.
    assert synced == [tmp_path, store.root, shards, shard]
    assert sorted(p.name for p in shards.iterdir()) == [f"{i:02x}" for i in range(256)]
    synced.clear()
    other = next(bytes([i]) for i in range(256) if sha256_digest(bytes([i]))[7:9] != shard.name)
    store.put(other)
    other_shard = store._path(sha256_digest(other)).parent
    # First use of that shard by this object: its name is synced even though another
    # writer made it (it may not have synced it yet), then the blob's name.
    assert synced == [shards, other_shard]
    synced.clear()
    store.put(b"first")  # already there, shard already used: only the shard is synced
    assert synced == [shard]
    # A store whose shard folder went missing makes it again, and syncs its name.
    third = next(bytes([i, i]) for i in range(256))
    missing = store._path(sha256_digest(third)).parent
    missing.rmdir()
    synced.clear()
    FileBlobStore(store.root).put(third)
    assert synced == [tmp_path, store.root, shards, missing]


def test_a_blob_another_writer_put_is_synced_before_it_is_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FileBlobStore(tmp_path / "blobs").put(b"shared")  # the other writer
    synced: list[Path] = []
    real = fsync_dir  # the function blobs imported from tracebound.store.files

    def spy(folder: Path) -> None:
        synced.append(folder)
        real(folder)

    monkeypatch.setattr(blobs_module, "fsync_dir", spy)
    store = FileBlobStore(tmp_path / "blobs")
    ref = store.put(b"shared")
    shard = store._path(ref.digest).parent
    # Nothing is written, but every name on the way to the blob is made durable by us.
    assert synced == [tmp_path, store.root, store.root / "sha256", shard]


def test_a_short_write_is_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write

    def one_byte(fd: int, data: bytes | memoryview) -> int:
        return real_write(fd, bytes(data[:1]))

    monkeypatch.setattr(os, "write", one_byte)  # the os module blobs uses
    store = FileBlobStore(tmp_path / "blobs")
    ref = store.put(b"written one byte at a time")
    monkeypatch.undo()
    assert store.get(ref.digest) == b"written one byte at a time"


def test_a_folder_removed_behind_its_back_is_made_again(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    store.put(b"one")
    shutil.rmtree(store.root)
    ref = store.put(b"one")
    assert store.get(ref.digest) == b"one"


def test_a_root_that_cannot_be_made_is_a_storage_error(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "missing" / "blobs")  # parents are not made
    with pytest.raises(StorageError, match="could not store blob"):
        store.put(b"x")


def test_altered_bytes_are_refused_on_read(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    ref = store.put(b"original")
    store._path(ref.digest).write_bytes(b"altered")
    with pytest.raises(IntegrityError, match="was altered"):
        store.get(ref.digest)


def test_erased_blob_is_a_storage_error(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    ref = store.put(b"gone")
    assert store.erase(ref.digest) is True
    assert store.erase(ref.digest) is False
    with pytest.raises(StorageError, match="erased or never stored"):
        store.get(ref.digest)


def test_threads_putting_the_same_blob_do_not_collide(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    errors: list[BaseException] = []

    def put() -> None:
        try:
            for _ in range(50):
                store.put(b"shared")
                store.erase(sha256_digest(b"shared"))
        except BaseException as exc:  # noqa: BLE001 - collected and asserted on below
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_a_blob_the_disk_refuses_leaves_no_temporary_file(tmp_path: Path) -> None:
    # Its partial temporary file stayed in the shard: on a full disk, space nobody frees.
    FileBlobStore(tmp_path / "blobs").put(b"first")
    result = run_limited(
        f"""
        from tracebound.errors import StorageError
        from tracebound.store.blobs import FileBlobStore
        limit_files(1000)
        try:
            FileBlobStore({str(tmp_path / "blobs")!r}).put(bytes(5000))
        except StorageError as exc:
            report(error=str(exc))
        """
    )
    assert "File too large" in result["error"]
    assert [p.name for p in (tmp_path / "blobs").rglob("*") if p.is_file()] == [
        sha256_digest(b"first")[len("sha256:") + 2 :]
    ]
