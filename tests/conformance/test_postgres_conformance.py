"""The conformance suite, unchanged, on PostgreSQL: a real server, fsync on, a fresh database
per test."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pytest

from tests.conformance.suite import LedgerStoreSuite
from tracebound.store.port import LedgerStore
from tracebound.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres


class TestPostgresStore(LedgerStoreSuite):
    @pytest.fixture
    def store(self, postgres_dsn: str) -> Iterator[LedgerStore]:
        s = PostgresStore(postgres_dsn, schema="ledger")
        yield s
        s.close()

    @pytest.fixture
    def reopen(self, postgres_dsn: str) -> Callable[[], LedgerStore]:
        return functools.partial(PostgresStore, postgres_dsn, schema="ledger")
