"""docs/postgresql.md is tested: its Python example runs against the test server.

It runs the blocks whose docs-test marker says they are covered by this file (the other
blocks are run, or skipped with a reason, by tests/e2e/test_docs_examples.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_kit import covered_by
from tests.pg import PgServer

pytestmark = pytest.mark.postgres

BLOCKS = [block.body for block in covered_by(__file__) if block.lang == "python"]


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
