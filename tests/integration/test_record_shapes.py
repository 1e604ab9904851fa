"""The records a projection receives are the same from SQLite, JSONL and PostgreSQL.

The SQLite ledger is read by the projections' own narrow query, the other two through
``read_raw``; the same events must give equal record dicts, with exactly the documented keys
(docs/projections.md, "What a projection receives"), in every mode a runner reads in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.records_kit import check_shapes, fill, records_by_mode
from tracebound.store.jsonl import JsonlStore
from tracebound.store.postgres import PostgresStore
from tracebound.store.sqlite import SQLiteStore

pytestmark = pytest.mark.postgres


def test_sqlite_jsonl_and_postgres_give_the_same_records(postgres_dsn: str, tmp_path: Path) -> None:
    with (
        SQLiteStore(tmp_path / "lite") as lite,
        JsonlStore(tmp_path / "jsonl") as jsonl,
        PostgresStore(postgres_dsn) as pg,
    ):
        for store in (lite, jsonl, pg):
            fill(store)
        assert list(pg.read_raw()) == list(lite.read_raw())  # the same stored bytes
        expected = records_by_mode(lite)
        check_shapes(expected)
        assert records_by_mode(jsonl) == expected
        assert records_by_mode(pg) == expected
