"""SIGKILL a writer on PostgreSQL: every acknowledged event survives, and the log verifies.

The same harness as ``test_crash.py`` (``tests/crash_harness.py``), on a real server, one
fresh schema per trial; ``bench/soak_crash.py --backend postgresql`` runs hundreds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash_harness import KILL_MODES, POSTGRES, run_trial
from tests.pg import PgServer

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TRIALS = 4


@pytest.mark.parametrize("trial", range(TRIALS))
def test_sigkill_loses_no_acknowledged_event_on_postgresql(
    trial: int, tmp_path: Path, postgres_server: PgServer, postgres_dsn: str
) -> None:
    url = postgres_server.url(postgres_dsn.rsplit("dbname=", 1)[1], schema=f"crash_{trial}")
    result = run_trial(
        POSTGRES, tmp_path, seed=104_729 * (trial + 1), kill=KILL_MODES[trial % 2], url=url
    )
    assert result.ok, result.as_dict()
    assert result.acked > 0  # killed after it had acknowledged something
    assert result.lost == [] and result.partial_batches == []
    assert result.present >= result.acked
    assert result.torn is None  # a transaction either committed or did not
