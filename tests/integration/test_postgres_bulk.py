"""PostgreSQL bulk appends: rows chained and streamed by COPY piece by piece, the same bytes
as SQLite, nothing written when a check fails, and the NOTIFY sent with the lock."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.conformance.suite import note
from tracebound.errors import ConcurrencyConflict
from tracebound.events.envelope import Event, RecordedEvent
from tracebound.ids import StreamId
from tracebound.store import postgres
from tracebound.store.port import NO_STREAM, AppendRequest
from tracebound.store.postgres import PostgresStore
from tracebound.store.sqlite import SQLiteStore

pytestmark = pytest.mark.postgres


def _notes(first: int, count: int) -> list[Event]:
    return [note(n, "x" * (n % 97)) for n in range(first, first + count)]


def _request(stream: str, first: int, count: int, expected: int | None = None) -> AppendRequest:
    return AppendRequest(StreamId(stream), _notes(first, count), expected)


def _listener(dsn: str, store: PostgresStore) -> psycopg.Connection[tuple[object, ...]]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(store.channel)))
    return conn


def _payloads(conn: psycopg.Connection[tuple[object, ...]], count: int = 0) -> list[str]:
    """The next ``count`` notifications (what came within 0.3 s when ``count`` is 0)."""
    if not count:
        return [n.payload for n in conn.notifies(timeout=0.3)]
    return [n.payload for n in conn.notifies(timeout=30, stop_after=count)]


def _comparable(outcome: list[RecordedEvent] | ConcurrencyConflict) -> object:
    if isinstance(outcome, ConcurrencyConflict):
        return (outcome.stream_id, outcome.expected, outcome.actual)
    return outcome


def test_pieces_cross_requests_and_streams_with_the_bytes_of_sqlite(
    postgres_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pieces of 7 events cut through requests and streams, and a stream comes back within
    the batch: every record, hash and returned event equals SQLite's, in one big batch and
    in a group of several (the group-commit seam)."""
    monkeypatch.setattr(postgres, "_PIECE", 7)
    batch = [
        _request("a", 0, 2, NO_STREAM),
        _request("b", 2, 600),
        _request("a", 602, 450, 2),
        _request("c", 1052, 0),
        _request("b", 1052, 9, 600),
    ]
    group = [
        [_request("c", 2000, 500, NO_STREAM)],
        [_request("a", 2500, 3, 999)],  # conflicts: takes no positions
        [_request("a", 2503, 520, 452), _request("c", 3023, 1, 500)],
    ]
    with PostgresStore(postgres_dsn) as pg, SQLiteStore(tmp_path / "s") as lite:
        assert pg.append_batch(batch) == lite.append_batch(batch)
        outcomes = pg._append_prepared([pg._prepare_batch(b)[0] for b in group])
        expected = lite._append_prepared([lite._prepare_batch(b)[0] for b in group])
        assert list(map(_comparable, outcomes)) == list(map(_comparable, expected))
        assert isinstance(outcomes[1], ConcurrencyConflict)
        assert [len(o) for o in outcomes if isinstance(o, list)] == [500, 521]
        assert list(pg.read_raw()) == list(lite.read_raw())
        assert pg.size() == 1061 + 1021


@pytest.mark.parametrize("where", ["first", "last"])
def test_a_conflict_in_a_bulk_batch_writes_nothing_and_sends_no_notification(
    postgres_dsn: str, where: str
) -> None:
    with PostgresStore(postgres_dsn) as store:
        store.append("a", _notes(0, 3))
        listener = _listener(postgres_dsn, store)
        bad = _request("a", 10, 5, expected=7)
        good = _request("b", 20, 1500)
        with pytest.raises(ConcurrencyConflict) as info:
            store.append_batch([bad, good] if where == "first" else [good, bad])
        assert (info.value.stream_id, info.value.expected, info.value.actual) == ("a", 7, 3)
        assert store.size() == 3
        assert store.stream_head("b") is None
        assert _payloads(listener) == []
        # The rollback took the positions back: the next append continues the log.
        events = store.append_batch([good])
        assert [e.position for e in events] == list(range(4, 1504))
        assert _payloads(listener, 1) == ["1503"]
        listener.close()


def test_a_bulk_append_notifies_its_last_position_once(postgres_dsn: str) -> None:
    with PostgresStore(postgres_dsn) as store:
        listener = _listener(postgres_dsn, store)
        store.append("a", _notes(0, 2000))
        store.append("a", _notes(2000, 1))
        committer_batches = [[_request("b", 3000, 1200)], [_request("c", 5000, 1)]]
        store._append_prepared([store._prepare_batch(b)[0] for b in committer_batches])
        assert _payloads(listener, 3) == ["2000", "2001", "3202"]
        assert _payloads(listener) == []
        listener.close()
    with PostgresStore(postgres_dsn, notify=False) as quiet:
        listener = _listener(postgres_dsn, quiet)
        quiet.append("a", _notes(6000, 1500))
        quiet._append_prepared([quiet._prepare_batch([_request("d", 8000, 1100)])[0]])
        assert _payloads(listener) == []
        assert quiet.size() == 3202 + 2600
        listener.close()


def test_a_bulk_append_in_a_tracking_block_rolls_back_with_it(postgres_dsn: str) -> None:
    with PostgresStore(postgres_dsn) as store:
        listener = _listener(postgres_dsn, store)

        def fail_after_a_bulk_append() -> None:
            with store.tracking("p") as tx:
                events = store.append("a", _notes(0, 1200))
                assert [e.position for e in events] == list(range(1, 1201))
                tx.advance(1)
                raise RuntimeError("the projection failed")

        with pytest.raises(RuntimeError):
            fail_after_a_bulk_append()
        assert store.size() == 0
        assert store.tracked_position("p") == 0
        assert _payloads(listener) == []
        with store.tracking("p") as tx:
            assert store.append("a", _notes(0, 1200))[-1].position == 1200
            tx.advance(1)
        assert store.size() == 1200
        assert store.tracked_position("p") == 1
        assert _payloads(listener, 1) == ["1200"]
        listener.close()


def _index_names(dsn: str, schema: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", (schema,))
        return {str(r[0]) for r in rows}


def test_new_ledgers_have_no_workflow_index_and_old_ones_keep_working(postgres_dsn: str) -> None:
    """Nothing reads events by workflow; a ledger created with the old index still appends."""
    PostgresStore(postgres_dsn, schema="new").close()
    names = _index_names(postgres_dsn, "new")
    assert "events_by_workflow" not in names
    assert any(name.startswith("events_pkey") for name in names)
    PostgresStore(postgres_dsn, schema="old").close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE INDEX events_by_workflow ON old.events (workflow_id, position)")
    with PostgresStore(postgres_dsn, schema="old", create=False) as store:
        small: Sequence[RecordedEvent] = store.append("a", _notes(0, 5))
        store.append("a", _notes(5, 1500))
        assert [e.position for e in small] == [1, 2, 3, 4, 5]
        assert store.size() == 1505
    assert "events_by_workflow" in _index_names(postgres_dsn, "old")
