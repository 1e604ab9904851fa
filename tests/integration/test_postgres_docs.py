"""docs/postgresql.md is tested: its Python blocks run against the test server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pg import PgServer

pytestmark = pytest.mark.postgres

DOC = Path(__file__).resolve().parents[2] / "docs" / "postgresql.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_doc_has_an_example() -> None:
    assert BLOCKS, "docs/postgresql.md lost its runnable example"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_python_blocks_run(
    index: int, postgres_dsn: str, postgres_server: PgServer, tmp_path: Path
) -> None:
    dbname = postgres_dsn.rsplit("dbname=", 1)[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACEBOUND_", "PG"))}
    env["TRACEBOUND_PG_URL"] = postgres_server.url(dbname, schema="team_a")
    env["HOME"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
