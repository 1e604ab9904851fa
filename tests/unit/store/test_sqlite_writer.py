"""The SQLite store's append transaction: its settings, its cursor, its error translation."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from uuid import UUID

import pytest

from tracebound.errors import ConcurrencyConflict, StorageError
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


def _statements(store: SQLiteStore) -> list[str]:
    """Record the statements the store's writer connection runs from here on."""
    seen: list[str] = []
    writer, _state = store._writer()
    writer.set_trace_callback(seen.append)
    return seen


def test_one_event_onto_a_known_head_is_a_single_autocommit_insert(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s") as store:
        store.append("a", [_event(1)])  # the transaction: learns the head of "a"
        seen = _statements(store)
        (second,) = store.append("a", [_event(2)], expected_version=1)
        assert [s.split()[0] for s in seen] == ["INSERT"]  # no BEGIN, PRAGMA or COMMIT
        assert (second.position, second.stream_version) == (2, 2)
        seen.clear()
        store.append("b", [_event(3)])  # a stream it has not seen: the transaction
        assert seen[0] == "BEGIN IMMEDIATE"
        seen.clear()
        store.append("a", [_event(4), _event(5)])  # two rows: the transaction
        assert seen[0] == "BEGIN IMMEDIATE"
        writer, _state = store._writer()
        assert not writer.in_transaction
    with SQLiteStore(tmp_path / "s") as reopened:  # durable: another connection sees it all
        assert [e.position for e in reopened.read_log()] == [1, 2, 3, 4, 5]
        assert reopened.stream_head("a") == (4, list(reopened.read_stream("a"))[-1].hash)


def test_a_stale_head_sends_the_single_append_through_the_transaction(tmp_path: Path) -> None:
    """Another connection appends between two appends of this one: the cached head is
    stale, the INSERT meets that connection's position, and the append chains onto the
    real head instead."""
    with SQLiteStore(tmp_path / "s") as mine, SQLiteStore(tmp_path / "s") as theirs:
        (first,) = mine.append("a", [_event(1)])
        (between,) = theirs.append("a", [_event(2)], expected_version=1)
        seen = _statements(mine)
        (after,) = mine.append("a", [_event(3)])  # the cache says version 1, position 1
        assert [s.split()[0] for s in seen[:2]] == ["INSERT", "BEGIN"]
        assert (after.position, after.stream_version) == (3, 3)
        assert after.prev_hash == between.hash != first.hash
        _writer, state = mine._writer()
        assert state.solo_off == state.SOLO_BACKOFF  # a few appends skip the attempt
        theirs.append("a", [_event(4)], expected_version=3)
        with pytest.raises(ConcurrencyConflict) as conflict:
            mine.append("a", [_event(5)], expected_version=3)
        assert (conflict.value.expected, conflict.value.actual) == (3, 4)
    with SQLiteStore(tmp_path / "s") as store:
        events = list(store.read_log())
        assert [(e.position, e.stream_version) for e in events] == [(1, 1), (2, 2), (3, 3), (4, 4)]
        assert all(b.prev_hash == a.hash for a, b in pairwise(events))


def test_a_conflict_against_the_cached_head_is_checked_in_the_transaction(
    tmp_path: Path,
) -> None:
    """The cache says version 1 but the stream is at 2: ``expected_version=2`` is right,
    and must not be refused on the cache's word."""
    with SQLiteStore(tmp_path / "s") as mine, SQLiteStore(tmp_path / "s") as theirs:
        mine.append("a", [_event(1)])
        theirs.append("a", [_event(2)])
        seen = _statements(mine)
        (ok,) = mine.append("a", [_event(3)], expected_version=2)
        assert ok.stream_version == 3
        assert seen[0] == "BEGIN IMMEDIATE"  # not even tried on the cache's word
