"""`tracebound export evidence RUN`: a run's evidence file made on request, months later.

Real processes on a real SQLite ledger: a pipeline run (tests/integration/cli_runs_pipelines.py)
writes its file when it ends; spend is recorded under costs/RUN after that; the owner then
exports the run's evidence for an auditor, which `verify-evidence` and the independent
verifier (tests/independent/verify_evidence.py) accept, with that spend in it once signed.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.independent import verify_evidence as iv
from tests.integration.test_cli_runs import HERE, Shell, ledger_shell
from tests.kill_at import kill_at

SPEND = "0.0213"
PIPELINES = HERE / "cli_runs_pipelines.py"


@pytest.fixture
def sh(tmp_path: Path) -> Shell:
    return ledger_shell(tmp_path, "test.example/export-evidence")


def _spend(sh: Shell, run: str, amount: str = SPEND) -> None:
    """A billing import of the run's spend, after the run ended."""
    line = {"stream_id": f"costs/{run}", "workflow_id": run,
            "payload": {"kind": "cost_incurred", "tier": "direct", "amount_usd": amount,
                        "source": "openai", "role": "Executor"}}  # fmt: skip
    (sh.cwd / "cost.jsonl").write_text(json.dumps(line) + "\n")
    sh.tb("append", "cost.jsonl")


def _independent(sh: Shell, path: Path) -> iv.EvidenceSummary:
    key = iv.Key.parse(sh.tb_json("keys", "show")["verifier_key"])
    return iv.verify_evidence(path.read_bytes(), key, require_head=True, require_spend=True)


def _error(out: dict[str, Any]) -> str:
    message: str = out["error"]["message"]
    return message


def test_a_finished_run_exports_a_file_both_verifiers_accept(sh: Shell) -> None:
    run = sh.start("clean")
    proc = sh.tb("export", "evidence", run)
    path = sh.cwd / f"{run}.evidence.json"
    text = " ".join(proc.stdout.split())
    assert f"Wrote the evidence of run {run} to {path.name}" in text
    assert "status: completed" in text and "0 USD in 0 cost record(s)" in text
    checked = sh.tb_json("verify-evidence", path.name, "--require-head", "--require-spend")
    assert (checked["run_id"], checked["status"], checked["final"]) == (run, "completed", True)
    assert checked["spend"] == {**checked["spend"], "proven": True, "total_usd": "0"}
    summary = _independent(sh, path)
    assert (summary.run_id, summary.status, summary.signed) == (run, "completed", True)
    # The same records as the runner's own file, which nothing since has made stale.
    runner = json.loads((sh.cwd / "artifacts" / "agent-runs" / f"{run}.json").read_text())
    assert json.loads(path.read_text())["events"] == runner["events"]


def test_spend_recorded_after_the_run_is_refused_until_signed_then_proven(sh: Shell) -> None:
    run = sh.start("clean")
    _spend(sh, run)
    out = sh.tb_json("export", "evidence", run, code=2)
    assert "1 spend record(s) of costs/" in _error(out)
    assert "run `tracebound checkpoint` first, or pass --checkpoint" in _error(out)
    assert not (sh.cwd / f"{run}.evidence.json").exists()

    sh.tb("checkpoint")
    out = sh.tb_json("export", "evidence", run, "-o", "e.json")
    assert (out["spend"]["total_usd"], out["spend"]["records"]) == (SPEND, 1)
    assert out["checkpoint_signed"] is False and out["out"] == "e.json"
    assert out["run_head"]["stream_version"] == out["events"]
    checked = sh.tb_json("verify-evidence", "e.json", "--require-spend")
    assert checked["spend"]["total_usd"] == SPEND
    # The runner's file, written when the run ended, still says what it did then: nothing.
    runner = sh.tb_json("verify-evidence", f"artifacts/agent-runs/{run}.json")
    assert runner["spend"]["total_usd"] == "0"

    # More spend; --checkpoint signs one first and the file holds both records.
    _spend(sh, run, "0.5")
    out = sh.tb_json("export", "evidence", run, "-o", "later.json", "--checkpoint")
    assert out["checkpoint_signed"] is True
    assert (out["spend"]["total_usd"], out["spend"]["records"]) == ("0.5213", 2)
    later = _independent(sh, sh.cwd / "later.json").spend
    assert later is not None and (later["total_usd"], later["records"]) == ("0.5213", 2)


def test_the_independent_verifier_counts_the_same_spend(sh: Shell) -> None:
    run = sh.start("clean")
    _spend(sh, run)
    sh.tb("export", "evidence", run, "-o", "e.json", "--checkpoint")
    spend = _independent(sh, sh.cwd / "e.json").spend
    assert spend is not None
    assert (spend["total_usd"], spend["records"]) == (SPEND, 1)


def test_refusals_exit_2_and_write_nothing(sh: Shell) -> None:
    run = sh.start("clean")
    unknown = sh.tb_json("export", "evidence", "no-such-run", code=2)
    assert "no run 'no-such-run'" in _error(unknown) and "`tracebound runs`" in _error(unknown)
    assert not list(sh.cwd.glob("*.evidence.json"))

    kept = sh.cwd / "e.json"
    kept.write_text("an auditor's earlier file\n")
    exists = sh.tb_json("export", "evidence", run, "-o", "e.json", code=2)
    assert "e.json exists; pass --force" in _error(exists)
    assert kept.read_text() == "an auditor's earlier file\n"
    sh.tb_json("export", "evidence", run, "-o", "e.json", "--force")
    assert json.loads(kept.read_text())["run_id"] == run

    inside = sh.tb_json("export", "evidence", run, "-o", ".tracebound/e.json", code=2)
    assert "inside the store directory" in _error(inside)
    folder = sh.tb_json("export", "evidence", run, "-o", "nowhere/e.json", code=2)
    assert "there is no folder nowhere" in _error(folder)

    nokey = sh.tb_json("export", "evidence", run, "--key", "absent.key", code=2)
    assert nokey["error"]["kind"] == "SigningKeyError" and "absent.key" in _error(nokey)
    proc = sh.tb("export", "evidence", "no-such-run", code=2)
    assert "Traceback" not in proc.stderr and "tracebound runs" in proc.stderr


def test_a_run_signed_before_a_key_rotation_exports_under_the_new_key(sh: Shell) -> None:
    run = sh.start("clean")
    old = sh.tb_json("keys", "show")["verifier_key"]
    sh.tb("keys", "rotate", "--by", "alice", "--reason", "yearly")
    new = sh.tb_json("keys", "show")["verifier_key"]
    assert new != old
    out = sh.tb_json("export", "evidence", run, "-o", "e.json")
    assert out["status"] == "completed" and out["run_head"] is not None
    checked = sh.tb_json("verify-evidence", "e.json", "--verifier-key", new, "--require-head")
    assert checked["ok"] is True
    summary = iv.verify_evidence(
        (sh.cwd / "e.json").read_bytes(), iv.Key.parse(new), require_head=True, require_spend=True
    )
    assert summary.run_id == run
    # The runner's file, signed by the old key, still verifies with it; the export does not.
    sh.tb_json("verify-evidence", f"artifacts/agent-runs/{run}.json", "--verifier-key", old)
    sh.tb_json("verify-evidence", "e.json", "--verifier-key", old, code=1)


def test_a_run_at_its_gate_exports_not_final_and_one_approved_since_waits_for_resume(
    sh: Shell,
) -> None:
    run = sh.start("gated")
    proc = sh.tb("export", "evidence", run)
    assert "status: gated (not final: the run may go on)" in " ".join(proc.stdout.split())
    checked = sh.tb_json("verify-evidence", f"{run}.evidence.json", "--require-head")
    assert (checked["status"], checked["final"]) == ("gated", False)

    # The approval is recorded after the run's gated finish, and after its checkpoint: the
    # format has no status for "approved, not resumed", so that is what the refusal says,
    # before any checkpoint is signed (a file built anyway failed its own check, exit 1).
    sh.tb("approve", run, "execute", "--as", "@alice")
    size = sh.tb_json("verify")["checkpoint_size"]
    out = sh.tb_json("export", "evidence", run, "-o", "e.json", "--checkpoint", code=2)
    assert "then recorded approval_recorded" in _error(out)
    assert "run `tracebound resume` first" in _error(out)
    assert sh.tb_json("verify")["checkpoint_size"] == size and not (sh.cwd / "e.json").exists()

    sh.tb("resume", run)
    _spend(sh, run)
    out = sh.tb_json("export", "evidence", run, "-o", "e.json", code=2)
    assert "1 spend record(s)" in _error(out) and "record(s) of the run" not in _error(out)
    out = sh.tb_json("export", "evidence", run, "-o", "e.json", "--checkpoint")
    assert (out["status"], out["final"], out["spend"]["total_usd"]) == ("completed", True, SPEND)
    assert _independent(sh, sh.cwd / "e.json").status == "completed"


def test_a_run_recorded_before_the_ledger_had_a_key_is_named_then_signed(tmp_path: Path) -> None:
    sh = ledger_shell(tmp_path, "test.example/export-evidence")
    keys = Path(sh.env["HOME"]) / ".config" / "tracebound" / "keys"
    for key in keys.iterdir():  # as if `keys init` had not been run yet
        key.rename(tmp_path / key.name)
    run = sh.start("clean")  # the runner's file is unsigned: no key, no checkpoint
    for key in tmp_path.glob("tracebound.*"):
        key.rename(keys / key.name)
    unsigned = sh.tb_json("verify-evidence", f"artifacts/agent-runs/{run}.json", code=3)
    events = unsigned["events"]
    out = sh.tb_json("export", "evidence", run, code=2)
    assert f"{events} record(s) of the run of {run!r} lie after the newest" in _error(out)
    out = sh.tb_json("export", "evidence", run, "--checkpoint")
    assert out["checkpoint_signed"] is True and out["events"] == events
    assert _independent(sh, sh.cwd / f"{run}.evidence.json").signed is True


def test_a_run_during_an_unfinished_rotation_is_refused_before_it_starts(sh: Shell) -> None:
    """`keys rotate` killed after its event, before its hand-over: no checkpoint can be
    signed until it is finished. Before, `resume` ran the approved step's apply hook and
    ended the run completed, then exited 2 with the rotation's message alone and no
    evidence file (exit 2: "not resumable"); a new run likewise ran every step, then raised
    out of `Runner.run`. Now both are refused before anything runs, and go on once the
    rotation is finished."""
    run = sh.start("gated")
    sh.tb("approve", run, "execute", "--as", "@alice")
    killed = kill_at(sh, "tracebound.ledger:Ledger._sign:1", "keys", "rotate", "--by", "alice")
    assert killed.returncode == -signal.SIGKILL, (killed.stdout, killed.stderr)
    out = sh.tb_json("resume", run, code=2)
    assert out["error"]["kind"] == "KeyRotationRefused" and "unfinished" in _error(out)
    assert "nothing ran" in _error(out)
    (row,) = sh.tb_json("runs")["runs"]
    assert row["status"] == "gated"
    started = sh.run(str(PIPELINES), "clean", "", code=None)
    assert started.returncode != 0 and "KeyRotationRefused" in started.stderr
    assert len(sh.tb_json("runs")["runs"]) == 1  # the new run was not started
    sh.tb("keys", "rotate", "--by", "alice")
    done = sh.tb_json("resume", run)
    assert done["status"] == "completed" and done["evidence"] is not None
    sh.tb_json("verify-evidence", done["evidence"], "--require-head")
