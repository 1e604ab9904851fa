"""The four questions an on-call engineer asks about one run, with the CLI only.

What happened, who or what caused it, what it cost, and whether the record can be proven
unaltered (docs/pipeline.md, "Answering the four questions about one run"). Each test
walks from the id one command prints to the next command that needs it, as real
`tracebound` processes on a real SQLite ledger (the Shell of test_cli_runs).
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from tests.integration.test_cli_runs import Shell, ledger_shell


@pytest.fixture
def sh(tmp_path: Path) -> Shell:
    return ledger_shell(tmp_path, "test.example/incident")


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


def test_metrics_of_one_run_by_role_with_what_was_spent(sh: Shell) -> None:
    """`metrics` could only be narrowed to a pipeline, so "what did this run cost" had no
    answer when the pipeline had run twice; and its `$/step` column was the steps' own
    estimate, with nothing saying so, beside `report cost`'s recorded spend. `--workflow
    RUN` (the name `log` and `report cost` use for a run id) folds that run alone, and the
    table shows the estimate as `est $/step` beside `spent $`, the recorded costs that
    `report cost` totals."""
    run = _blamed_run(sh)
    other = sh.start("blamed")  # the same pipeline again: --pipeline cannot tell them apart
    spend = (
        f'{{"stream_id": "costs/{run}", "workflow_id": "{run}", "payload": {{"kind": '
        '"cost_incurred", "tier": "direct", "amount_usd": "0.0213", "source": "openai", '
        '"role": "Executor"}}\n'
    )
    (sh.cwd / "spend.jsonl").write_text(spend)
    sh.tb("append", "spend.jsonl")

    one = sh.tb_json("metrics", "--workflow", run)
    by_role = one["by_role"]
    assert {role: g["outputs"] for role, g in by_role.items()} == {
        "Critic": 2,
        "Executor": 2,
        "Planner": 2,
    }
    assert (by_role["Executor"]["cost_usd"], by_role["Executor"]["cost_est_usd"]) == (
        "0.0213",
        "0.02",
    )
    assert (by_role["Planner"]["failures"], by_role["Executor"]["failures"]) == (0, 1)
    both = sh.tb_json("metrics", "--pipeline", "blamed")["by_role"]
    assert both["Planner"]["outputs"] == 3  # plan, plan~r1, and the other run's plan
    assert sh.tb_json("metrics", "--workflow", other)["overall"]["cost_usd"] == "0"
    # The same spend `report cost` totals for the run.
    cost = sh.tb_json("report", "cost", "--workflow", run)
    assert (
        one["overall"]["cost_usd"]
        == "0.0213"
        == str(sum(Decimal(r["amount_usd"]) for r in cost["rows"]))
    )
    table = sh.tb("metrics", "--workflow", run).stdout
    assert "est $/step" in table and "spent $" in table and "0.0213" in table
    assert f"by role, run {run} only" in _words(table)  # not the pipeline's figures
    missing = sh.tb_json("metrics", "--workflow", "no-such-run", code=2)["error"]
    assert missing["kind"] == "ConfigError" and "no-such-run" in missing["message"]


def test_runs_keeps_each_run_id_on_one_line_at_100_columns(sh: Shell) -> None:
    """The run id is what every next command takes, and at 100 columns `tracebound runs`
    folded it over two lines (a double-click copied half of it) to keep the start time on
    one; the time now gives way instead, date above time."""
    runs = [sh.start("gated"), sh.start("blamed")]
    sh.env["COLUMNS"] = "100"
    lines = sh.tb("runs").stdout.splitlines()
    assert all(len(line) <= 100 for line in lines), "\n".join(lines)
    for run in runs:
        assert any(run in line for line in lines), "\n".join(lines)
    started = [r["started"] for r in sh.tb_json("runs")["runs"]]
    for stamp in started:  # the date and the time are both there, maybe on two lines
        date, time = stamp[:10], stamp[11:19]
        assert any(date in line for line in lines) and any(time in line for line in lines)
