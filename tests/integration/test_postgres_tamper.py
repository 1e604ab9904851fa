"""At-rest attacks on a PostgreSQL ledger: the tamper suite with SQL as the attacker's tool.

Here the attacker holds the database: any SQL as the owner of the ledger's schema, including
snapshots taken with ``CREATE TABLE AS`` and restored later. They do not hold the signing key
or the witness file, which live outside the database. ``Ledger`` sees the store only through
the port, so the checks are the same as on the other backends
(``tests/conformance/tamper_suite.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql

from tests.conformance.tamper_suite import LedgerWorld, SignedWorld, SqlAttacker, TamperSuite
from tracebound.integrity.keys import NoteSigner
from tracebound.store.postgres import PostgresStore
from tracebound.store.url import open_store

pytestmark = pytest.mark.postgres

SCHEMA = "evidence"
TABLES = ("events", "checkpoints", "meta", "log_head")


class PgAttacker(SqlAttacker):
    """SQL straight on the ledger's tables, as the owner of its schema."""

    param = "%s"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._snapshots = 0

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        conn = psycopg.connect(self.dsn)
        conn.execute(pgsql.SQL("SET search_path TO {}").format(pgsql.Identifier(SCHEMA)))
        return conn

    def sql(self, *statements: str, params: Sequence[Any] = ()) -> int:
        changed = 0
        with self._connect() as conn:
            for s in statements:
                changed = conn.execute(s.encode(), params or None).rowcount
        return changed

    def sql_many(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._connect() as conn, conn.cursor() as cur:
            cur.executemany(statement.encode(), rows)

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        with self._connect() as conn:
            return conn.execute(query.encode()).fetchall()

    def edit_body(self, position: int, old: str, new: str) -> None:
        query = (
            "UPDATE events SET body = convert_to(replace(convert_from(body, 'UTF8'), %s, %s), "
            "'UTF8') WHERE position = %s AND strpos(convert_from(body, 'UTF8'), %s) > 0"
        )
        assert self.sql(query, params=(old, new, position, old)) == 1

    def renumber_after(self, position: int) -> None:
        self.sql(  # through negative positions: the primary key is checked row by row
            f"UPDATE events SET position = -position WHERE position > {position}",
            "UPDATE events SET position = -position - 1 WHERE position < 0",
            "UPDATE log_head SET position = position - 1",
        )

    def snapshot(self) -> str:
        self._snapshots += 1
        prefix = f"public.snap{self._snapshots}_"
        self.sql(*(f"CREATE TABLE {prefix}{t} AS TABLE {t}" for t in TABLES))
        return prefix

    def restore(self, snapshot: str) -> None:
        self.sql(
            *(f"DELETE FROM {t}" for t in TABLES),
            *(f"INSERT INTO {t} SELECT * FROM {snapshot}{t}" for t in TABLES),
        )


class TestPostgresTamper(TamperSuite):
    @pytest.fixture
    def world(self, postgres_dsn: str, tmp_path: Path) -> SignedWorld:
        PostgresStore(postgres_dsn, schema=SCHEMA).close()
        return SignedWorld(
            partial(PostgresStore, postgres_dsn, schema=SCHEMA, create=False),
            tmp_path / "outside" / "witness.note",
            NoteSigner("tb-test", bytes(range(32))),
        )

    @pytest.fixture
    def attacker(self, postgres_dsn: str) -> PgAttacker:
        return PgAttacker(postgres_dsn)

    # -- particular to PostgreSQL --------------------------------------------------------

    def test_verify_workers_reopen_the_store_from_its_url(
        self, filled: Callable[[int], LedgerWorld]
    ) -> None:
        """Parallel verify's worker processes reopen the store with ``open_store(store.url)``."""
        world = filled(45)
        with world.open() as ledger:
            url = ledger.store.url
            assert url.startswith("postgresql://")
            with open_store(url) as again:  # type: ignore[attr-defined]
                assert again.size() == 45
