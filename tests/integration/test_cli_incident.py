"""The four questions an on-call engineer asks about one run, with the CLI only.

What happened, who or what caused it, what it cost, and whether the record can be proven
unaltered (docs/pipeline.md, "Answering the four questions about one run"). Each test
walks from the id one command prints to the next command that needs it, as real
`tracebound` processes on a real SQLite ledger (the Shell of test_cli_runs).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_cli_runs import CODEOWNERS, POLICY, Shell


@pytest.fixture
def sh(tmp_path: Path) -> Shell:
    shell = Shell(tmp_path)
    shell.tb("init", "--origin", "test.example/incident")
    shell.tb("keys", "init")
    (shell.cwd / "tracebound-policy.toml").write_text(POLICY)
    (shell.cwd / "CODEOWNERS").write_text(CODEOWNERS)
    return shell


def _blamed_run(sh: Shell) -> str:
    """A run whose Critic blames the plan: approved at execute, repaired, approved again."""
    run = sh.start("blamed")
    sh.tb("approve", run, "execute", "--as", "@alice")
    assert sh.tb_json("resume", run, code=3)["status"] == "gated"  # at execute~r1
    sh.tb("approve", run, "execute~r1", "--as", "@alice")
    assert sh.tb_json("resume", run)["status"] == "completed"
    return run


def _words(text: str) -> str:
    return " ".join(text.split())


def test_replay_says_who_was_blamed_and_who_approved_with_positions_to_prove(
    sh: Shell,
) -> None:
    """`replay` printed the steps only: the blame (which step failed, which Critic found
    it, which step and role it was traced to, and why) and the approvals were in its
    `--json` alone, without the reason or the roles, and an approval had no position to
    hand to `tracebound prove`."""
    run = _blamed_run(sh)
    replayed = sh.tb_json("replay", run)
    (blame,) = replayed["blame"]
    assert {k: blame[k] for k in blame if k != "position"} == {
        "failed": "execute",
        "failed_role": "Executor",
        "detected_by": "review",
        "origin": "plan",
        "origin_role": "Planner",
        "reason": "the pin the plan chose is still vulnerable",
        "harmful": True,
        "abandoned_by": None,
    }
    approvals = replayed["approvals"]
    assert [(a["step_id"], a["approver"]) for a in approvals] == [
        ("execute", "@alice"),
        ("execute~r1", "@alice"),
    ]
    text = _words(sh.tb("replay", run).stdout)
    assert (
        f"blame (position {blame['position']}): execute (Executor) failed (harmful), found by "
        "review; "
        "origin plan (Planner): the pin the plan chose is still vulnerable"
    ) in text
    for a in approvals:
        stamp = a["timestamp"].replace("T", " ")[:19]
        assert f"approved {a['step_id']} as @alice at {stamp} UTC (position {a['position']})" in (
            text
        )
        # The position is the one id `prove` needs: the record there is the approval.
        proof = sh.tb_json("prove", str(a["position"]))
        assert proof["stream_id"] == f"run/{run}" and proof["position"] == a["position"]
    assert sh.tb_json("prove", str(blame["position"]))["position"] == blame["position"]
