"""Long commands stopped by Ctrl-C (SIGINT) or a supervisor's SIGTERM, and the next command.

Each test runs a real `tracebound` process that is sent the signal at one chosen call
(tests/kill_at.py's ``signal_at``), then checks what a user sees: the documented exit code
(130 for Ctrl-C, 143 for SIGTERM) with a one-line message and no traceback, nothing that
was reported written lost, no temporary file or worker process left behind, and a next
command that works without repair.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.e2e.test_cli import CLI, _lines, ready_cli
from tests.kill_at import kill_at, signal_at

EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
SAID = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)"}
SIGNALS = pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])


def _one_line(stderr: str, sig: signal.Signals) -> None:
    assert "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines() == [f"error: {SAID[sig]}"], stderr


@SIGNALS
def test_prove_stopped_before_its_rename_leaves_no_temporary_file(
    tmp_path: Path, sig: signal.Signals
) -> None:
    cli = ready_cli(tmp_path, 6, checkpoint=True)
    assert cli.run("prove", "2", "-o", "p.json").returncode == 0
    before = (cli.cwd / "p.json").read_bytes()
    proc = signal_at(cli, sig, "os:replace:1", "prove", "5", "-o", "p.json")
    # Before: SIGTERM's default action ended the process there, past every `finally`: a
    # `.p.json.<random>.tmp` stayed beside the proof, and the shell saw a signal death.
    assert proc.returncode == EXIT[sig], (proc.stdout, proc.stderr)
    _one_line(proc.stderr, sig)
    assert sorted(p.name for p in cli.cwd.iterdir() if p.name != ".tracebound") == ["p.json"]
    assert (cli.cwd / "p.json").read_bytes() == before
    assert cli.run("prove", "5", "-o", "p.json").returncode == 0
    assert cli.json("verify-proof", "p.json")["position"] == 5


@SIGNALS
def test_verify_stopped_says_so_in_its_json(tmp_path: Path, sig: signal.Signals) -> None:
    cli = ready_cli(tmp_path, 5, checkpoint=True)
    proc = signal_at(cli, sig, "tracebound.ledger:_verify_span:1", "verify", "--json")
    assert proc.returncode == EXIT[sig], (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error == {"kind": "Interrupted", "message": SAID[sig], "signal": sig.name}
    assert cli.json("verify")["ok"] is True


@SIGNALS
def test_append_stopped_between_batches_says_which_events_it_wrote(
    tmp_path: Path, sig: signal.Signals
) -> None:
    cli = ready_cli(tmp_path, 3)
    # 2,500 lines are written in batches of 1,000: stopped once the second is committed.
    target = "tracebound.store.sqlite:SQLiteStore.append_batch:2:after"
    proc = signal_at(cli, sig, target, "append", "--json", stdin=_lines(2500, start=3))
    assert proc.returncode == EXIT[sig], (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    error = json.loads(proc.stdout)["error"]
    # Before: only "interrupted (Ctrl-C)": 2,000 events were in the ledger, and a user who
    # ran the same input again wrote them twice.
    assert error["kind"] == "Interrupted"
    assert (error["appended"], error["first_position"], error["last_position"]) == (2000, 4, 2003)
    assert (
        "the first 2000 event(s) were written before it (positions 4..2003)" in (error["message"])
    )
    assert cli.json("tail", "-n", "1")["events"][0]["position"] == 2003
    cli.json("checkpoint")
    assert cli.json("verify")["ok"] is True
    human = signal_at(cli, sig, target, "append", stdin=_lines(2500, start=3))
    assert human.returncode == EXIT[sig]
    assert "Traceback" not in human.stderr
    assert "were written before it (positions 2004..4003)" in human.stderr


def _rebuild_ready(tmp_path: Path) -> CLI:
    cli = ready_cli(tmp_path, 400)
    assert cli.json("project", "rebuild")["applied"] == 400
    return cli


def _caught_up_again(cli: CLI) -> None:
    assert cli.json("project", "run")["head"] == 400
    status = cli.json("project", "status")["projections"]
    assert {(s["position"], s["lag"]) for s in status} == {(400, 0)}
    assert cli.json("project", "rebuild", "--workers", "2")["applied"] == 400


# `--batch 10`: 40 batches per process, so the worker is still at work when the signal
# comes at the parent's second batch.
REBUILD = ("project", "rebuild", "--workers", "2", "--batch", "10")
AT_SECOND_BATCH = "tracebound.projections.runner:ProjectionRunner._batch:2"


def test_parallel_rebuild_stopped_by_ctrl_c_ends_with_its_workers(tmp_path: Path) -> None:
    cli = _rebuild_ready(tmp_path)
    # As a terminal sends it: to the whole process group, the workers included. The
    # harness returns once every process holding its output pipes has ended: no orphan.
    proc = signal_at(cli, signal.SIGINT, AT_SECOND_BATCH, *REBUILD, group=True)
    # Before: the worker died of the KeyboardInterrupt (a traceback), its task was lost,
    # and the parent waited for its result for ever.
    assert proc.returncode == 130, (proc.stdout, proc.stderr)
    _one_line(proc.stderr, signal.SIGINT)
    _caught_up_again(cli)


def test_parallel_rebuild_sent_sigterm_stops_its_workers(tmp_path: Path) -> None:
    cli = _rebuild_ready(tmp_path)
    proc = signal_at(cli, signal.SIGTERM, AT_SECOND_BATCH, *REBUILD)
    # Before: the parent vanished; its worker went on to the end of its share, then failed
    # to hand in its result: a BrokenPipeError traceback from an orphan.
    assert proc.returncode == 143, (proc.stdout, proc.stderr)
    _one_line(proc.stderr, signal.SIGTERM)
    _caught_up_again(cli)


def test_parallel_rebuild_whose_parent_is_killed_has_its_workers_end_quietly(
    tmp_path: Path,
) -> None:
    cli = _rebuild_ready(tmp_path)
    proc = kill_at(cli, "multiprocessing.pool:ApplyResult.get:1", *REBUILD)
    assert proc.returncode == -signal.SIGKILL, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    _caught_up_again(cli)
