"""Views never mix two logs: a runner refuses views built from another history.

The views remember the position and chain hash of the last record they applied. A ledger
restored from an older backup (the views hold positions past its end), or views pointed
at another ledger (another origin, the same or greater length), was caught up silently:
the runner applied the other log's events from the stored positions on, and every report
mixed two histories. It is refused now, naming the problem; a full rebuild fixes it.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import pytest

from tracebound.errors import ViewsOfAnotherLog
from tracebound.events.catalog import CostIncurred, CostSource, MergeOutcome
from tracebound.events.envelope import Event
from tracebound.projections import ProjectionRunner, SQLiteViews
from tracebound.projections.reports import views_snapshot
from tracebound.store.sqlite import SQLiteStore

T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)


def _events(n: int, *, salt: int = 0, first: int = 0) -> list[Event]:
    """``n`` events from index ``first``: the same ids and times give the same records
    (and chain hashes) in any ledger; another ``salt`` gives another history."""
    out = []
    for i in range(first, first + n):
        payload = (
            CostIncurred(
                tier="direct", amount_usd=Decimal(f"0.{i + 1:02d}{salt}"), source=CostSource("x")
            )
            if i % 4
            else MergeOutcome(pr_url=f"https://x/{i}", decision="merged", reviewer=None)
        )
        out.append(
            Event.create(
                payload, event_id=UUID(int=i + 1 + salt * 1000), timestamp=T0, workflow_id="wf"
            )
        )
    return out


def _ledger(path: Path, events: list[Event]) -> SQLiteStore:
    store = SQLiteStore(path)
    for e in events:
        store.append("s", [e])
    return store


def _rebuilt(store: SQLiteStore, path: Path) -> dict[str, object]:
    runner = ProjectionRunner(store, SQLiteViews(path))
    runner.run()
    snap = views_snapshot(runner.views)
    runner.views.close()
    return snap


def test_a_ledger_rolled_back_behind_the_views_is_refused(tmp_path: Path) -> None:
    long = _ledger(tmp_path / "long", _events(10))
    runner = ProjectionRunner(long, SQLiteViews(tmp_path / "v.db"), batch_size=4)
    runner.run()
    runner.views.close()
    # The ledger restored from a backup taken at 6 events: the views hold 10.
    restored = _ledger(tmp_path / "restored", _events(6))
    views = SQLiteViews(tmp_path / "v.db")
    again = ProjectionRunner(restored, views)
    with pytest.raises(ViewsOfAnotherLog, match=r"position 10 .* the ledger ends at 6"):
        again.run()
    assert all("ends at 6" in (s.error or "") for s in again.status())
    # The writers go on: the ledger grows past the views, with other events at 7..10.
    for e in _events(6, salt=1, first=6):
        restored.append("s", [e])
    with pytest.raises(ViewsOfAnotherLog, match="position 10"):
        ProjectionRunner(restored, views).run()
    # Nothing was applied; a full rebuild builds them from this ledger alone.
    ProjectionRunner(restored, views).rebuild()
    assert views_snapshot(views) == _rebuilt(restored, tmp_path / "fresh.db")
    assert ProjectionRunner(restored, views).run().events == 0
    views.close()
    long.close()
    restored.close()


@pytest.mark.parametrize("extra", [0, 3])
def test_views_of_another_ledger_are_refused(tmp_path: Path, extra: int) -> None:
    one = _ledger(tmp_path / "one", _events(8))
    ProjectionRunner(one, SQLiteViews(tmp_path / "v.db")).run()
    other = _ledger(tmp_path / "other", _events(8 + extra, salt=2))
    views = SQLiteViews(tmp_path / "v.db")
    runner = ProjectionRunner(other, views)
    with pytest.raises(ViewsOfAnotherLog, match=r"position 8 .* another log"):
        runner.run()
    assert all("another log" in (s.error or "") for s in runner.status())
    with pytest.raises(ViewsOfAnotherLog):  # a partial rebuild leaves the others mixed
        runner.rebuild(["cost_ledger"])
    runner.rebuild()
    assert views_snapshot(views) == _rebuilt(other, tmp_path / "fresh.db")
    views.close()
    one.close()
    other.close()


def test_views_from_before_the_anchor_are_read_and_then_anchored(tmp_path: Path) -> None:
    # A views file written before the views remembered their log: no anchor table. It is
    # used as it is (positions past the end are still refused), and anchored at its next
    # commit.
    store = _ledger(tmp_path / "l", _events(5))
    ProjectionRunner(store, SQLiteViews(tmp_path / "v.db")).run()
    with sqlite3.connect(tmp_path / "v.db") as conn:
        conn.execute("DROP TABLE views_log")
    conn.close()
    views = SQLiteViews(tmp_path / "v.db")
    assert ProjectionRunner(store, views).run().events == 0
    for e in _events(2, first=5):
        store.append("s", [e])
    assert ProjectionRunner(store, views).run().events == 2
    assert views_snapshot(views) == _rebuilt(store, tmp_path / "fresh.db")
    other = _ledger(tmp_path / "o", _events(9, salt=3))
    with pytest.raises(ViewsOfAnotherLog):
        ProjectionRunner(other, views).run()
    views.close()
    store.close()
    other.close()
