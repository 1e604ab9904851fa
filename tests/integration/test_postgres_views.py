"""Projections materialised in PostgreSQL: the same code, the same rows as the SQLite views.

The golden histories (``tests/golden/``) are replayed into a real ledger and projected into
both sinks; every view table must come out equal, row for row, and equal to the golden
expected state. Then the PostgreSQL sink's own promises: running twice changes nothing,
a rebuild or another batch size gives the same rows, a failing projection stops before the
failing event (its rows and position committed together), and a second runner cannot
commit over the first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from tests.pg import login_role
from tracebound.canonical import canonical_bytes
from tracebound.errors import ConcurrencyConflict, ContractError, StoreBusy
from tracebound.events.envelope import Event, RecordedEvent
from tracebound.projections import ProjectionRunner, SQLiteViews, default_projections
from tracebound.projections.base import EventRecord, Rows
from tracebound.projections.cost import CostLedgerProjection
from tracebound.projections.postgres_views import PostgresViews
from tracebound.projections.reports import all_tables, views_snapshot
from tracebound.store.sqlite import SQLiteStore

pytestmark = pytest.mark.postgres

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
NAMES = ["successful", "retried", "refused", "gated"]


def _history(name: str) -> list[RecordedEvent]:
    lines = (GOLDEN / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [RecordedEvent.model_validate_json(line) for line in lines]


def _ledger(path: Path, names: list[str]) -> SQLiteStore:
    """The golden runs appended again, one after another (hashes checked per run's own file
    by tests/golden; here they only need to be a real log)."""
    store = SQLiteStore(path)
    for name in names:
        for e in _history(name):
            store.append(
                e.stream_id,
                [
                    Event.create(
                        e.payload,
                        event_id=e.event_id,
                        timestamp=e.timestamp,
                        workflow_id=e.workflow_id,
                        correlation_id=e.correlation_id,
                    )
                ],
            )
    return store


@pytest.fixture
def views_url(postgres_dsn: str, postgres_server: Any) -> Callable[[str], str]:
    dbname = postgres_dsn.rsplit("dbname=", 1)[1]

    def url(schema: str) -> str:
        return str(postgres_server.url(dbname, schema=schema))

    return url


@pytest.mark.parametrize("name", NAMES)
def test_golden_runs_give_the_same_rows_as_sqlite(
    name: str, tmp_path: Path, views_url: Any
) -> None:
    store = SQLiteStore(tmp_path / "ledger")
    for e in _history(name):  # the golden run alone, so its expected file applies
        (again,) = store.append(
            e.stream_id,
            [
                Event.create(
                    e.payload,
                    event_id=e.event_id,
                    timestamp=e.timestamp,
                    workflow_id=e.workflow_id,
                    correlation_id=e.correlation_id,
                )
            ],
        )
        assert again.hash == e.hash
    lite = SQLiteViews(tmp_path / "views.db")
    pg = PostgresViews(views_url(f"golden_{name}"))
    try:
        assert ProjectionRunner(store, lite).run().events == store.size()
        assert ProjectionRunner(store, pg).run().events == store.size()
        tables = all_tables()
        assert pg.snapshot(tables) == lite.snapshot(tables)  # Decimals, JSON data, order
        pg_state = views_snapshot(pg)  # type: ignore[arg-type]
        assert pg_state == views_snapshot(lite)
        expected = orjson.loads((GOLDEN / f"{name}.expected.json").read_bytes())["views"]
        assert canonical_bytes(pg_state) == canonical_bytes(expected)
        assert any(pg_state[t] for t in pg_state)  # the comparison was not of empty views
    finally:
        pg.close()
        lite.close()
        store.close()


def test_running_twice_rebuilding_and_batch_size_change_nothing(
    tmp_path: Path, views_url: Any
) -> None:
    store = _ledger(tmp_path / "ledger", NAMES)
    pg = PostgresViews(views_url("views"))
    try:
        runner = ProjectionRunner(store, pg)
        first = runner.run()
        assert first.events == store.size() > 0
        state = pg.snapshot(all_tables())
        assert runner.run().events == 0
        assert ProjectionRunner(store, pg).run().events == 0  # a fresh runner, same positions
        assert pg.snapshot(all_tables()) == state
        assert {r.position for r in pg.positions()} == {store.size()}
        runner.rebuild()
        assert pg.snapshot(all_tables()) == state
        small = PostgresViews(views_url("views_batch3"))
        try:
            ProjectionRunner(store, small, batch_size=3).run()
            assert small.snapshot(all_tables()) == state
        finally:
            small.close()
    finally:
        pg.close()
        store.close()


class _Breaks(CostLedgerProjection):
    """The cost ledger, failing on one position: as a buggy projection would."""

    def __init__(self, at: int) -> None:
        self.at = at

    def apply(self, record: EventRecord, rows: Rows) -> None:
        if record["position"] == self.at:
            raise ValueError(f"cannot fold position {self.at}")
        super().apply(record, rows)


def test_a_failing_projection_stops_at_its_position(tmp_path: Path, views_url: Any) -> None:
    store = _ledger(tmp_path / "ledger", NAMES)
    costs = [r.position for r in store.read_log() if r.event_type == "cost_incurred"]
    bad = costs[len(costs) // 2]
    url = views_url("failing")
    projections = [p for p in default_projections() if p.name != "cost_ledger"]
    pg = PostgresViews(url)
    try:
        runner = ProjectionRunner(store, pg, [*projections, _Breaks(bad)], batch_size=7)
        with pytest.raises(ContractError, match=f"stopped at position {bad}"):
            runner.run()
        status = {s.name: s for s in runner.status()}
        assert (status["cost_ledger"].position, status["cost_ledger"].failed_position) == (
            bad - 1,
            bad,
        )
        assert "cannot fold position" in (status["cost_ledger"].error or "")
        assert all(s.position == store.size() for n, s in status.items() if n != "cost_ledger")
        # Its rows are exactly those of the events before the failing one.
        with PostgresViews(views_url("reference")) as ref:
            ProjectionRunner(store, ref, [CostLedgerProjection()]).run()
            partial = SQLiteViews(tmp_path / "partial.db")
            before = _Prefix(store, bad - 1)
            ProjectionRunner(before, partial, [CostLedgerProjection()]).run()
            tables = CostLedgerProjection().tables
            assert pg.snapshot(tables) == partial.snapshot(tables) != ref.snapshot(tables)
            partial.close()
        # Run again: it fails again at the same event; the event is never skipped.
        with pytest.raises(ContractError, match=f"stopped at position {bad}"):
            ProjectionRunner(store, pg, [*projections, _Breaks(bad)]).run()
        assert pg.position_record("cost_ledger").position == bad - 1  # type: ignore[union-attr]
        # Fixed: it resumes from the stored position and catches up.
        fixed = ProjectionRunner(store, pg, [*projections, _Breaks(-1)])
        assert fixed.run().events == store.size() - (bad - 1)
        with PostgresViews(views_url("reference")) as ref:
            tables = CostLedgerProjection().tables
            assert pg.snapshot(tables) == ref.snapshot(tables)
    finally:
        pg.close()
        store.close()


class _Prefix:
    """A LogStore showing only positions 1..n of another (what the views saw before)."""

    def __init__(self, store: SQLiteStore, n: int) -> None:
        self._store, self._n = store, n

    def size(self) -> int:
        return self._n

    def read_raw(self, *, start: int = 1, stop: int | None = None) -> Any:
        return self._store.read_raw(start=start, stop=min(stop or self._n, self._n))

    def read_log(self, *, start: int = 1, stop: int | None = None) -> Any:
        return self._store.read_log(start=start, stop=min(stop or self._n, self._n))


def test_a_second_runner_cannot_commit_over_the_first(tmp_path: Path, views_url: Any) -> None:
    store = _ledger(tmp_path / "ledger", ["successful"])
    url = views_url("contended")
    tables = CostLedgerProjection().tables
    with PostgresViews(url) as a, PostgresViews(url) as b:
        first = ProjectionRunner(store, a, [CostLedgerProjection()], batch_size=2)
        second = ProjectionRunner(store, b, [CostLedgerProjection()], batch_size=2)
        first.run(until_caught_up=False)  # position 0 -> 2
        second.run(until_caught_up=False)  # starts from the stored 2, commits 2 -> 4
        with pytest.raises(ConcurrencyConflict):
            first.run(until_caught_up=False)  # still believes 2: refused, nothing written
        assert a.position_record("cost_ledger").position == 4  # type: ignore[union-attr]
        ProjectionRunner(store, a, [CostLedgerProjection()]).run()
        with PostgresViews(views_url("alone")) as alone:
            ProjectionRunner(store, alone, [CostLedgerProjection()]).run()
            assert a.snapshot(tables) == alone.snapshot(tables)  # nothing applied twice


def test_views_locked_by_another_session_are_store_busy(
    tmp_path: Path, views_url: Any, postgres_dsn: str
) -> None:
    """Another session holding a position row past the views session's ``lock_timeout``:
    StoreBusy (not a plain StorageError), nothing marked failed, the next run goes on."""
    store = _ledger(tmp_path / "ledger", ["successful"])
    url = views_url("locked_views") + "&options=-c%20lock_timeout%3D200"
    with PostgresViews(url) as views:
        runner = ProjectionRunner(store, views, [CostLedgerProjection()], batch_size=2)
        runner.run(until_caught_up=False)  # position 0 -> 2
        with psycopg.connect(postgres_dsn) as holder:  # its own session: its own backend
            holder.execute('SELECT position FROM "locked_views".projection_positions FOR UPDATE')
            with pytest.raises(StoreBusy) as info:
                runner.run(until_caught_up=False)
            holder.rollback()
        assert "locked_views" in info.value.store
        assert "lock timeout" in str(info.value)
        assert info.value.waited == 0.2  # the URL's, which the views keep
        runner.run()
        (status,) = runner.status()
        assert (status.lag, status.failed_position) == (0, None)


def test_views_nobody_set_a_lock_timeout_for_wait_60_s(views_url: Any) -> None:
    """As the ledger's sessions: PostgreSQL's own default (none) would wait for ever behind
    a session hung holding a position row; the SQLite views and ledgers wait 60 s."""
    with PostgresViews(views_url("default_wait")) as views:
        row = views._conn.execute("SHOW lock_timeout").fetchone()
        assert (row, views.lock_timeout) == (("1min",), 60.0)


def test_cli_project_commands_take_a_postgresql_views_url(
    tmp_path: Path, views_url: Any, postgres_dsn: str
) -> None:
    store = _ledger(tmp_path / "ledger", NAMES)
    size = store.size()
    store.close()
    url = views_url("cli_views")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env.update(HOME=str(tmp_path / "home"), TRACEBOUND_STORE=f"sqlite:///{tmp_path / 'ledger'}")

    def cli(*args: str) -> Any:
        proc = subprocess.run(
            [sys.executable, "-m", "tracebound", *args, "--views", url, "--json"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    assert cli("project", "run")["applied"] == size
    assert cli("project", "run")["applied"] == 0
    statuses = cli("project", "status")["projections"]
    assert {s["lag"] for s in statuses} == {0} and len(statuses) == len(default_projections())
    assert cli("project", "rebuild", "--only", "roi")["head"] == size
    assert "ok" in cli("report", "roi")  # the reports read the same views
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        (count,) = conn.execute("SELECT count(*) FROM cli_views.cost_ledger").fetchone()  # type: ignore[misc]
    assert count > 0


def test_the_ledgers_own_schema_is_refused(views_url: Any, postgres_dsn: str) -> None:
    from tracebound.errors import ConfigError
    from tracebound.store.postgres import PostgresStore

    PostgresStore(postgres_dsn, schema="ledger").close()
    with pytest.raises(ConfigError, match="holds a ledger"):
        PostgresViews(views_url("ledger"))


def test_a_read_only_role_reads_the_views_and_creates_nothing(
    tmp_path: Path, views_url: Any, postgres_dsn: str, postgres_server: Any
) -> None:
    """An auditor with SELECT on the views (no CREATE anywhere) ran `project status` or
    `report … --no-update`: "permission denied for database", because opening the views
    ran CREATE SCHEMA/TABLE IF NOT EXISTS even for a read-only command."""
    store = _ledger(tmp_path / "ledger", NAMES)
    size = store.size()
    store.close()
    ProjectionRunner(SQLiteStore(tmp_path / "ledger"), PostgresViews(views_url("v"))).run()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE v.engine_history")  # from before it existed: not recreated
    grants = [
        "GRANT USAGE ON SCHEMA v TO tb_views_reader",
        "GRANT SELECT ON ALL TABLES IN SCHEMA v TO tb_views_reader",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env.update(HOME=str(tmp_path / "home"), TRACEBOUND_STORE=f"sqlite:///{tmp_path / 'ledger'}")
    with login_role(postgres_server, postgres_dsn, "tb_views_reader", grants) as url:

        def cli(*args: str, code: int = 0) -> Any:
            proc = subprocess.run(
                [sys.executable, "-m", "tracebound", *args, "--views", f"{url}?schema=v",
                 "--json"],
                env=env, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert proc.returncode == code, proc.stdout + proc.stderr
            return json.loads(proc.stdout)

        # Updating them is refused, and the message says how to read them instead.
        refused = cli("report", "cost", code=2)["error"]["message"]
        assert "permission denied" in refused and "--no-update" in refused
        statuses = cli("project", "status")["projections"]
        assert {s["position"] for s in statuses} == {size}
        assert cli("report", "cost", "--no-update")["ok"]
        assert cli("report", "trail", "wf-successful", "--no-update")["ok"]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass('v.engine_history')").fetchone()
    assert found == (None,)


def test_a_role_that_may_not_read_the_views_is_told_what_to_grant(
    tmp_path: Path, views_url: Any, postgres_dsn: str, postgres_server: Any
) -> None:
    """An auditor not yet granted the views ran `report … --no-update` and was told "this
    role may not update the views … a read-only role reads them with `report --no-update`",
    which is what it had run. Now it is told what reading them needs."""
    store = _ledger(tmp_path / "ledger", ["successful"])
    ProjectionRunner(store, PostgresViews(views_url("v"))).run()
    store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env.update(HOME=str(tmp_path / "home"), TRACEBOUND_STORE=f"sqlite:///{tmp_path / 'ledger'}")
    with login_role(postgres_server, postgres_dsn, "tb_not_granted", []) as url:
        for command in (["report", "cost", "--no-update"], ["project", "status"]):
            proc = subprocess.run(
                [sys.executable, "-m", "tracebound", *command, "--views", f"{url}?schema=v",
                 "--json"],
                env=env, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert proc.returncode == 2, proc.stdout + proc.stderr
            said = json.loads(proc.stdout)["error"]["message"]
            assert "permission denied for schema v" in said, said
            assert "may not update" not in said and "USAGE on schema" in said, said
