"""The views' bulk-load paths: narrow tables clustered by key, secondary indexes built once a
fresh projection has caught up (and restored if a bulk load stopped half-way), and row
encoding that gives the same stored values as the generic path."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.events.envelope import Event
from tracebound.projections import ProjectionRunner, SQLiteViews, default_projections
from tracebound.projections.base import Column, Table
from tracebound.store.sqlite import SQLiteStore

T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)


def _indexes(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        ).fetchall()
    return {r[0] for r in rows}


def _expected_indexes() -> set[str]:
    return {
        f"{t.name}_ix{i}"
        for p in default_projections()
        for t in p.tables
        for i in range(len(t.indexes))
    }


def _ledger(path: Path, n: int) -> SQLiteStore:
    store = SQLiteStore(path)
    for i in range(n):
        payload = CostIncurred(tier="direct", amount_usd=Decimal("0.25"), source=CostSource("llm"))
        wf = f"wf-{i % 5}"
        store.append(
            wf, [Event.create(payload, event_id=UUID(int=i + 1), timestamp=T0, workflow_id=wf)]
        )
    return store


def test_indexes_are_built_after_the_catch_up(tmp_path: Path) -> None:
    store = _ledger(tmp_path / "ledger", 12)
    views = SQLiteViews(tmp_path / "v.db")
    runner = ProjectionRunner(store, views, batch_size=5)
    runner.run(until_caught_up=False)
    assert _indexes(views.path) == set()  # a fresh projection loads without them
    runner.run()
    assert _indexes(views.path) == _expected_indexes()
    runner.rebuild()
    assert _indexes(views.path) == _expected_indexes()
    views.close()
    store.close()


def test_a_half_done_bulk_load_gets_its_indexes_on_the_next_run(tmp_path: Path) -> None:
    store = _ledger(tmp_path / "ledger", 12)
    views = SQLiteViews(tmp_path / "v.db")
    ProjectionRunner(store, views, batch_size=5).run(until_caught_up=False)
    views.close()  # "crash" before the catch-up ended
    assert _indexes(tmp_path / "v.db") == set()
    again = SQLiteViews(tmp_path / "v.db")
    ProjectionRunner(store, again, batch_size=5).run()
    assert _indexes(again.path) == _expected_indexes()
    again.close()
    store.close()


def test_narrow_tables_are_clustered_by_key(tmp_path: Path) -> None:
    views = SQLiteViews(tmp_path / "v.db")
    for p in default_projections():
        views.prepare(p)
    with sqlite3.connect(views.path) as conn:
        ddl = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    for p in default_projections():
        for t in p.tables:
            assert ("WITHOUT ROWID" in ddl[t.name]) == t.narrow, t.name
    assert not any(t.narrow for t in default_projections()[0].tables)  # the fold's state is wide
    views.close()


def test_row_encoding_matches_the_column_types(tmp_path: Path) -> None:
    table = Table(
        "enc",
        (
            Column("k"),
            Column("n", "integer", nullable=True),
            Column("d", "decimal", nullable=True),
            Column("j", "json", nullable=True),
        ),
        key=("k",),
        narrow=True,
    )
    one = Table("enc1", (Column("k"),), key=("k",))
    views = SQLiteViews(tmp_path / "v.db")
    views._create(table)  # a table outside any projection
    views._create(one)
    rows: list[dict[str, Any]] = [
        {"k": "a", "n": True, "d": Decimal("1E-7"), "j": {"b": 1, "a": [Decimal("2.50")]}},
        {"k": "b", "n": 3, "d": "0.10", "j": None},
        {"k": "c", "n": None, "d": None, "j": []},
    ]
    views.import_engine_history([])
    with views._lock:
        views._upsert(table, rows)
        views._upsert(one, [{"k": "x"}, {"k": "y"}])
    with sqlite3.connect(views.path) as conn:
        stored = conn.execute("SELECT k, n, d, j FROM enc ORDER BY k").fetchall()
        keys = conn.execute("SELECT k FROM enc1 ORDER BY k").fetchall()
    assert stored == [
        ("a", 1, "0.0000001", '{"a":["2.50"],"b":1}'),
        ("b", 3, "0.10", None),
        ("c", None, None, "[]"),
    ]
    assert keys == [("x",), ("y",)]
    views.close()
