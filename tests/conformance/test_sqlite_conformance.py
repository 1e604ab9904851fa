"""The conformance suite on the embedded SQLite backend (a real file, WAL, fsync)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conformance.suite import LedgerStoreSuite
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
