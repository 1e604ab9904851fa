"""The conformance suite on the embedded SQLite backend (a real file, WAL, fsync)."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from tests.conformance.suite import LedgerStoreSuite, note
from tracebound.store.port import LedgerStore
from tracebound.store.sqlite import SQLiteStore


class TestSQLiteStore(LedgerStoreSuite):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[LedgerStore]:
        s = SQLiteStore(tmp_path / "store")
        yield s
        s.close()

    @pytest.fixture
    def reopen(self, tmp_path: Path) -> Callable[[], LedgerStore]:
        return functools.partial(SQLiteStore, tmp_path / "store")

    @pytest.fixture
    def impatient(self, tmp_path: Path) -> Callable[[], LedgerStore]:
        return functools.partial(SQLiteStore, tmp_path / "store", busy_timeout=self.IMPATIENT)

    @pytest.fixture
    def hold_write_lock(self, tmp_path: Path) -> Callable[[], AbstractContextManager[None]]:
        @contextmanager
        def held() -> Iterator[None]:
            conn = sqlite3.connect(tmp_path / "store" / "ledger.db", isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")  # SQLite's one write lock, held
                yield
            finally:
                conn.close()  # rolls back: the lock is let go

        return held

    def test_a_writer_holding_the_lock_does_not_stop_a_reader_opening_the_store(
        self,
        store: LedgerStore,
        impatient: Callable[[], LedgerStore],
        hold_write_lock: Callable[[], AbstractContextManager[None]],
    ) -> None:
        """WAL lets readers read beside a writer, so `verify` or `log` must not wait for a
        writer that is stopped mid-transaction: opening a complete ledger writes nothing."""
        (first,) = store.append("s", [note(1)])
        with hold_write_lock():
            reader = impatient()
            try:
                assert reader.size() == 1
                assert [e.event_id for e in reader.read_log()] == [first.event_id]
            finally:
                reader.close()
