"""`tracebound abandon`: a run whose process died mid-run is ended on the record, by name.

Real processes: a ``clean`` run held after its first step (tests/integration/
cli_runs_pipelines.py, ``run-held-mid-run``) is killed with SIGKILL, or left alive to show
that a writer taken for dead is fenced off once the run is abandoned (docs/adr/0018).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_cli_runs import HERE, Shell, ledger_shell
from tracebound.errors import ConcurrencyError
from tracebound.pipeline.abandon import abandon, stale_run
from tracebound.pipeline.config import RunnerConfig
from tracebound.pipeline.redaction import Redactor


@pytest.fixture
def sh(tmp_path: Path) -> Shell:
    return ledger_shell(tmp_path, "test.example/cli-abandon")


def _held_run(sh: Shell, tmp_path: Path) -> tuple[str, Path, subprocess.Popen[str]]:
    """A ``clean`` run's process, held after its first step: the run id, the hold folder,
    the process."""
    hold = tmp_path / "hold"
    hold.mkdir()
    process = subprocess.Popen(
        [sys.executable, str(HERE / "cli_runs_pipelines.py"), "run-held-mid-run"], cwd=sh.cwd,
        env={**sh.env, "TB_HOLD_DIR": str(hold)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    while not (hold / "mid-run").exists() and process.poll() is None:
        time.sleep(0.01)  # polling, not a timing assertion: wait for the process to get there
    assert (hold / "mid-run").exists(), process.communicate()
    (row,) = sh.tb_json("runs")["runs"]
    return row["run_id"], hold, process


def _log(sh: Shell, run: str) -> list[dict[str, object]]:
    events: list[dict[str, object]] = sh.tb_json("log", "--stream", f"run/{run}")["events"]
    return events


def test_a_run_killed_mid_run_stands_out_and_is_abandoned_by_name(
    sh: Shell, tmp_path: Path
) -> None:
    run, _, process = _held_run(sh, tmp_path)
    process.kill()  # SIGKILL after the first step: no run_finished, ever
    process.communicate(timeout=180)

    (row,) = sh.tb_json("runs")["runs"]
    assert row["status"] == "running"
    assert isinstance(row["idle_seconds"], int) and row["idle_seconds"] >= 0
    assert row["last_event"] == _log(sh, run)[-1]["timestamp"]
    assert "(idle " in sh.tb("runs").stdout
    assert "not waiting at a gate" in sh.tb_json("resume", run, code=2)["error"]["message"]

    before = len(_log(sh, run))
    young = sh.tb_json(
        "abandon", run, "--as", "@oncall", "--reason", "host lost", "--min-idle", "1000000",
        code=2,
    )["error"]["message"]  # fmt: skip
    assert "may be alive" in young and "--yes" in young and "abandoned by @oncall" in young
    assert len(_log(sh, run)) == before  # shown what it would do; wrote nothing

    unsaid = sh.tb_json("abandon", run, "--as", "@oncall", "--reason", " ", "--yes", code=2)
    assert "says why" in unsaid["error"]["message"]
    ended = sh.tb_json("abandon", run, "--by", "@oncall", "--reason", "host lost", "--yes")
    assert (ended["status"], ended["position"]) == ("failed", _log(sh, run)[-1]["position"])
    assert ended["reason"].startswith("abandoned by @oncall: host lost (its last event, ")
    last = _log(sh, run)[-1]
    assert (last["event_type"], last["payload"]["status"]) == ("run_finished", "failed")  # type: ignore[index]

    (row,) = sh.tb_json("runs")["runs"]
    assert (row["status"], row["idle_seconds"], row["reason"]) == ("failed", None, ended["reason"])
    again = sh.tb_json("abandon", run, "--as", "@oncall", "--reason", "x", "--yes", code=2)
    assert "already ended (failed)" in again["error"]["message"]
    assert "not waiting at a gate (failed)" in sh.tb_json("resume", run, code=2)["error"]["message"]
    replayed = sh.tb_json("replay", run)
    assert (replayed["ok"], replayed["status"]) == (True, "failed")
    assert sh.tb_json("metrics", "--check")["ok"]
    evidence = sh.tb_json("verify-evidence", ended["evidence"])
    assert (evidence["status"], evidence["final"]) == ("failed", True)


def test_a_writer_taken_for_dead_is_fenced_off_by_the_abandon(sh: Shell, tmp_path: Path) -> None:
    """The process was alive after all (stalled, not dead): once the run is abandoned, its
    next write conflicts, it stops with RunEnded and records nothing more."""
    run, hold, process = _held_run(sh, tmp_path)
    try:
        ended = sh.tb_json("abandon", run, "--as", "@oncall", "--reason", "stalled", "--yes")
    finally:
        (hold / "release").touch()
        out, err = process.communicate(timeout=180)
    assert process.returncode != 0, (out, err)
    assert "RunEnded" in err and "abandoned by @oncall: stalled" in err, err
    log = _log(sh, run)
    assert log[-1]["position"] == ended["position"]  # nothing after the abandon's end
    assert [e["event_type"] for e in log].count("run_finished") == 1
    (row,) = sh.tb_json("runs")["runs"]
    assert row["status"] == "failed"


def test_an_abandon_whose_run_moved_meanwhile_records_nothing(sh: Shell, tmp_path: Path) -> None:
    """Read while the writer is held, then the writer goes on to the run's end: the abandon,
    appended at the version it read, conflicts and records nothing."""
    run, hold, process = _held_run(sh, tmp_path)
    with RunnerConfig(base=sh.cwd).open_ledger() as ledger:
        stale = stale_run(ledger, run)
        (hold / "release").touch()
        out, err = process.communicate(timeout=180)
        assert process.returncode == 0, (out, err)
        with pytest.raises(ConcurrencyError, match="moved while it was being abandoned"):
            abandon(ledger, stale, "@oncall", "host lost", redactor=Redactor(b"k" * 32))
    assert "abandoned" not in json.dumps(_log(sh, run))
    (row,) = sh.tb_json("runs")["runs"]
    assert row["status"] == "completed"


def test_abandon_refusals_exit_2_and_write_nothing(sh: Shell) -> None:
    gated = sh.start("gated")
    done = sh.start("clean")
    size = len(sh.tb_json("log")["events"])
    cases = {
        "no-such-run": "no run 'no-such-run'",
        gated: f"tracebound reject {gated} execute --as NAME",
        done: "already ended (completed)",
    }
    for run, message in cases.items():
        error = sh.tb_json("abandon", run, "--as", "@oncall", "--reason", "r", "--yes", code=2)
        assert message in error["error"]["message"], error
    assert len(sh.tb_json("log")["events"]) == size
