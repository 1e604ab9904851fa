"""The conformance suite, unchanged, on PostgreSQL: a real server, fsync on, a fresh database
per test."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import psycopg
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

    @pytest.fixture
    def impatient(self, postgres_dsn: str) -> Callable[[], LedgerStore]:
        return functools.partial(
            PostgresStore, postgres_dsn, schema="ledger", lock_timeout=self.IMPATIENT
        )

    @pytest.fixture
    def hold_write_lock(self, postgres_dsn: str) -> Callable[[], AbstractContextManager[None]]:
        @contextmanager
        def held() -> Iterator[None]:
            with psycopg.connect(postgres_dsn) as conn:  # its own session: its own backend
                conn.execute('SELECT position FROM "ledger"."log_head" FOR UPDATE')
                yield
                conn.rollback()

        return held
