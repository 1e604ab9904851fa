"""SQLiteBlobStore's own promises: one file with the ledger, no fsync of its own, real erasure.

The shared contract (put, get, erase, integrity) is in ``test_blob_contract.py``; the crash
and power-loss arguments of ADR 0009 are tested in ``tests/integration/test_blob_durability.py``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tracebound.errors import ConfigError, StoreClosed, StoreNotFound
from tracebound.store.blobs import FileBlobStore, sha256_digest
from tracebound.store.sqlite import DB_FILENAME, SQLiteStore
from tracebound.store.sqlite_blobs import BLOB_TABLE, SQLiteBlobStore


def test_blobs_live_in_the_ledgers_own_file(tmp_path: Path) -> None:
    ledger = SQLiteStore(tmp_path / "store")
    with SQLiteBlobStore(tmp_path / "store") as by_dir:
        ref = by_dir.put(b"artifact")
        assert by_dir.path == ledger.path == tmp_path / "store" / DB_FILENAME
    with SQLiteBlobStore(ledger) as by_store, SQLiteBlobStore(ledger.path) as by_file:
        assert by_store.get(ref.digest) == by_file.get(ref.digest) == b"artifact"
    # Nothing beside the database: no blob folder, and the row is in the ledger's file.
    assert sorted(p.name for p in (tmp_path / "store").iterdir() if p.is_dir()) == []
    with sqlite3.connect(ledger.path) as conn:
        rows = conn.execute(f"SELECT digest, length(data) FROM {BLOB_TABLE}").fetchall()
    assert rows == [(ref.digest, 8)]
    ledger.close()


def test_its_connection_commits_without_fsync_and_checkpoints_like_the_ledger(
    tmp_path: Path,
) -> None:
    ledger = SQLiteStore(tmp_path / "store")
    with SQLiteBlobStore(ledger) as blobs:
        conn = blobs._conn
        assert conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL: no commit sync
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone() == (1000,)
        assert conn.execute("PRAGMA secure_delete").fetchone() == (1,)
    ledger_conn = ledger._conn()
    assert ledger_conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL, untouched
    ledger.close()


def test_it_needs_an_existing_ledger_in_wal_mode(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFound, match="tracebound init"):
        SQLiteBlobStore(tmp_path / "nowhere")
    assert not (tmp_path / "nowhere").exists()  # and it made nothing
    rollback = tmp_path / "rollback.db"
    with sqlite3.connect(rollback) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(ConfigError, match="not WAL"):
        SQLiteBlobStore(rollback)


def test_a_closed_store_refuses_work(tmp_path: Path) -> None:
    ledger = SQLiteStore(tmp_path / "store")
    blobs = SQLiteBlobStore(ledger)
    ref = blobs.put(b"x")
    blobs.close()
    blobs.close()  # twice is fine
    with pytest.raises(StoreClosed):
        blobs.get(ref.digest)
    with pytest.raises(StoreClosed):
        blobs.put(b"y")
    ledger.close()


def test_older_blob_files_are_still_read_and_erased(tmp_path: Path) -> None:
    ledger = SQLiteStore(tmp_path / "store")
    legacy = FileBlobStore(tmp_path / "store" / "blobs")
    old = legacy.put(b"stored by an older version")
    with SQLiteBlobStore(ledger, fallback=legacy) as blobs:
        assert blobs.exists(old.digest)
        assert blobs.get(old.pointer) == b"stored by an older version"
        new = blobs.put(b"stored now")
        assert not legacy.exists(new.digest)  # new blobs go to the table only
        both = blobs.put(b"stored by an older version")  # now in the table too
        assert blobs.erase(both.digest) is True
        assert not legacy.exists(old.digest) and not blobs.exists(old.digest)
        assert blobs.erase(old.digest) is False
    ledger.close()


def test_erase_leaves_the_bytes_in_neither_the_database_nor_the_wal(tmp_path: Path) -> None:
    ledger = SQLiteStore(tmp_path / "store")
    marker = b"ERASE-ME-" + bytes(range(48, 58)) * 40
    files = (ledger.path, ledger.path.with_name(ledger.path.name + "-wal"))
    with SQLiteBlobStore(ledger) as blobs:
        ref = blobs.put(marker)
        blobs.put(b"neighbour " * 100)
        assert any(marker in f.read_bytes() for f in files if f.exists())  # it was there
        assert blobs.erase(ref.digest)
        leftovers = [f.name for f in files if f.exists() and marker in f.read_bytes()]
        assert leftovers == []
        assert blobs.get(sha256_digest(b"neighbour " * 100)) == b"neighbour " * 100
    ledger.close()
