"""The SQLite store's append transaction: its settings, its cursor, its error translation."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import pytest

from tracebound.errors import StorageError
from tracebound.events.catalog import CostIncurred
from tracebound.events.envelope import Event
from tracebound.store.sqlite import _WAL_AUTOCHECKPOINT, SQLiteStore


def _event(n: int) -> Event:
    return Event.create(
        CostIncurred(
            tier="direct",
            amount_usd=Decimal(n),
            source="s",
            tokens_in=n,
            tokens_out=1,
            model="m",
            role="Executor",
            step_id=f"step-{n}",
        ),
        event_id=UUID(int=n + 1),
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_connections_checkpoint_every_wal_autocheckpoint_pages(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        writer, _state = store._writer()
        for conn in (store._conn(), writer):
            (pages,) = conn.execute("PRAGMA wal_autocheckpoint").fetchone()
            # SQLite's default: a short WAL is overwritten in place sooner (sqlite.py)
            assert pages == _WAL_AUTOCHECKPOINT == 1000


def test_single_and_batched_appends_share_the_writer_cursor(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        one = store.append("a", [_event(1)])
        many = store.append("a", [_event(2), _event(3)], expected_version=1)
        assert [e.position for e in one + many] == [1, 2, 3]
        assert [e.stream_version for e in one + many] == [1, 2, 3]
        assert many[0].prev_hash == one[0].hash
        assert store.stream_head("a") == (3, many[-1].hash)


def test_sqlite_errors_in_the_append_transaction_are_storage_errors(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        store.append("a", [_event(1)])
        # Another connection makes the insert fail inside the transaction (a trigger that
        # aborts): the append must raise the package's StorageError, roll back, and the
        # store must keep working once the cause is gone.
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'no'); END"
        )
        with pytest.raises(StorageError, match="sqlite append failed") as caught:
            store.append("a", [_event(2)])
        assert isinstance(caught.value.__cause__, sqlite3.Error)
        other.execute("DROP TRIGGER refuse")
        other.close()
        (again,) = store.append("a", [_event(3)], expected_version=1)
        assert (again.position, again.stream_version) == (2, 2)
        assert store.size() == 2
