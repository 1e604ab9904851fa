"""The run commands as a user runs them: real `python -m tracebound` processes, HOME in tmp.

A gated run is started by a small pipeline module (tests/integration/cli_runs_pipelines.py,
put on PYTHONPATH like a user's own code), approved by a CODEOWNER, resumed by another
process, measured, replayed and exported as evidence that is then tampered with. The
RunnerConfig defaults those commands rely on are tested here too, and docs/pipeline.md is
executed block by block.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tracebound.errors import ConfigError, PolicyUnusable, SigningKeyError
from tracebound.pipeline.config import RunnerConfig, load_redaction_key

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SECRET = "ghp_" + "Q7" * 18  # GitHub-token-shaped, fake
POLICY = """version = 1
[gate]
sensitive_paths = ["requirements*.txt"]
[scopes]
allowed = ["read", "write"]
Executor = ["read"]
after_approval = { Executor = ["read", "write"] }
"""
CODEOWNERS = "*  @platform\nrequirements.txt  @alice\n"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env["HOME"] = str(tmp_path / "home")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT / "src")])
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "200"
    return env


class Shell:
    """`tracebound` and the pipeline module, run as processes in one working directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.cwd = tmp_path / "work"
        self.cwd.mkdir()
        self.env = _env(tmp_path)

    def run(self, *args: str, code: int | None = 0) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, *args], cwd=self.cwd, env=self.env, capture_output=True,
            text=True, timeout=180, check=False,
        )  # fmt: skip
        if code is not None:
            assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
        return proc

    def tb(self, *args: str, code: int | None = 0) -> subprocess.CompletedProcess[str]:
        return self.run("-m", "tracebound", *args, code=code)

    def tb_json(self, *args: str, code: int | None = 0) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.tb(*args, "--json", code=code).stdout)
        return out

    def start(self, pipeline: str, secret: str = "") -> str:
        proc = self.run(str(HERE / "cli_runs_pipelines.py"), pipeline, secret)
        run_id: str = json.loads(proc.stdout.strip().splitlines()[-1])["run_id"]
        return run_id


def ledger_shell(tmp_path: Path, origin: str) -> Shell:
    """A shell in a folder with a ledger of ``origin``, a key, the policy and CODEOWNERS."""
    shell = Shell(tmp_path)
    shell.tb("init", "--origin", origin)
    shell.tb("keys", "init")
    (shell.cwd / "tracebound-policy.toml").write_text(POLICY)
    (shell.cwd / "CODEOWNERS").write_text(CODEOWNERS)
    return shell


@pytest.fixture
def sh(tmp_path: Path) -> Shell:
    return ledger_shell(tmp_path, "test.example/cli-runs")


def test_gated_run_approve_resume_replay_and_evidence(sh: Shell) -> None:
    run = sh.start("gated", SECRET)
    (row,) = sh.tb_json("runs")["runs"]
    assert (row["run_id"], row["status"], row["waiting_at"], row["owners"]) == (
        run,
        "gated",
        "execute",
        ["@alice"],
    )

    refused = sh.tb_json("approve", run, "execute", "--as", "@mallory", code=2)
    assert refused["error"]["kind"] == "NotAnOwner"
    assert "requirements.txt" in refused["error"]["message"]
    not_gated = sh.tb_json("approve", run, "plan", "--as", "@alice", code=2)
    assert "not gated" in not_gated["error"]["message"]
    # Resuming before anyone decided leaves the run waiting (exit 3: incomplete).
    assert sh.tb_json("resume", run, code=3)["status"] == "gated"

    where = ("--store", ".tracebound", "--codeowners", "CODEOWNERS")
    approval = sh.tb_json("approve", run, "execute", "--as", "@alice", *where)
    assert (approval["approver"], approval["decision"]) == ("@alice", "approved")
    assert approval["timestamp"].endswith("Z")  # the hashed record's form
    assert sh.tb_json("approve", run, "execute", "--as", "@alice", code=2)["error"]

    # The next command it names, pasted as is, continues the run in the same store.
    assert approval["next"] == f"tracebound resume {run} {' '.join(where)}"
    done = sh.tb_json(*shlex.split(approval["next"])[1:])
    assert (done["status"], done["evidence"]) == ("completed", f"artifacts/agent-runs/{run}.json")
    assert [s["status"] for s in done["steps"]][-2:] == ["success", "success"]
    assert sh.tb_json("runs")["runs"][0]["status"] == "completed"

    replayed = sh.tb_json("replay", run)
    assert replayed["ok"] and replayed["chain"] == "ok"
    assert [s["step_id"] for s in replayed["steps"]] == ["plan", "execute", "execute", "review"]
    span = replayed["positions"]
    human = sh.tb("replay", run).stdout
    assert f"log positions {span['from']}..{span['to']} contiguous" in " ".join(human.split())
    assert replayed["approvals"][0]["approver"] == "@alice"
    rerun = sh.tb_json("replay", run, "--rerun")
    assert rerun["rerun"]["identical"] and rerun["rerun"]["divergence"] is None

    evidence = sh.cwd / "artifacts" / "agent-runs" / f"{run}.json"
    assert SECRET not in evidence.read_text()
    checked = sh.tb_json("verify-evidence", str(evidence))
    assert checked["ok"] and checked["signed"] and checked["run_id"] == run
    assert "OK" in sh.tb("verify-evidence", str(evidence)).stdout

    tampered = sh.cwd / "tampered.json"
    tampered.write_text(evidence.read_text().replace('"status": "completed"', '"status": "failed"'))
    bad = sh.tb_json("verify-evidence", str(tampered), code=1)
    assert bad["error"]["kind"] == "EvidenceInvalid" and "integrity" in bad["error"]["message"]


def test_the_next_command_of_a_run_without_a_pipeline_reference_asks_for_one(sh: Shell) -> None:
    """`approve` printed `Next: tracebound resume RUN` for a run whose pipeline recorded no
    `ref`; pasted, it failed ("recorded no pipeline reference")."""
    run = sh.start("unreferenced")
    approval = sh.tb_json("approve", run, "execute", "--as", "@alice")
    assert approval["next"] == f"tracebound resume {run} --pipeline MODULE:ATTR"
    said = " ".join(sh.tb("resume", run, code=2).stderr.split())
    assert "recorded no pipeline reference" in said
    done = sh.tb_json("resume", run, "--pipeline", "cli_runs_pipelines:unreferenced")
    assert done["status"] == "completed"


def test_inspect_of_a_pipeline_run_id_names_the_runs_stream(sh: Shell) -> None:
    """`tracebound runs` lists run ids, and `inspect RUN-ID` said only "no stream": a
    pipeline run's events are the stream run/RUN-ID (the README's RUN-ID is a remediation
    run's)."""
    run = sh.start("gated")
    error = sh.tb_json("inspect", run, code=2)["error"]
    assert f"tracebound inspect run/{run}" in error["message"]
    assert sh.tb_json("inspect", f"run/{run}")["ok"]
    other = sh.tb_json("inspect", "nothing-here", code=2)["error"]["message"]
    assert other == "no stream 'nothing-here' in this ledger"


def test_a_run_id_copied_from_a_stream_name_is_named_back(sh: Shell) -> None:
    """`log`, `inspect` and `verify-evidence` show a run's events under its stream,
    run/RUN (and its spend under costs/RUN); pasted into a run command, that said only
    "no run 'run/RUN' in this ledger", which reads like the run is not there. Each run
    command now names the run id to use; a plain typo still points at `tracebound runs`."""
    run = sh.start("gated")
    for stream in (f"run/{run}", f"costs/{run}"):
        for args in (
            ("replay", stream),
            ("approve", stream, "execute", "--as", "@alice"),
            ("reject", stream, "execute", "--as", "@alice"),
            ("resume", stream),
            ("abandon", stream, "--as", "@oncall", "--reason", "killed"),
            ("metrics", "--workflow", stream),
            ("export", "evidence", stream),
        ):
            message = sh.tb_json(*args, code=2)["error"]["message"]
            assert f"no run {stream!r} in this ledger" in message, (args, message)
            assert f"the run id is {run}" in message, (args, message)
    for args in (("replay", "nope"), ("approve", "nope", "execute", "--as", "@alice")):
        message = sh.tb_json(*args, code=2)["error"]["message"]
        assert message == "no run 'nope' in this ledger (`tracebound runs` lists them)", args
    assert sh.tb_json("runs")["runs"][0]["status"] == "gated"  # nothing was written


def test_log_of_a_workflow_or_stream_the_ledger_never_had_says_so(sh: Shell) -> None:
    """`log --workflow RUN` with a mistyped (or stream-shaped) id printed "0 event(s)" and
    exited 0, as if the run had done nothing, where `report trail`, `metrics` and `inspect`
    refuse a name the ledger never had. It now exits 2 saying so, naming the right
    spelling when the name is a run's stream or a run id given as a stream."""
    run = sh.start("gated")
    assert sh.tb_json("log", "--workflow", run)["events"]
    assert sh.tb_json("log", "--stream", f"run/{run}")["events"]
    assert sh.tb_json("log", "--type", "merge_outcome")["events"] == []  # none: a fair answer
    assert sh.tb_json("log", "--workflow", run, "--start", "999")["events"] == []  # later: none

    typo = sh.tb_json("log", "--workflow", run[:-1], code=2)["error"]
    assert typo["message"] == (
        f"no event in this ledger has workflow {run[:-1]!r} (`tracebound runs` lists run ids)"
    )
    as_stream = sh.tb_json("log", "--workflow", f"run/{run}", code=2)["error"]["message"]
    assert f"--workflow {run}" in as_stream and f"--stream run/{run}" in as_stream
    as_run = sh.tb_json("log", "--stream", run, code=2)["error"]["message"]
    assert as_run.startswith(f"no stream {run!r} in this ledger")
    assert f"--stream run/{run}" in as_run
    said = sh.tb("log", "--stream", "nothing-here", code=2).stderr
    assert "no stream 'nothing-here' in this ledger" in said


def test_runs_of_a_pipeline_the_ledger_never_had_says_so(sh: Shell) -> None:
    """`runs --pipeline TYPO` printed an empty table and exited 0, as if the pipeline had
    never run, where `metrics --pipeline TYPO` refuses it (exit 2). It is refused too, naming
    the pipelines the ledger has; a known pipeline with no run of --status is an empty
    list."""
    sh.start("gated")
    name = sh.tb_json("runs")["runs"][0]["pipeline"]
    assert len(sh.tb_json("runs", "--pipeline", name)["runs"]) == 1
    assert sh.tb_json("runs", "--pipeline", name, "--status", "completed")["runs"] == []
    typo = sh.tb_json("runs", "--pipeline", name + "x", code=2)["error"]["message"]
    assert typo == (f"no runs of pipeline {name + 'x'!r} in this ledger (its pipelines: {name})")
    assert sh.tb_json("metrics", "--pipeline", name + "x", code=2)["error"]
    said = sh.tb("runs", "--pipeline", name + "x", code=2).stderr
    assert f"no runs of pipeline {name + 'x'!r}" in said


def test_reject_ends_the_run(sh: Shell) -> None:
    run = sh.start("gated")
    assert sh.tb_json("reject", run, "execute", "--as", "@platform", code=2)["error"]
    rejected = sh.tb_json("reject", run, "execute", "--as", "@alice")
    assert rejected["decision"] == "rejected"
    ended = sh.tb_json("resume", run, code=1)
    assert (ended["status"], ended["failed_step"]) == ("rejected", "execute")


def test_a_gate_with_a_path_and_a_pathless_reason_needs_a_default_owner_too(sh: Shell) -> None:
    run = sh.start("mixed")  # requirements.txt, and an `exec` scope the policy does not allow
    refused = sh.tb_json("approve", run, "execute", "--as", "@alice", code=2)
    assert refused["error"]["kind"] == "NotAnOwner"  # she owns the path, not the repository
    assert "default owners" in refused["error"]["message"]
    assert sh.tb_json("approve", run, "execute", "--as", "@platform", code=2)["error"]["kind"] == (
        "NotAnOwner"  # the repository's owner, but not requirements.txt's
    )
    assert sh.tb_json("reject", run, "execute", "--as", "@alice", code=2)["error"]
    (row,) = sh.tb_json("runs")["runs"]
    assert (row["waiting_at"], row["owners"]) == ("execute", [])  # nobody may, as it stands
    assert "no owner" in sh.tb("runs").stdout
    (sh.cwd / "CODEOWNERS").write_text("*  @platform\nrequirements.txt  @alice @platform\n")
    approved = sh.tb_json("approve", run, "execute", "--as", "@platform")
    assert (approved["decision"], approved["paths"]) == ("approved", ["requirements.txt"])


def held_resume(
    sh: Shell, tmp_path: Path, pipeline: str, command: Callable[[str], list[str]], marker: str
) -> tuple[str, Path, dict[str, str], subprocess.Popen[str]]:
    """A run of ``pipeline``, its first gate approved, and ``python <command(run)>`` resuming
    it, held once it has written ``<hold>/<marker>``: the run, the hold folder, the
    environment that holds, and the process."""
    hold = tmp_path / "hold"
    hold.mkdir()
    env = {**sh.env, "TB_HOLD_DIR": str(hold)}
    run = sh.start(pipeline)
    sh.tb_json("approve", run, "execute", "--as", "@alice")
    process = subprocess.Popen(
        [sys.executable, *command(run)], cwd=sh.cwd, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    while not (hold / marker).exists() and process.poll() is None:
        time.sleep(0.01)  # polling, not a timing assertion: wait for the process to get there
    assert (hold / marker).exists(), process.communicate()
    return run, hold, env, process


def resume_held_in_its_hook(
    sh: Shell, tmp_path: Path
) -> tuple[str, Path, dict[str, str], subprocess.Popen[str]]:
    """A run of the `held` pipeline, approved, and a `resume --json` process of it that is
    inside the apply hook, held there until `<hold>/release` exists."""
    return held_resume(
        sh, tmp_path, "held", lambda run: ["-m", "tracebound", "resume", run, "--json"], "inside"
    )


def test_two_resumes_at_once_apply_once_and_the_other_exits_typed(
    sh: Shell, tmp_path: Path
) -> None:
    run, hold, env, first = resume_held_in_its_hook(sh, tmp_path)
    resume = [sys.executable, "-m", "tracebound", "resume", run]
    try:
        second = subprocess.run(
            [*resume, "--json"], cwd=sh.cwd, env=env, capture_output=True, text=True,
            timeout=180, check=False,
        )  # fmt: skip
        assert second.returncode == 2, (second.stdout, second.stderr)
        error = json.loads(second.stdout)["error"]
        assert error["kind"] == "RunAlreadyResumed"
        assert run in error["message"] and "nothing was run" in error["message"]
        third = subprocess.run(
            resume, cwd=sh.cwd, env=env, capture_output=True, text=True, timeout=180, check=False
        )
        assert third.returncode == 2 and "already resumed" in third.stderr, third.stderr
        (row,) = sh.tb_json("runs")["runs"]  # claimed: running, waiting for nobody
        # (its reason was the gate's "waiting for approval", which no longer held)
        assert (row["status"], row["waiting_at"], row["reason"]) == ("running", None, None)
    finally:
        (hold / "release").touch()
        out, err = first.communicate(timeout=180)
    assert first.returncode == 0, (out, err)
    assert json.loads(out)["status"] == "completed"
    assert len(list(hold.glob("applied-*"))) == 1  # the apply hook ran in one process only
    replayed = sh.tb_json("replay", run)
    assert replayed["ok"] and [s["step_id"] for s in replayed["steps"]][-2:] == [
        "execute",
        "review",
    ]


def test_a_resume_killed_inside_the_apply_hook_is_taken_over_by_name(
    sh: Shell, tmp_path: Path
) -> None:
    run, hold, env, first = resume_held_in_its_hook(sh, tmp_path)
    resume = [sys.executable, "-m", "tracebound", "resume", run, "--json"]
    first.kill()  # SIGKILL inside the hook: the claim is recorded, the run never finishes
    first.communicate(timeout=180)

    def again(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*resume, *extra], cwd=sh.cwd, env=env, capture_output=True, text=True,
            timeout=180, check=False,
        )  # fmt: skip

    stuck = again()
    assert stuck.returncode == 2, (stuck.stdout, stuck.stderr)
    assert "--take-over" in json.loads(stuck.stdout)["error"]["message"]
    taken = again("--take-over", "--as", "@oncall")
    assert taken.returncode == 0, (taken.stdout, taken.stderr)
    assert json.loads(taken.stdout)["status"] == "completed"
    assert len(list(hold.glob("applied-*"))) == 2  # the killed process's, and the take-over's
    done = again("--take-over", "--as", "@oncall")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "not waiting at a gate" in json.loads(done.stdout)["error"]["message"]
    log = sh.tb_json("log", "--stream", f"run/{run}")["events"]
    claims = [e["payload"].get("taken_over_by") for e in log if e["event_type"] == "run_resumed"]
    assert claims == [None, "@oncall"]


def test_an_approved_gate_whose_resume_was_killed_before_its_artifact_is_ended_by_a_take_over(
    sh: Shell, tmp_path: Path
) -> None:
    """The resume of the first gate reaches a second one (deploy) and is killed with SIGKILL
    between its gate_requested and the gated step's record; an owner approves deploy
    meanwhile (approve reads the gate, not the artifact). The approval covers no artifact, a
    gate is decided once, and only a take-over continues a gate its process never settled:
    the take-over ends the run, and nothing nobody saw is applied."""
    run, hold, _, process = held_resume(
        sh,
        tmp_path,
        "two_gates",
        lambda run: [str(HERE / "cli_runs_pipelines.py"), "resume-held-at-gate", run],
        "at-gate",  # written right after the gate's record
    )
    process.kill()  # SIGKILL after gate_requested(deploy), before the gated step_recorded
    out, err = process.communicate(timeout=180)
    assert (hold / "at-gate").exists(), (out, err)
    log = sh.tb_json("log", "--stream", f"run/{run}")["events"]
    assert (log[-1]["event_type"], log[-1]["payload"]["step_id"]) == ("gate_requested", "deploy")

    sh.tb_json("approve", run, "deploy", "--as", "@platform")
    refused = sh.tb_json("reject", run, "deploy", "--as", "@platform", code=2)["error"]
    assert "already approved" in refused["message"]
    assert "still writing, or died" in sh.tb_json("resume", run, code=2)["error"]["message"]
    ended = sh.tb_json("resume", run, "--take-over", "--as", "@oncall", code=1)
    assert (ended["status"], ended["failed_step"]) == ("failed", "deploy"), ended
    assert "never recorded" in ended["reason"] and "nothing was applied" in ended["reason"]
    assert not list(hold.glob("deployed-*"))  # deploy's artifact was never applied
    (row,) = sh.tb_json("runs")["runs"]
    assert (row["status"], row["waiting_at"]) == ("failed", None)
    log = sh.tb_json("log", "--stream", f"run/{run}")["events"]
    assert [(e["event_type"], e["payload"].get("taken_over_by")) for e in log[-2:]] == [
        ("run_resumed", "@oncall"),
        ("run_finished", None),
    ]
    again = sh.tb_json("resume", run, "--take-over", "--as", "@oncall", code=2)["error"]
    assert "not waiting at a gate" in again["message"]
    assert sh.tb_json("replay", run)["ok"]


def test_take_over_is_refused_without_a_claim_or_a_name_and_writes_nothing(sh: Shell) -> None:
    run = sh.start("gated")
    sh.tb_json("approve", run, "execute", "--as", "@alice")
    events = len(sh.tb_json("log", "--stream", f"run/{run}")["events"])
    refusals = {
        ("--take-over", "--as", "@oncall"): "resume it without a take-over",
        ("--take-over",): "--take-over needs --as NAME",
        ("--as", "@oncall"): "goes with --take-over",
        ("--take-over", "--as", " "): "names the human",
    }
    for args, why in refusals.items():
        error = sh.tb_json("resume", run, *args, code=2)["error"]
        assert (error["kind"], why in error["message"]) == ("ConfigError", True), (args, error)
        plain = sh.tb("resume", run, *args, code=2)
        assert why in " ".join((plain.stdout + plain.stderr).split()), (args, plain)
    assert len(sh.tb_json("log", "--stream", f"run/{run}")["events"]) == events
    help_text = " ".join(sh.tb("resume", "--help").stdout.split())
    assert "--take-over" in help_text and "known to be dead" in help_text
    assert sh.tb_json("resume", run)["status"] == "completed"  # the plain resume still works


def test_metrics_check_exit_codes(sh: Shell) -> None:
    sh.start("clean")
    assert sh.tb_json("metrics", "--check")["violations"] == []
    sh.start("harmful")
    failed = sh.tb_json("metrics", "--check", code=1)
    assert {(v["pipeline"], v["metric"], v["role"]) for v in failed["violations"]} == {
        ("harmful", "harm_rate", None),
        ("harmful", "unresolved_origin", "Executor"),
    }
    assert failed["by_role"]["Executor"]["unresolved_origin"] == 1
    assert failed["by_pipeline_type"]["remediation"]["outputs"] == 6
    text = sh.tb("metrics", "--check", code=1).stdout
    assert "SLO violation" in text and "harmful: unresolved_origin (Executor) = 1" in text
    # Without --check the same numbers are a report, not a failure.
    assert sh.tb_json("metrics")["ok"]
    assert sh.tb_json("metrics", "--check", "--pipeline", "clean")["violations"] == []
    assert "no runs" in sh.tb_json("metrics", "--pipeline", "nope", code=2)["error"]["message"]


def test_resume_fails_closed_without_a_policy(sh: Shell) -> None:
    run = sh.start("gated")
    said = sh.tb("approve", run, "execute", "--as", "@alice").stdout
    assert f"Next: tracebound resume {run}\n" in said
    (sh.cwd / "tracebound-policy.toml").unlink()
    error = sh.tb_json("resume", run, code=2)["error"]
    assert error["kind"] == "PolicyUnusable" and "tracebound-policy.toml" in error["message"]
    (sh.cwd / "empty.toml").write_text("")
    assert sh.tb_json("resume", run, "--policy", "empty.toml", code=2)["error"]["kind"] == (
        "PolicyUnusable"
    )


def test_verify_evidence_needs_a_key_and_reports_unsigned(sh: Shell, tmp_path: Path) -> None:
    run = sh.start("clean")
    evidence = sh.cwd / "artifacts" / "agent-runs" / f"{run}.json"
    other_home = tmp_path / "auditor"
    sh.env["HOME"] = str(other_home)  # an auditor without the ledger's key files
    assert sh.tb_json("verify-evidence", str(evidence), code=2)["error"]["kind"] == (
        "PolicyUnusable"
    )
    sh.env["HOME"] = str(tmp_path / "home")
    key = sh.tb_json("keys", "show")["verifier_key"]
    sh.env["HOME"] = str(other_home)
    assert sh.tb_json("verify-evidence", str(evidence), "--verifier-key", key)["ok"]
    doc = json.loads(evidence.read_text())
    doc.update(checkpoint=None, tree_size=None, proofs=[], run_head=None)
    doc["costs"].update(proofs=[], head=None)
    from tracebound.export.evidence import integrity_hash

    doc["integrity"]["hash"] = integrity_hash(doc)
    unsigned = sh.cwd / "unsigned.json"
    unsigned.write_text(json.dumps(doc))
    out = sh.tb_json("verify-evidence", str(unsigned), "--verifier-key", key, code=3)
    assert out["signed"] is False


def test_replay_reports_a_missing_blob(sh: Shell) -> None:
    run = sh.start("clean")
    replayed = sh.tb_json("replay", run)
    # Erased where the CLI keeps it (the ledger's own file by default, ADR 0009).
    assert RunnerConfig(base=sh.cwd).blob_store().erase(replayed["steps"][1]["artifact_hash"])
    broken = sh.tb_json("replay", run, code=1)
    assert [(f["step_id"], f["kind"]) for f in broken["failures"]] == [("execute", "missing")]
    assert "missing" in sh.tb("replay", run, code=1).stdout
    assert sh.tb_json("replay", "no-such-run", code=2)["error"]["kind"] == "ConfigError"


# -- RunnerConfig ----------------------------------------------------------------------------


def test_redaction_key_is_created_once_outside_the_store(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "redaction.key"
    key = load_redaction_key(path, store_dir=tmp_path / "store")
    assert len(key) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_redaction_key(path) == key  # created on first use only
    with pytest.raises(SigningKeyError, match="inside the store"):
        load_redaction_key(tmp_path / "store" / "r.key", store_dir=tmp_path / "store")
    path.chmod(0o644)
    with pytest.raises(SigningKeyError, match="chmod 600"):
        load_redaction_key(path)
    short = tmp_path / "short.key"
    short.write_bytes(b"x" * 16)
    short.chmod(0o600)
    with pytest.raises(SigningKeyError, match="16 bytes"):
        load_redaction_key(short)
    with pytest.raises(SigningKeyError, match="no redaction key"):
        load_redaction_key(tmp_path / "absent.key", create=False)


def test_runner_config_defaults_and_clear_errors(tmp_path: Path) -> None:
    config = RunnerConfig(base=tmp_path, redaction_key=tmp_path / "k" / "r.key")
    assert config.store_dir() == tmp_path / ".tracebound"
    assert config.blobs_dir() == tmp_path / ".tracebound" / "blobs"
    assert config.policy_path() == tmp_path / "tracebound-policy.toml"
    with pytest.raises(PolicyUnusable, match="no policy"):
        config.load_policy()
    assert config.load_codeowners() is None
    with pytest.raises(PolicyUnusable, match="nobody may lift a gate"):
        config.load_codeowners(required=True)
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "CODEOWNERS").write_text("* @ops\n")
    owners = config.load_codeowners()
    assert owners is not None and owners.owners_of("x") == ("@ops",)
    (tmp_path / "CODEOWNERS").write_text("* @root-owner\n")
    owners = config.load_codeowners()
    assert owners is not None and owners.owners_of("x") == ("@root-owner",)
    remote = RunnerConfig(store="postgresql://db.example/ledger", base=tmp_path)
    assert remote.store_dir() is None
    with pytest.raises(ConfigError, match="--blobs"):
        remote.blobs_dir()
    assert RunnerConfig(store="sqlite:///elsewhere/l.db", base=tmp_path).blobs_dir() == (
        tmp_path / "elsewhere" / "blobs"
    )


# -- docs/pipeline.md -----------------------------------------------------------------------

DOC = ROOT / "docs" / "pipeline.md"


def test_the_pipeline_guide_runs_as_written(tmp_path: Path) -> None:
    """Every block of docs/pipeline.md, in order: files are written, shell and Python run."""
    shell = Shell(tmp_path)
    blocks = re.findall(r"```(\w+)([^\n]*)\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    kinds = [(lang, info.strip()) for lang, info, _ in blocks]
    assert ("python", "file=remediate.py") in kinds and kinds.count(("bash", "")) >= 5
    for lang, info, body in blocks:
        if info.strip().startswith("file="):
            (shell.cwd / info.strip().removeprefix("file=")).write_text(body)
        elif lang == "bash":
            proc = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", body], cwd=shell.cwd, env=shell.env,
                capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            assert proc.returncode == 0, (body, proc.stdout, proc.stderr)
        elif lang == "python":
            shell.run("-c", body)
    run = (shell.cwd / "run-id.txt").read_text().strip()
    assert (shell.cwd / "artifacts" / "agent-runs" / f"{run}.json").exists()


def test_a_copied_ledger_keeps_its_artifacts(sh: Shell) -> None:
    """`tracebound copy` moved the events and left every blob behind: the SQLite ledger keeps
    its artifacts in its own file (ADR 0009), and `replay` of a run on the copy found every
    artifact missing. The blobs now go along, into the destination's own blob place."""
    run = sh.start("clean")
    sh.tb("checkpoint")
    to_jsonl = sh.tb_json("copy", "sqlite:///.tracebound", "jsonl:///moved-j")
    assert to_jsonl["blobs"] == {"copied": 4, "present": 0}  # 3 artifacts, the run inputs
    back = sh.tb_json("copy", "jsonl:///moved-j", "sqlite:///moved-s")  # and back again
    assert back["blobs"] == {"copied": 4, "present": 0}
    for store in ("jsonl:///moved-j", "moved-s"):
        replayed = sh.tb_json("replay", run, "--store", store)
        assert replayed["ok"], replayed
    # Run again (as after an interruption): what is there already is not written twice.
    again = sh.tb_json("copy", "sqlite:///.tracebound", "jsonl:///moved-j")
    assert again["blobs"] == {"copied": 0, "present": 4}
    # A PostgreSQL ledger keeps blobs in a folder only the user can name: without --blobs
    # a copy of a ledger holding blobs is refused before the destination is made.
    refused = sh.tb_json("copy", "moved-s", "postgresql://nobody@127.0.0.1:1/x", code=2)
    assert "--blobs" in refused["error"]["message"]


def test_runs_shows_the_newest_and_never_hides_a_waiting_gate_unsaid(sh: Shell) -> None:
    waiting = sh.start("gated")  # the oldest run: it waits at its gate
    newer = [sh.start("clean"), sh.start("clean")]
    ids = [r["run_id"] for r in sh.tb_json("runs", "--limit", "1")["runs"]]
    assert ids == [waiting, *newer]  # --json has every run whatever --limit says

    shown = sh.tb("runs", "--limit", "1").stdout
    assert newer[1] in shown
    assert waiting not in shown
    assert newer[0] not in shown
    assert "3 run(s)" in shown
    assert "2 older run(s) not shown (--limit 0: all); 1 of them gated: --status gated" in shown
    assert all(run in sh.tb("runs", "--limit", "0").stdout for run in [waiting, *newer])

    gated = sh.tb_json("runs", "--status", "gated")["runs"]
    assert [(r["run_id"], r["status"]) for r in gated] == [(waiting, "gated")]
    assert waiting in sh.tb("runs", "--status", "gated").stdout
    assert [r["run_id"] for r in sh.tb_json("runs", "--status", "completed")["runs"]] == newer

    wrong = sh.tb("runs", "--status", "done", code=2)
    assert "'done' is not one of running, completed, failed, gated, rejected" in wrong.stderr
