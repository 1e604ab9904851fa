"""A PostgreSQL session that dies under tracebound: a failover, a restart, a network blip,
``pg_terminate_backend``. Each is simulated by terminating the session's backend, which
needs no restart. The promise: a typed error, never a half-written batch, and the same
object works again on a new session (a long-running service must not stay broken).
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.integration.test_postgres_views import _ledger
from tests.pg import PgServer
from tracebound.projections import ProjectionRunner
from tracebound.projections.cost import CostLedgerProjection
from tracebound.projections.postgres_views import PostgresViews

pytestmark = pytest.mark.postgres


def terminate(dsn: str, pid: int) -> None:
    """End one backend the way a DBA or a failover does: its client finds out on next use."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        (done,) = admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() or (False,)
    assert done, f"no backend {pid} to terminate"


def test_views_work_again_after_their_session_is_terminated(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str
) -> None:
    """`project run --follow` keeps one PostgresViews for hours: a session ended under it
    (between two polls, or under a commit) is replaced, and nothing is applied twice."""
    store = _ledger(tmp_path / "ledger", ["successful"])
    tables = CostLedgerProjection().tables
    dbname = postgres_dsn.rsplit("dbname=", 1)[1]
    with PostgresViews(postgres_server.url(dbname, schema="views")) as views:
        runner = ProjectionRunner(store, views, [CostLedgerProjection()], batch_size=2)
        runner.run(until_caught_up=False)  # positions 1-2
        terminate(postgres_dsn, views._conn.info.backend_pid)
        assert views.positions()[0].position == 2  # a read: retried on a new session
        terminate(postgres_dsn, views._conn.info.backend_pid)
        runner.run(until_caught_up=False)  # its commit meets the dead session first
        assert views.position_record("cost_ledger").position == 4  # type: ignore[union-attr]
        terminate(postgres_dsn, views._conn.info.backend_pid)
        runner.run()
        with PostgresViews(postgres_server.url(dbname, schema="alone")) as alone:
            ProjectionRunner(store, alone, [CostLedgerProjection()]).run()
            assert views.snapshot(tables) == alone.snapshot(tables)  # nothing applied twice
    store.close()
