"""Eight writer processes on one ledger, SQLite and PostgreSQL: nothing lost or doubled.

The full proof (8 writers x 5,000 appends) is ``bench/soak_concurrency.py``; here the same
harness runs 8 x 200, with real processes and real stores. See ``tests/concurrency_harness.py``
for what the writers do and what is checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.concurrency_harness import ProofResult, run_proof
from tests.pg import PgServer

WRITERS = 8
APPENDS = 200
# Contenders (even writers) add a second event on every tenth append (a two-stream batch).
EVENTS = WRITERS * APPENDS + (WRITERS // 2) * (APPENDS // 10)


def _assert_proof(result: ProofResult) -> None:
    summary = result.as_dict()
    assert result.ok, summary
    assert result.events == result.acked == EVENTS, summary
    assert (result.lost, result.duplicated, result.phantom, result.misplaced) == ([], [], [], [])
    # The optimistic-concurrency path was exercised, and only ever as ConcurrencyConflict
    # (a writer that saw any other error exits non-zero, which lands in `problems`).
    assert result.conflicts > 0, summary
    assert result.conflicted_events >= result.conflicts
    assert len(result.checkpoints) >= 2, summary  # at least one signed mid-run, then the final
    assert result.checkpoints[-1] == EVENTS
    assert result.verify["checks"] == {
        "chain": "ok",
        "positions": "ok",
        "merkle": "ok",
        "signature": "ok",
        "witness": "ok",
    }


@pytest.mark.slow
def test_eight_writers_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{(tmp_path / 'store').resolve()}"
    _assert_proof(run_proof("sqlite", url, tmp_path, writers=WRITERS, appends=APPENDS))


@pytest.mark.slow
@pytest.mark.postgres
def test_eight_writers_on_postgresql(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str
) -> None:
    url = postgres_server.url(postgres_dsn.rsplit("dbname=", 1)[1], schema="proof")
    _assert_proof(run_proof("postgresql", url, tmp_path, writers=WRITERS, appends=APPENDS))
