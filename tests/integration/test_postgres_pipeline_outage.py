"""A pipeline run on a PostgreSQL ledger whose server restarts between two steps.

A platform's pipeline hosts write to one server; a routine failover or restart happens
while a step runs (an LLM call of minutes). The run holds one store, whose session is then
dead. The run's next append finds it dead before it has sent anything, so nothing of it
can have been committed: the store replaces the session and appends, once. A server that
stays down ends the run with the error, resumable by nothing but a new run, and visible as
such in ``tracebound runs``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.pipeline_kit import Kit, tpc
from tests.integration.test_postgres_connection_loss import terminate_sessions
from tests.pg import PgServer, server_stopped
from tracebound.events.catalog import RunFinished, StepRecorded
from tracebound.pipeline.runner import run_stream
from tracebound.pipeline.runtime import Pipeline, StepContext
from tracebound.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres


def three_steps(outage: Callable[[], None]) -> Pipeline:
    """Plan, execute, review; the server goes away while the executor works."""
    pipe = Pipeline("outage")

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        return tpc("Planner")

    @pipe.executor()
    def execute(ctx: StepContext) -> dict[str, object]:
        outage()  # the step's LLM call, during which the server restarts
        return tpc("Executor")

    @pipe.critic()
    def review(ctx: StepContext) -> dict[str, object]:
        return tpc("Critic")

    return pipe


def without_outage(root: Path) -> list[type]:
    """The kinds of event the same run records with no outage (a SQLite ledger)."""
    kit = Kit(root)
    with kit.ledger() as ledger:
        result = kit.runner(ledger).run(three_steps(lambda: None), {})
        return [type(e.payload) for e in ledger.store.read_stream(run_stream(result.run_id))]


@pytest.mark.parametrize("how", ["terminated", "restarted"])
def test_a_run_goes_on_after_its_session_died_between_two_steps(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str, how: str
) -> None:
    """Before: the executor's record found the dead session and the run raised
    ConnectionLost ("nothing was written, retrying is safe"), with nothing to retry it: the
    run ended failed (or, with the server still coming up, never ended). Now the store
    replaces the dead session before the append, and the run completes with each event
    once, its chain intact."""

    def outage() -> None:
        if how == "terminated":
            terminate_sessions(postgres_dsn)
        else:
            with server_stopped(postgres_server):
                pass

    kit = Kit(tmp_path)
    with kit.ledger(PostgresStore(postgres_dsn)) as ledger:
        result = kit.runner(ledger).run(three_steps(outage), {})
        assert (result.status, result.reason) == ("completed", None)
        kinds = [type(e.payload) for e in ledger.store.read_stream(run_stream(result.run_id))]
        assert kinds == without_outage(tmp_path / "control")  # each event once, none lost
        assert kinds.count(StepRecorded) == 3 and kinds[-1] is RunFinished
        assert ledger.store.size() == len(kinds)  # nothing else in the log
        ledger.checkpoint()
        report = ledger.verify()
        assert report.damage is None and report.ok, report
