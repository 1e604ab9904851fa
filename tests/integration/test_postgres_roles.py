"""docs/postgresql.md, "Roles and privileges", on a real server: its SQL, then every command.

The two SQL blocks of that section are run as written (the database renamed to the test's),
the owner creates the ledger with `tracebound init`, and then the writer and the read-only
auditor run the commands the section names under those privileges and no more. What a
role may not do is refused with exit 2 and a message that says it is a privilege, not a
psycopg error alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.docs_kit import covered_by
from tests.pg import PgServer

pytestmark = pytest.mark.postgres

BLOCKS = [block.body for block in covered_by(__file__) if block.lang == "sql"]
ROLES = ("tb_owner", "tb_writer", "tb_auditor")
COST = {"kind": "cost_incurred", "tier": "direct", "amount_usd": "0.01", "source": "x"}
LINES = "".join(
    json.dumps({"stream_id": f"run-{i % 2}", "workflow_id": "wf", "payload": COST}) + "\n"
    for i in range(6)
)

Cli = Callable[..., Any]


def _drop_roles(admin: psycopg.Connection[Any]) -> None:
    for role in ROLES:
        if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def as_role(postgres_server: PgServer, postgres_dsn: str, tmp_path: Path) -> Iterator[Cli]:
    """The documented setup done; yields ``cli(role, *args, code=…, stdin=…, schema=…)``."""
    assert len(BLOCKS) == 2, "docs/postgresql.md lost its roles SQL"
    dbname = postgres_dsn.rsplit("dbname=", 1)[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACEBOUND_", "PG"))}
    env["HOME"] = str(tmp_path / "home")

    def cli(
        role: str, *args: str, code: int = 0, stdin: str | None = None, schema: str = "team_a"
    ) -> Any:
        url = f"postgresql://{role}@127.0.0.1:{postgres_server.port}/{dbname}?schema={schema}"
        proc = subprocess.run(
            [sys.executable, "-m", "tracebound", *args, "--store", url, "--json"],
            cwd=tmp_path, env=env, input=stdin, capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip
        assert proc.returncode == code, proc.stdout + proc.stderr
        return json.loads(proc.stdout) if proc.stdout.strip() else None

    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        _drop_roles(admin)  # an earlier run's, killed before its cleanup
        admin.execute(BLOCKS[0].replace("ledgers", dbname).encode())
    try:
        cli("tb_owner", "init", "--origin", "example.com/team-a")
        owner_dsn = postgres_dsn.replace("user=postgres", "user=tb_owner")
        with psycopg.connect(owner_dsn, autocommit=True) as owner:
            owner.execute(BLOCKS[1].encode())
        subprocess.run(
            [sys.executable, "-m", "tracebound", "keys", "init"], env=env, check=True,
            capture_output=True, timeout=120,
        )  # fmt: skip
        yield cli
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            _drop_roles(admin)


def _relations(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
        ).fetchall()
    return {name for (name,) in rows}


def test_the_writer_and_the_auditor_work_with_the_documented_privileges(
    as_role: Cli, postgres_dsn: str
) -> None:
    assert as_role("tb_writer", "append", stdin=LINES)["appended"] == 6
    assert as_role("tb_writer", "checkpoint")["size"] == 6
    assert as_role("tb_writer", "append", stdin=LINES)["appended"] == 6
    assert as_role("tb_writer", "checkpoint")["size"] == 12  # the incremental one too
    before = _relations(postgres_dsn)
    assert as_role("tb_auditor", "verify")["ok"] is True
    assert len(as_role("tb_auditor", "log")["events"]) == 12
    assert len(as_role("tb_auditor", "tail", "-n", "3")["events"]) == 3
    assert as_role("tb_auditor", "inspect", "run-1")["ok"] is True
    assert as_role("tb_auditor", "prove", "5")["position"] == 5
    as_role("tb_auditor", "export", "anchors")
    assert as_role("tb_auditor", "report", "cost")["ok"] is True
    assert as_role("tb_auditor", "runs")["ok"] is True
    assert _relations(postgres_dsn) == before  # the auditor created nothing in the database


def test_what_a_role_may_not_do_is_refused_as_a_missing_privilege(as_role: Cli) -> None:
    as_role("tb_writer", "append", stdin=LINES)
    for command in (["append"], ["checkpoint"]):
        error = as_role("tb_auditor", *command, code=2, stdin=LINES)["error"]
        assert error["kind"] == "StorageError"
        assert "permission denied" in error["message"]
        assert "privilege" in error["message"].replace("permission denied", "")
        assert "Roles and privileges" in error["message"]
    # Only the owner may create a ledger; a writer's init says what it lacks.
    error = as_role("tb_writer", "init", code=2, schema="team_b")["error"]
    assert "permission denied for database" in error["message"]
    assert "needs CREATE on the database" in error["message"]
