"""A PostgreSQL session that dies under tracebound: a failover, a restart, a network blip,
``pg_terminate_backend``. Each is simulated by terminating the session's backend, which
needs no restart. The promise: a typed error, never a half-written batch, and the same
object works again on a new session (a long-running service must not stay broken).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conformance.suite import note
from tests.integration.test_postgres_views import _ledger
from tests.pg import PgServer, server_stopped, wait_for_lock_wait
from tracebound.errors import (
    CommitOutcomeUnknown,
    ConcurrencyConflict,
    ConnectionLost,
    StorageError,
)
from tracebound.ids import StreamId
from tracebound.projections import ProjectionRunner
from tracebound.projections.cost import CostLedgerProjection
from tracebound.projections.postgres_views import PostgresViews
from tracebound.projections.sqlite_views import SQLiteViews
from tracebound.store.group_commit import GroupCommitter
from tracebound.store.port import AppendRequest
from tracebound.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres


def terminate(dsn: str, pid: int) -> None:
    """End one backend the way a DBA or a failover does: its client finds out on next use."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        (done,) = admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() or (False,)
    assert done, f"no backend {pid} to terminate"


def terminate_sessions(dsn: str) -> None:
    """End every tracebound session in the test's database, as a restart or a failover
    does: each client finds out on its next use. Returns once each backend has exited
    (the timeout form, PostgreSQL 14+), so its goodbye is in the client's socket, as it is
    when a step's minutes pass between the restart and the next append."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = 'tracebound'"
        ).fetchall()
    assert ended and all(done for (done,) in ended), ended


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


@contextmanager
def commits_wait_for_a_standby(dsn: str) -> Iterator[None]:
    """Every COMMIT waits for a synchronous standby that never comes: committed locally,
    not yet acknowledged. Terminating such a session is the ambiguous commit (the COMMIT
    was sent, the answer lost) without racing a packet. Server-wide, so reset afterwards."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'tb_nobody'")
        reload_until(admin, "tb_nobody")
        try:
            yield
        finally:
            admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
            reload_until(admin, "")


def reload_until(admin: psycopg.Connection[Any], names: str) -> None:
    """Reload the configuration and wait until it is in force. pg_reload_conf() only
    signals the postmaster, which re-reads the file and signals every backend later: on a
    busy machine an append's COMMIT could still run under the old setting. Once this
    session sees the new value the postmaster has signalled every backend, and each applies
    the signal before its next command."""
    admin.execute("SELECT pg_reload_conf()")
    for _ in range(2000):
        row = admin.execute("SHOW synchronous_standby_names").fetchone()
        if row is not None and row[0] == names:
            return
        time.sleep(0.005)
    pytest.fail(f"synchronous_standby_names never became {names!r}")


def terminate_when_committing(dsn: str) -> None:
    """Wait for a session whose COMMIT waits for the standby, then terminate it."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        for _ in range(6000):
            row = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE wait_event = 'SyncRep' AND application_name = 'tracebound'"
            ).fetchone()
            if row is not None:
                return
            time.sleep(0.005)
    pytest.fail("no append ever waited at its COMMIT")


@pytest.mark.parametrize("grouped", [False, True], ids=["store", "group_commit"])
def test_an_append_whose_commit_answer_is_lost_says_so_and_a_retry_is_safe(
    postgres_dsn: str, grouped: bool
) -> None:
    """The connection dies after COMMIT was sent: the events are in, the caller cannot
    know. It gets a StorageError saying the outcome is unknown (not 'not written'), and a
    retry with expected_version is refused instead of writing the events twice."""
    store: Any = PostgresStore(postgres_dsn)
    if grouped:
        store = GroupCommitter(store)
    store.append("s", [note(0)])
    with commits_wait_for_a_standby(postgres_dsn):
        killer = threading.Thread(target=terminate_when_committing, args=(postgres_dsn,))
        killer.start()
        with pytest.raises(CommitOutcomeUnknown) as info:
            store.append("s", [note(1)], expected_version=1)
        killer.join()
    message = str(info.value)
    assert "may have been written" in message and "not written" not in message, message
    with pytest.raises(ConcurrencyConflict):  # the same store object, on a new session
        store.append("s", [note(1)], expected_version=1)
    assert [e.stream_version for e in store.read_stream("s")] == [1, 2]
    store.close()


def terminate_when_waiting_for_the_lock(dsn: str) -> None:
    """Wait for a session queued behind the log's lock (its BEGIN and lock sent), end it."""
    wait_for_lock_wait(dsn, "log_head")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND query LIKE '%log_head%'"
        )


@pytest.mark.parametrize(
    ("grouped", "events"),
    [(False, 3), (False, 1500), (True, 3), (True, 1500)],
    ids=["store", "store-bulk", "group_commit", "group_commit-bulk"],
)
def test_an_append_cut_off_before_its_commit_wrote_nothing_and_the_next_one_works(
    postgres_dsn: str, grouped: bool, events: int
) -> None:
    """Terminated mid-append (after BEGIN, queued for the lock): a StorageError that says
    nothing was written, none of the batch in the log, and the same object appends next."""
    holder = PostgresStore(postgres_dsn)
    store: Any = PostgresStore(postgres_dsn)
    if grouped:
        store = GroupCommitter(store)
    batch = [
        AppendRequest(StreamId("s"), [note(i) for i in range(events)]),
        AppendRequest(StreamId("t"), [note(0)]),
    ]
    with holder.tracking("hold"):
        holder.append("h", [note(0)])  # holds the log's lock until the block ends
        killer = threading.Thread(target=terminate_when_waiting_for_the_lock, args=(postgres_dsn,))
        killer.start()
        with pytest.raises(StorageError) as info:
            store.append_batch(batch)
        killer.join()
    if not grouped:  # safe to retry, which a caller can tell by its class
        assert isinstance(info.value, ConnectionLost)
    assert "nothing was written" in str(info.value)
    assert [e.stream_id for e in store.read_log()] == ["h"]  # no part of the batch
    written = store.append_batch(batch)  # the same object, on a new session
    assert written[-1].position == events + 2
    holder.close()
    store.close()


@pytest.mark.parametrize(
    ("grouped", "events"),
    [(False, 3), (False, 1500), (True, 3), (True, 1500)],
    ids=["store", "store-bulk", "group_commit", "group_commit-bulk"],
)
def test_an_append_that_finds_its_session_already_dead_writes_once_on_a_new_one(
    postgres_dsn: str, grouped: bool, events: int
) -> None:
    """The session died while idle (a restart, a failover between two appends): the next
    append sent nothing on it, so nothing of it can have been committed. Before: it failed
    with ConnectionLost ("retrying is safe") and a long-running writer had to retry by
    itself. Now the store replaces the session first, and the events land once."""
    store: Any = PostgresStore(postgres_dsn)
    if grouped:
        store = GroupCommitter(store)
    store.append("s", [note(0)])
    terminate_sessions(postgres_dsn)  # the appending session among them, idle
    written = store.append("s", [note(i) for i in range(1, events + 1)], expected_version=1)
    assert written[-1].position == events + 1
    assert [e.stream_version for e in store.read_stream("s")] == list(range(1, events + 2))
    store.close()


@contextmanager
def _busy_process(fds: int = 1100) -> Iterator[None]:
    """A long-running service's process: over a thousand files and sockets open, so that a
    session opened now has a descriptor number past select()'s 1024."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < fds + 100:
        pytest.skip(f"the open-file limit {soft} is too low for {fds} descriptors")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(fds)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)


def test_a_busy_service_whose_idle_session_died_still_writes_once_on_a_new_one(
    postgres_dsn: str,
) -> None:
    """The dead-session check read the socket with select(), which refuses descriptors past
    1024: in a process with that many open (a service with many files and sockets, the
    very writer that lives across a restart) the check was skipped and the append failed
    with ConnectionLost as before."""
    with _busy_process():
        store = PostgresStore(postgres_dsn)
        store.append("s", [note(0)])
        assert store._conn().fileno() > 1024
        terminate_sessions(postgres_dsn)
        written = store.append("s", [note(1)], expected_version=1)
        assert written[-1].position == 2
        assert [e.stream_version for e in store.read_stream("s")] == [1, 2]
        store.close()


class Follower:
    """A `tracebound … --follow` subprocess on a PostgreSQL ledger, its output read as it
    comes (the test waits on what it says, not on sleeps)."""

    def __init__(self, tmp_path: Path, url: str, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
        env.pop("COLUMNS", None)  # a service's stderr: no terminal, rich's 80 columns
        env.update(HOME=str(tmp_path / "home"), NO_COLOR="1")
        self.argv = [sys.executable, "-m", "tracebound"]
        self.cwd, self.env, self.url = tmp_path, env, url
        self.proc = subprocess.Popen(
            [*self.argv, *args, "--store", url], cwd=tmp_path, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
        )  # fmt: skip
        self.out: list[str] = []
        self.err: list[str] = []
        for pipe, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=lambda p=pipe, ls=lines: ls.extend(p), daemon=True).start()

    def cli(self, *args: str, stdin: str | None = None) -> Any:
        proc = subprocess.run(
            [*self.argv, *args, "--store", self.url, "--json"], cwd=self.cwd, env=self.env,
            input=stdin, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    def wait_until(self, what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 90
        while not done():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"never {what}; stdout {self.out}, stderr {self.err}")
            time.sleep(0.05)

    def said(self, text: str) -> Callable[[], bool]:
        return lambda: any(text in line for line in self.err)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def _costs(first: int, n: int) -> str:
    return "".join(
        json.dumps(
            {"stream_id": f"s-{i % 3}", "workflow_id": f"wf-{i % 2}",
             "payload": {"kind": "cost_incurred", "tier": "direct", "amount_usd": f"0.{i:03d}",
                         "source": "openai", "role": "Executor"}}
        ) + "\n"
        for i in range(first, first + n)
    )  # fmt: skip


def _initialised(
    tmp_path: Path, server: PgServer, dsn: str, command: str
) -> tuple[str, tuple[str, str], tuple[str, ...], Follower]:
    """A ledger initialised in the test's database: its URL, the views option, the follow
    command's arguments (``project run`` into views beside it, or ``tail``), and the
    finished ``init`` process (whose ``cli`` runs more commands)."""
    dbname = dsn.rsplit("dbname=", 1)[1]
    url = server.url(dbname, schema="ledger")
    views = ("--views", server.url(dbname, schema="views"))
    args = ("project", "run", *views) if command == "project" else ("tail",)
    init = Follower(tmp_path, url, "init")
    assert init.proc.wait(timeout=120) == 0, init.err
    return url, views, args, init


@pytest.mark.parametrize("command", ["project", "tail"])
def test_a_follower_rides_out_a_server_restart(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str, command: str
) -> None:
    """An SRE runs the follower as a service. Before: the restart of its PostgreSQL server
    ended it (exit 2, `connection refused`) and a supervisor had to start it again. Now it
    says so on stderr, reconnects when the server is back, and goes on from where it was:
    the events appended after the restart are applied, each once."""
    url, views, args, _ = _initialised(tmp_path, postgres_server, postgres_dsn, command)
    follower = Follower(tmp_path, url, *args, "--follow", "--interval", "0.05", "--json")
    try:
        follower.cli("append", stdin=_costs(1, 5))

        def head(n: int) -> Callable[[], bool]:
            if command == "tail":
                return lambda: len(follower.out) == n
            return lambda: all(
                s["position"] == n for s in follower.cli("project", "status", *views)["projections"]
            )

        follower.wait_until("caught up with 5 events", head(5))
        with server_stopped(postgres_server):
            follower.wait_until("said it lost the server", follower.said("reconnecting"))
        follower.wait_until("said it reconnected", follower.said("reconnected after"))
        follower.cli("append", stdin=_costs(6, 3))
        follower.wait_until("applied the events appended after the restart", head(8))
    finally:
        code = follower.stop()
    assert code == 0, follower.err
    assert "Traceback" not in "".join(follower.err)
    (lost,) = [line for line in follower.err if "reconnecting" in line]  # said once
    assert lost.startswith("warning: postgresql") and "giving up after 300 s" in lost, lost
    if command == "project":
        assert json.loads("".join(follower.out))["head"] == 8
        fresh = follower.cli("report", "cost", "--views", str(tmp_path / "fresh.db"))
        # each event applied once, across the restart: the same rows as views built anew
        assert follower.cli("report", "cost", "--no-update", *views)["rows"] == fresh["rows"]
    else:
        assert [json.loads(line)["position"] for line in follower.out] == list(range(1, 9))


@pytest.mark.parametrize("command", ["project", "tail"])
def test_a_follower_whose_server_stays_gone_gives_up_with_an_error(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str, command: str
) -> None:
    """A server gone for good ends the follower past --give-up-after, exit 2, saying why:
    not a follower retrying unseen for ever."""
    url, _, args, init = _initialised(tmp_path, postgres_server, postgres_dsn, command)
    init.cli("append", stdin=_costs(1, 1))  # what tail prints once it follows
    follower = Follower(tmp_path, url, *args, "--follow", "--give-up-after", "0.5")
    try:
        follower.wait_until("started following", lambda: bool(follower.out))
        with server_stopped(postgres_server):
            code = follower.proc.wait(timeout=120)
    finally:
        follower.stop()
    assert code == 2, (follower.out, follower.err)
    said = " ".join(" ".join(follower.err).split())
    assert "reconnecting" in said and "gave up after" in said, said
    assert "Traceback" not in said


def test_a_server_lost_mid_catch_up_fails_no_projection(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str
) -> None:
    """The ledger's server goes down between two batches of a catch-up (views in SQLite).
    Before: the failed read was taken for a bad record, every projection was marked failed
    at the next position in the views, and the run raised a plain StorageError (a follower
    could not tell it from damage). Now: ConnectionLost, nothing marked, and the next run
    goes on from the last commit once the server is back."""
    store = PostgresStore(postgres_dsn)
    store.append("s", [note(i) for i in range(3)])
    views = SQLiteViews(tmp_path / "views.db")
    down = ExitStack()
    commits: list[int] = []

    def stop_after_first_batch(position: int) -> None:
        commits.append(position)
        if len(commits) == 1:
            down.enter_context(server_stopped(postgres_server))

    runner = ProjectionRunner(store, views, batch_size=1, on_commit=stop_after_first_batch)
    with down, pytest.raises(ConnectionLost):
        runner.run()
    assert commits == [1]  # nothing committed after the lost read
    status = runner.status()
    assert {(s.position, s.failed_position, s.error) for s in status} == {(1, None, None)}
    assert runner.run().events == 2
    assert {s.position for s in runner.status()} == {3}
    views.close()
    store.close()


def _reading_its_input(appender: subprocess.Popen[str], key: Path) -> None:
    """Return once ``appender`` has opened the ledger and reads stdin: it creates its
    redaction key after opening the ledger, right before it reads."""
    for _ in range(24000):
        if key.exists():
            return
        if appender.poll() is not None:
            pytest.fail(f"append ended before reading its input: {appender.communicate()}")
        time.sleep(0.005)
    pytest.fail(f"append never created {key}")


def test_an_append_whose_session_died_while_it_read_its_input_still_writes_it(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str
) -> None:
    """`producer | tracebound append` opens the ledger first, then reads stdin for as long
    as the producer runs. Before: a server restart (a failover, an idle-session cut) in that
    time made it fail once the input was complete, "retrying is safe", with the input gone
    with the pipe, and psycopg's "error ignored terminating <psycopg.Pipeline [BAD] at
    0x…>" on stderr. Now the append goes to a new session and writes every event."""
    url, _, _, init = _initialised(tmp_path, postgres_server, postgres_dsn, "tail")
    appender = subprocess.Popen(
        [*init.argv, "append", "--store", url, "--json"], cwd=tmp_path, env=init.env,
        text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _reading_its_input(appender, tmp_path / "home/.config/tracebound/keys/redaction.key")
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = 'tracebound'"
        ).fetchall()
    assert ended == [(True,)]  # its one session, idle while it waits for input
    out, err = appender.communicate(_costs(1, 3), timeout=120)
    assert appender.returncode == 0, out + err
    assert json.loads(out)["last_position"] == 3
    assert err == ""
    assert [e["position"] for e in init.cli("log")["events"]] == [1, 2, 3]


def test_an_append_cut_off_before_its_commit_says_so_in_one_message(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str
) -> None:
    """The CLI's append, its session ended while it waits for the log's lock. Before: the
    error, and psycopg's own "error ignored terminating <psycopg.Pipeline [BAD] at 0x…>"
    on stderr too (an internal object's address, to a user reading a failed append)."""
    url, _, _, init = _initialised(tmp_path, postgres_server, postgres_dsn, "tail")
    holder = PostgresStore(postgres_dsn, schema="ledger")
    with holder.tracking("hold"):
        holder.append("h", [note(0)])  # holds the log's lock until the block ends
        killer = threading.Thread(target=terminate_when_waiting_for_the_lock, args=(postgres_dsn,))
        killer.start()
        appender = subprocess.run(
            [*init.argv, "append", "--store", url], cwd=tmp_path, env=init.env,
            input=_costs(1, 1), capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        killer.join()
    holder.close()
    assert appender.returncode == 2, appender.stdout + appender.stderr
    said = " ".join(appender.stderr.split())
    assert said.startswith("error: postgresql append failed") and "nothing was written" in said
    assert "psycopg" not in said and "0x" not in said, said
