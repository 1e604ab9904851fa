"""The read path's record dicts: one shape on every backend, and typed errors only.

* The SQLite reader (its own narrow query) and the generic ``read_raw`` path (PostgreSQL,
  JSONL, any ``SQLiteStore`` subclass) give equal dicts for the same events, with exactly
  the documented keys (``tests/integration/test_record_shapes.py`` adds PostgreSQL).
* A stored body that is JSON but not the record of its position (``{}``, a list, another
  event's record, a renamed or an extra field) stops every projection at that position
  with an ``IntegrityError``, after the records before it were applied; it used to escape
  from the runner as a bare ``KeyError``.
* The SQLite reader opens its own connection, and still behaves as the store: a closed
  store raises ``StoreClosed``, and the store's busy timeout is the one it waits.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest
from tests.records_kit import check_shapes, fill, records_by_mode

from tracebound.errors import IntegrityError, StoreClosed
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.events.envelope import Event
from tracebound.ids import StreamId
from tracebound.projections import ProjectionRunner, SQLiteViews, default_projections
from tracebound.projections import records as records_module
from tracebound.projections.base import Column, EventRecord, Rows, Table
from tracebound.projections.records import read_records
from tracebound.store.jsonl import JsonlStore
from tracebound.store.port import AppendRequest, RawRecord
from tracebound.store.sqlite import SQLiteStore

T0 = datetime(2026, 5, 18, 12, tzinfo=UTC)


class GenericSQLiteStore(SQLiteStore):
    """The same file read through ``read_raw``: the path every other backend takes."""

    def read_raw(self, *, start: int = 1, stop: int | None = None) -> Iterator[RawRecord]:
        return super().read_raw(start=start, stop=stop)


STORES: dict[str, Callable[[Path], SQLiteStore]] = {
    "sqlite reader": lambda path: SQLiteStore(path, synchronous="NORMAL"),
    "generic reader": lambda path: GenericSQLiteStore(path, synchronous="NORMAL"),
}


# --- one shape everywhere ---------------------------------------------------------------------


def test_every_backend_gives_the_same_records(tmp_path: Path) -> None:
    lite = SQLiteStore(tmp_path / "lite")
    fill(lite)
    generic = GenericSQLiteStore(tmp_path / "lite")
    jsonl = JsonlStore(tmp_path / "jsonl")
    fill(jsonl)
    assert list(jsonl.read_raw()) == list(lite.read_raw())  # the same stored bytes
    expected = records_by_mode(lite)
    check_shapes(expected)
    assert records_by_mode(generic) == expected
    assert records_by_mode(jsonl) == expected
    for store in (lite, generic, jsonl):
        store.close()


# --- a body that is not a record --------------------------------------------------------------

BAD = 5


def _ledger(path: Path, make: Callable[[Path], SQLiteStore]) -> SQLiteStore:
    store = make(path)
    events = [
        Event.create(
            CostIncurred(tier="direct", amount_usd=Decimal("0.01"), source=CostSource("openai")),
            event_id=UUID(int=i + 1),
            timestamp=T0 + timedelta(milliseconds=i),
            workflow_id="wf",
        )
        for i in range(10)
    ]
    store.append_batch([AppendRequest(StreamId("wf"), events)])
    return store


def _body(store: SQLiteStore, position: int) -> dict[str, Any]:
    (raw,) = store.read_raw(start=position, stop=position)
    record: dict[str, Any] = orjson.loads(raw.body)
    return record


def _renamed(record: dict[str, Any]) -> dict[str, Any]:
    out = dict(record)
    out["workflow"] = out.pop("workflow_id")  # still eleven keys, one of them wrong
    return out


BAD_BODIES: dict[str, Callable[[SQLiteStore], object]] = {
    "empty object": lambda _store: {},
    "a list": lambda _store: [1, 2],
    "null": lambda _store: None,
    "another position's record": lambda store: _body(store, BAD + 1),
    "a field renamed": lambda store: _renamed(_body(store, BAD)),
    "an extra field": lambda store: {**_body(store, BAD), "extra": 1},
    "a field missing": lambda store: {
        k: v for k, v in _body(store, BAD).items() if k != "correlation_id"
    },
}


def _corrupt(store: SQLiteStore, body: object) -> None:
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE events SET body = ? WHERE position = ?", (orjson.dumps(body), BAD))
    conn.close()


SEEN = Table("seen_positions", (Column("position", "integer"),), key=("position",))


class Seen:
    """Keeps the position of every event it is given (every kind, payload read)."""

    name = "seen"
    version = 1
    tables = (SEEN,)
    kinds: frozenset[str] | None = None

    def apply(self, record: EventRecord, rows: Rows) -> None:
        rows.put(SEEN, (record["position"],), {"position": record["position"]})


@pytest.mark.parametrize("store_kind", list(STORES))
@pytest.mark.parametrize("bad_body", list(BAD_BODIES))
def test_a_body_that_is_not_a_record_stops_every_projection_there(
    tmp_path: Path, store_kind: str, bad_body: str
) -> None:
    store = _ledger(tmp_path / "ledger", STORES[store_kind])
    _corrupt(store, BAD_BODIES[bad_body](store))
    views = SQLiteViews(tmp_path / "v.db")
    runner = ProjectionRunner(store, views, [Seen(), *default_projections()])
    with pytest.raises(IntegrityError, match=f"stopped at position {BAD} .*position {BAD}"):
        runner.run()
    assert {(s.position, s.failed_position) for s in runner.status()} == {(BAD - 1, BAD)}
    assert [r["position"] for r in views.select(SEEN)] == list(range(1, BAD))
    with pytest.raises(IntegrityError):  # the next run stops there again, never skips it
        runner.run()
    views.close()
    store.close()


@pytest.mark.parametrize("store_kind", list(STORES))
def test_read_records_yields_the_good_records_then_raises(tmp_path: Path, store_kind: str) -> None:
    store = _ledger(tmp_path / "ledger", STORES[store_kind])
    _corrupt(store, {})
    got: list[int] = []
    with pytest.raises(IntegrityError, match=f"position {BAD}"):
        got.extend(r["position"] for r in read_records(store))
    assert got == list(range(1, BAD))
    # A kind nobody reads the payload of is not parsed, so not checked here (verify is).
    assert len(list(read_records(store, payload_kinds=frozenset()))) == 10
    store.close()


# --- the SQLite reader's own connection behaves as the store ----------------------------------


def test_a_closed_store_raises_store_closed(tmp_path: Path) -> None:
    store = _ledger(tmp_path / "ledger", STORES["sqlite reader"])
    store.close()
    with pytest.raises(StoreClosed):
        list(read_records(store))


def test_closing_the_store_stops_a_read_at_the_next_page(tmp_path: Path) -> None:
    store = _ledger(tmp_path / "ledger", STORES["sqlite reader"])
    more = [
        Event.create(
            CostIncurred(tier="direct", amount_usd=Decimal("0.01"), source=CostSource("openai")),
            event_id=UUID(int=100 + i),
            timestamp=T0,
            workflow_id="wf",
        )
        for i in range(records_module._PAGE)
    ]
    store.append_batch([AppendRequest(StreamId("wf"), more)])
    pages = records_module.read_record_pages(store)
    assert len(next(pages)) == records_module._PAGE
    store.close()
    with pytest.raises(StoreClosed):
        next(pages)


def test_the_reader_waits_the_stores_busy_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A WAL reader is hardly ever refused a lock, so the timeout is observed where it is set.
    timeouts: list[float] = []
    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        timeouts.append(kwargs["timeout"])
        connection: sqlite3.Connection = real_connect(*args, **kwargs)
        return connection

    store = SQLiteStore(tmp_path / "ledger", busy_timeout=0.25)
    # The records module's own `sqlite3` (not re-exported, so named by its dotted path).
    monkeypatch.setattr("tracebound.projections.records.sqlite3.connect", connect)
    assert list(read_records(store)) == []
    assert timeouts == [0.25]
    store.close()
