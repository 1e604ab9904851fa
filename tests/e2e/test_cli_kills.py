"""Commands that write files, killed (SIGKILL) at the worst moment, and the next command.

Each test runs a real `tracebound` process that kills itself at one chosen call
(tests/kill_at.py), then checks what a later command makes of what it left: the old file
whole or the new one, never half of either, and a next run that succeeds or says exactly
what to do.
"""

from __future__ import annotations

import signal
from pathlib import Path

from tests.e2e.test_cli import ready_cli
from tests.kill_at import kill_at

KILLED = -signal.SIGKILL


def test_prove_killed_before_its_output_is_renamed_keeps_the_previous_proof(
    tmp_path: Path,
) -> None:
    cli = ready_cli(tmp_path, 6, checkpoint=True)
    assert cli.run("prove", "2", "-o", "p.json").returncode == 0
    before = (cli.cwd / "p.json").read_bytes()
    proc = kill_at(cli, "os:replace:1", "prove", "5", "-o", "p.json")
    # Before: written in place (truncate, then write), so there was no rename to kill at,
    # and a kill during the write left a truncated proof under the name of a good one.
    assert proc.returncode == KILLED, (proc.stdout, proc.stderr)
    assert (cli.cwd / "p.json").read_bytes() == before
    assert cli.json("verify-proof", "p.json")["position"] == 2
    assert cli.run("prove", "5", "-o", "p.json").returncode == 0
    assert cli.json("verify-proof", "p.json")["position"] == 5
