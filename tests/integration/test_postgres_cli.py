"""The `tracebound` CLI on a PostgreSQL ledger: init, append, checkpoint, verify, tamper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.pg import PgServer

pytestmark = pytest.mark.postgres


def _line(i: int) -> str:
    return json.dumps(
        {
            "stream_id": f"run-{i % 2}",
            "workflow_id": "wf",
            "payload": {
                "kind": "cost_incurred",
                "tier": "direct",
                "amount_usd": f"0.{i:04d}",
                "source": "x",
            },
        }
    )


def test_cli_round_trip_and_tamper(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str
) -> None:
    dbname = postgres_dsn.rsplit("dbname=", 1)[1]
    url = postgres_server.url(dbname)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env.update(HOME=str(tmp_path / "home"), TRACEBOUND_STORE=url)

    def cli(*args: str, code: int = 0, stdin: str | None = None) -> Any:
        proc = subprocess.run(
            [sys.executable, "-m", "tracebound", *args, "--json"], cwd=tmp_path, env=env,
            input=stdin, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == code, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    assert cli("init")["created"] is True
    cli("keys", "init")
    assert cli("append", stdin="".join(_line(i) + "\n" for i in range(8)))["appended"] == 8
    assert cli("checkpoint")["size"] == 8
    assert cli("verify")["ok"] is True
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE tracebound.events SET body = convert_to(replace(convert_from(body, 'UTF8'),"
            " '0.0005', '0.9005'), 'UTF8') WHERE position = 6"
        )
    damaged = cli("verify", code=1)
    assert (damaged["damage"]["kind"], damaged["damage"]["position"]) == ("tamper", 6)


def test_two_postgresql_ledgers_do_not_share_default_views(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str
) -> None:
    """Without --views, a PostgreSQL ledger's views live in the local ``.tracebound``; two
    ledgers (two schemas) reported from one folder got one views file, and each report
    summed the other ledger's events and skipped its own up to the other's position."""
    dbname = postgres_dsn.rsplit("dbname=", 1)[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env["HOME"] = str(tmp_path / "home")

    def cli(url: str, *args: str, stdin: str | None = None) -> Any:
        proc = subprocess.run(
            [sys.executable, "-m", "tracebound", *args, "--store", url, "--json"],
            cwd=tmp_path, env=env, input=stdin, capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    urls = {name: postgres_server.url(dbname, schema=name) for name in ("team_a", "team_b")}
    for count, url in zip((3, 5), urls.values(), strict=True):
        cli(url, "init")
        cli(url, "append", stdin="".join(_line(i) + "\n" for i in range(count)))
    assert cli(urls["team_a"], "project", "run")["applied"] == 3
    # team_b's own five events, not team_a's three and its last two
    assert cli(urls["team_b"], "project", "run")["applied"] == 5
    cost = {name: cli(url, "report", "cost")["total_usd"] for name, url in urls.items()}
    assert cost == {"team_a": "0.0003", "team_b": "0.0010"}
