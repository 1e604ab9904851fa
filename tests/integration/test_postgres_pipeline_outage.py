"""A pipeline run on a PostgreSQL ledger whose server restarts between two steps.

A platform's pipeline hosts write to one server; a routine failover or restart happens
while a step runs (an LLM call of minutes). The run holds one store, whose session is then
dead. The run's next append finds it dead before it has sent anything, so nothing of it
can have been committed: the store replaces the session and appends, once. A server that
stays down ends the run with the error, resumable by nothing but a new run, and visible as
such in ``tracebound runs``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from tests.integration.pipeline_kit import Kit, tpc
from tests.integration.test_postgres_connection_loss import terminate_sessions
from tests.pg import PgServer, server_stopped
from tracebound.errors import ConnectionLost
from tracebound.events.catalog import RunFinished, RunStarted, StepRecorded
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


class Said(logging.Handler):
    """What the run said about the lost server; ``reconnecting`` is set once it waits."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.reconnecting = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if "reconnecting" in record.getMessage():
            self.reconnecting.set()


@contextmanager
def said() -> Iterator[Said]:
    handler = Said()
    logger = logging.getLogger("tracebound.store.reconnect")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def test_a_run_waits_for_a_server_still_down_when_a_step_ends(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str
) -> None:
    """The failover is not over when the step returns: the server refuses connections.
    Before: the step's record raised ConnectionLost at once, the run's end could not be
    recorded either, and the run stayed `running` in the ledger, its steps' work lost.
    Now the run says it lost the server, waits for it (as the followers do), and goes on
    once it is back: the same events as a run with no outage, each once."""
    down = ExitStack()
    kit = Kit(tmp_path)
    with said() as log, kit.ledger(PostgresStore(postgres_dsn)) as ledger:

        def restart_once_the_run_waits() -> None:
            log.reconnecting.wait(120)
            down.close()

        restarter = threading.Thread(target=restart_once_the_run_waits)
        restarter.start()
        try:
            pipe = three_steps(lambda: down.enter_context(server_stopped(postgres_server)))
            result = kit.runner(ledger).run(pipe, {})
        finally:
            log.reconnecting.set()
            restarter.join()
            down.close()
        assert (result.status, result.reason) == ("completed", None)
        kinds = [type(e.payload) for e in ledger.store.read_stream(run_stream(result.run_id))]
        assert kinds == without_outage(tmp_path / "control")
        assert ledger.store.size() == len(kinds)
        ledger.checkpoint()
        assert ledger.verify().ok
    lost, back = log.lines
    assert "postgresql append failed" in lost and "reconnecting" in lost, lost
    assert back.startswith("reconnected after") and result.run_id in back, back


def test_a_run_whose_server_stays_down_ends_with_the_error(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str
) -> None:
    """Past give_up_after the run ends with ConnectionLost saying it gave up, noted that
    the run's end could not be recorded either, and without waiting a second time for it.
    Nothing was half written: the ledger holds the run up to its last recorded step."""
    down = ExitStack()
    kit = Kit(tmp_path)
    with down, said() as log, kit.ledger(PostgresStore(postgres_dsn)) as ledger:
        runner = kit.runner(ledger)
        runner.give_up_after = 0.2
        pipe = three_steps(lambda: down.enter_context(server_stopped(postgres_server)))
        with pytest.raises(ConnectionLost) as info:
            runner.run(pipe, {})
    assert "gave up after" in str(info.value), info.value
    assert info.value.__notes__ == ["the run's end could not be recorded: ConnectionLost"]
    assert len([line for line in log.lines if "reconnecting" in line]) == 1  # one wait
    with kit.ledger(PostgresStore(postgres_dsn)) as ledger:
        kinds = [type(e.payload) for e in ledger.store.read_log()]
    assert kinds == [RunStarted, StepRecorded]  # the planner's; the executor's never sent
