"""Pointing tracebound at a PostgreSQL server for the first time, with the usual mistakes.

A wrong password, a role or a database that does not exist, a pg_hba.conf with no line for
the user, a URL that requires TLS from a server without it: each raised ConnectionLost
("the connection was lost", retry), and a pipeline run waited ``give_up_after`` (300 s) for
a server that would never let it in. Each is a ConfigError now, saying what is wrong and
what to do, without the password; only a server out of reach is still ConnectionLost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from tests.integration.pipeline_kit import Kit
from tests.integration.test_postgres_connection_loss import terminate_sessions
from tests.integration.test_postgres_pipeline_outage import said, three_steps
from tests.pg import PgServer, pg_hba
from tracebound.errors import ConfigError, ConnectionLost
from tracebound.projections.postgres_views import PostgresViews
from tracebound.store.postgres import PostgresStore
from tracebound.store.url import open_store

pytestmark = pytest.mark.postgres

PW_ROLE = "tb_connect_pw"
NOLOGIN = "tb_connect_nologin"
REJECTED = "tb_connect_rejected"
PW = "Right-pw-7q"
WRONG = "Wrong-pw-9z"
NO_DB = "tb_no_such_database"


@dataclass(frozen=True)
class Server:
    """The test's server, letting in only as the rules in :func:`server` say."""

    port: int
    dbname: str

    def url(self, user: str, *, dbname: str | None = None, query: str = "") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname or self.dbname}{query}"


@pytest.fixture
def server(
    postgres_server: PgServer, postgres_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Server]:
    """A role with a password, one without LOGIN, one pg_hba.conf rejects; the test's
    database (and the name of one that does not exist) open to every other role without a
    password, and no pg_hba.conf line at all for any other database."""
    dbname = postgres_dsn.rsplit("dbname=", 1)[1]
    roles = {PW_ROLE: f"LOGIN PASSWORD '{PW}'", NOLOGIN: "NOLOGIN", REJECTED: "LOGIN"}
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        for role, options in roles.items():
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL(f"CREATE ROLE {{}} {options}").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("GRANT ALL ON DATABASE {} TO {}").format(
                sql.Identifier(dbname), sql.Identifier(PW_ROLE)
            )
        )
    # No password from the environment or a password file: only the URL's.
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    rules = (
        f"host all {PW_ROLE} 127.0.0.1/32 scram-sha-256\n"
        f"host all {REJECTED} 127.0.0.1/32 reject\n"
        f"host {dbname},{NO_DB} all 127.0.0.1/32 trust\n"
    )
    try:
        with pg_hba(postgres_server, rules, keep=False):
            yield Server(postgres_server.port, dbname)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            for role in roles:
                admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


# What the user got wrong; the URL that does it; what the message must tell them.
MISTAKES: dict[str, tuple[Callable[[Server], str], str]] = {
    "wrong password": (lambda s: s.url(f"{PW_ROLE}:{WRONG}"), "user name and password"),
    "no password": (lambda s: s.url(PW_ROLE), "no password was given"),
    "no such role": (lambda s: s.url("tb_connect_nobody"), "no such role"),
    "no such database": (lambda s: s.url("postgres", dbname=NO_DB), "no such database"),
    "pg_hba.conf rejects": (lambda s: s.url(REJECTED), "pg_hba.conf"),
    "no pg_hba.conf line": (lambda s: s.url("postgres", dbname="template1"), "pg_hba.conf"),
    "role without LOGIN": (lambda s: s.url(NOLOGIN), "may not log in"),
    "TLS the server lacks": (lambda s: s.url("postgres", query="?sslmode=require"), "sslmode"),
}


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `tracebound` entry point, as a user runs it (with the test's PG* settings)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env["HOME"] = str(tmp_path / "home")
    return subprocess.run(
        [sys.executable, "-m", "tracebound", *args], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_misconfigured_connection_is_a_config_error_saying_what_to_do(
    server: Server, tmp_path: Path, mistake: str
) -> None:
    url_of, advice = MISTAKES[mistake]
    url = url_of(server)
    for create in (True, False):  # `init` and every other command
        with pytest.raises(ConfigError) as caught:
            open_store(url, create=create)
        message = str(caught.value)
        assert not isinstance(caught.value, ConnectionLost), message
        assert advice in message, message
        assert message.startswith("cannot connect to postgresql://"), message
        assert WRONG not in message and PW not in message, message
    with pytest.raises(ConfigError) as caught:  # `project run --views postgresql://…`
        PostgresViews(url)
    assert advice in str(caught.value) and WRONG not in str(caught.value), caught.value

    init = run_cli(tmp_path, "init", "--store", url, "--json")
    assert init.returncode == 2, init.stdout + init.stderr
    error = json.loads(init.stdout)["error"]
    assert error["kind"] == "ConfigError", error
    assert advice in error["message"], error
    verify = run_cli(tmp_path, "verify", "--store", url)
    assert verify.returncode == 2, verify.stdout + verify.stderr
    said_ = " ".join(verify.stderr.split())  # the terminal wraps lines
    assert said_.startswith("error: cannot connect to"), verify.stderr
    assert advice in said_, verify.stderr
    for out in (init, verify):
        assert WRONG not in out.stdout + out.stderr
        assert "Traceback" not in out.stderr


def test_a_server_nothing_answers_for_is_still_a_lost_connection(
    server: Server, tmp_path: Path
) -> None:
    """Nothing listens there (yet): a restart, a failover, a server starting. Waiting for
    it may help, so it stays ConnectionLost, which the followers and the runner wait for."""
    with pytest.raises(ConnectionLost):
        open_store(Server(port=1, dbname=server.dbname).url("postgres"))
    init = run_cli(tmp_path, "init", "--store", Server(1, server.dbname).url("postgres"), "--json")
    assert init.returncode == 2, init.stdout + init.stderr
    assert json.loads(init.stdout)["error"]["kind"] == "ConnectionLost"


def test_a_run_whose_password_stops_working_ends_at_once_without_waiting(
    server: Server, postgres_dsn: str, tmp_path: Path
) -> None:
    """The role's password is changed while a step runs and the session is ended: the run's
    next append cannot log in again. Before: ConnectionLost, and the runner waited for the
    server (``give_up_after``: 300 s by default) before failing with "gave up". Now the
    ConfigError ends the run at once: nothing said about reconnecting."""

    def password_changed() -> None:
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER ROLE {} PASSWORD 'changed-by-the-dba'").format(
                    sql.Identifier(PW_ROLE)
                )
            )
        terminate_sessions(postgres_dsn)

    kit = Kit(tmp_path)
    with said() as log, kit.ledger(PostgresStore(server.url(f"{PW_ROLE}:{PW}"))) as ledger:
        runner = kit.runner(ledger)
        runner.give_up_after = 0.0  # before: one wait, then ConnectionLost "gave up"
        with pytest.raises(ConfigError) as caught:
            runner.run(three_steps(password_changed), {})
    assert "user name and password" in str(caught.value), caught.value
    assert PW not in str(caught.value)
    assert not [line for line in log.lines if "reconnecting" in line], log.lines


@pytest.mark.parametrize("schema", ["pg_ledger", "my-ledger", "Ledger One;drop"])
def test_a_schema_name_is_taken_as_written_or_refused_as_reserved(
    server: Server, tmp_path: Path, schema: str
) -> None:
    """`?schema=` with characters an unquoted name cannot hold is the schema of that exact
    name. One starting with ``pg_`` (PostgreSQL keeps those for itself) was a StorageError
    quoting the server over two lines; it is a ConfigError saying to choose another."""
    url = server.url("postgres", query=f"?schema={quote(schema)}")
    init = run_cli(tmp_path, "init", "--store", url, "--json")
    if not schema.startswith("pg_"):
        assert init.returncode == 0, init.stdout + init.stderr
        store = open_store(url)
        try:
            assert isinstance(store, PostgresStore) and store.schema == schema
        finally:
            store.close()
        return
    assert init.returncode == 2, init.stdout + init.stderr
    error = json.loads(init.stdout)["error"]
    assert error["kind"] == "ConfigError", error
    assert "pg_" in error["message"] and "?schema=" in error["message"], error
    assert "\n" not in error["message"], error
    with pytest.raises(ConfigError):
        open_store(url, create=True)
