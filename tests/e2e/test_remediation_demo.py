"""The reference remediation pipeline (`make demo`), run for real and checked end to end.

The tests after the JSON ones read the demo as a new user does, at 80 columns: a gated run
that waits and patches nothing, its attempts table, a `--dir` that is not empty, and the
printed commands that approve and finish the run, pasted into a shell.

Real parts: the bundled project's tests under pytest in a network-less sandbox, offline pip
installs from the repo's wheels, a SQLite ledger, Ed25519 checkpoints, and the OpenAI
adapter talking HTTP to recorded responses on loopback (the one allowed fake).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tracebound import Ledger, RandomIds, SQLiteStore, SystemClock
from tracebound.events.catalog import (
    ApprovalRecorded,
    AttemptAnchorRecorded,
    AttemptRefused,
    CostIncurred,
    GateRequested,
    PromptBuilt,
    RetryRequested,
)
from tracebound.export.evidence import verify_evidence
from tracebound.store.keyfile import load_verifier

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "remediation" / "remediate.py"


def run_demo(workspace: Path, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(DEMO), "--dir", str(workspace), "--json", *extra],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


@pytest.fixture(scope="module")
def approved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    workspace = tmp_path_factory.mktemp("demo")
    return workspace, run_demo(workspace, "--approve-as", "security-lead")


def events(workspace: Path) -> list[Any]:
    ledger = Ledger(SQLiteStore(workspace / ".tracebound", create=False),
                    clock=SystemClock(), ids=RandomIds())  # fmt: skip
    with ledger:
        return list(ledger.store.read_log())


def test_retry_with_fenced_summary_produces_a_passing_different_patch(
    approved: tuple[Path, dict[str, Any]],
) -> None:
    _, summary = approved
    assert summary["ok"] is True and summary["status"] == "completed"
    first, second = summary["attempts"]
    assert (first["tag"], first["passed"]) == ("AppliedFromRecipe", False)
    assert any("test_failure" in f for f in first["failing"])
    assert (second["tag"], second["passed"]) == ("AppliedFromLlm", True)
    assert second["fenced_summary_in_prompt"] and not first["fenced_summary_in_prompt"]
    assert first["patch_blake3"] != second["patch_blake3"]


def test_change_was_gated_then_approved_by_a_codeowner(
    approved: tuple[Path, dict[str, Any]],
) -> None:
    workspace, summary = approved
    payloads = [e.payload for e in events(workspace)]
    (gate,) = [p for p in payloads if isinstance(p, GateRequested)]
    assert "requirements.txt" in gate.paths and gate.owners == ("@security-lead",)
    (approval,) = [p for p in payloads if isinstance(p, ApprovalRecorded)]
    assert (approval.approver, approval.decision) == ("security-lead", "approved")
    assert (workspace / "project" / "requirements.txt").read_text() == "tinytemplate==2.0.0\n"
    assert "render_string" in (workspace / "project" / "app" / "greeting.py").read_text()
    assert summary["paths"]["patched"] == [
        str(workspace / "project" / "requirements.txt"),
        str(workspace / "project" / "app" / "greeting.py"),
    ]
    assert summary["waiting_for_approval"] is None


def test_every_attempt_closes_with_one_anchor_and_costs_are_recorded(
    approved: tuple[Path, dict[str, Any]],
) -> None:
    workspace, summary = approved
    log = events(workspace)
    anchors = [e for e in log if isinstance(e.payload, AttemptAnchorRecorded)]
    assert [a.payload.anchor.attempt_index for a in anchors] == [0, 1]
    for anchor in anchors:  # nothing of that attempt follows its anchor
        attempt = anchor.payload.anchor.attempt_id
        later = [e for e in log if e.position > anchor.position
                 and getattr(e.payload, "attempt_id", None) == attempt
                 and e.stream_id.startswith("attempts/")]  # fmt: skip
        assert later == []
    assert any(isinstance(e.payload, RetryRequested) for e in log)
    (cost,) = [e.payload for e in log if isinstance(e.payload, CostIncurred)]
    assert cost.cached_input_tokens and cost.reasoning_tokens
    assert str(cost.amount_usd) == summary["attempts"][1]["cost_usd"]
    (prompt,) = [e.payload for e in log if isinstance(e.payload, PromptBuilt)]
    assert prompt.attempt_index == 1
    (anchor_file,) = summary["paths"]["anchors"]
    assert len(Path(anchor_file).read_text().splitlines()) == 2


def test_ledger_verifies_and_evidence_checks_offline(
    approved: tuple[Path, dict[str, Any]],
) -> None:
    workspace, summary = approved
    assert summary["verify"]["ok"] is True
    assert summary["verify"]["checks"]["witness"] == "ok"
    verifier = load_verifier(workspace / "keys" / "remediation.pub")
    checked = verify_evidence(Path(summary["paths"]["evidence"]), verifier)
    assert checked is not None


def test_without_approval_the_run_waits_and_nothing_is_written(tmp_path: Path) -> None:
    summary = run_demo(tmp_path)
    assert summary["status"] == "gated" and summary["ok"] is False
    assert (tmp_path / "project" / "requirements.txt").read_text() == "tinytemplate==1.4.0\n"
    # The summary listed both files as patched while the run waited at the gate.
    assert summary["paths"]["patched"] == []
    waiting = summary["waiting_for_approval"]
    assert waiting["files"] == ["requirements.txt", "app/greeting.py"]
    assert (waiting["step"], waiting["owners"]) == ("execute", ["@security-lead"])


def test_a_model_that_repeats_a_failed_patch_is_refused(tmp_path: Path) -> None:
    code = f"""
import json, sys
sys.path.insert(0, {str(DEMO.parent)!r})
import remediate
from tracebound.integrations.llm import RecordedExchange
from pathlib import Path
# Only the bump-only answer: the retry proposes the patch that already failed.
recorded = json.loads((remediate.HERE / "llm" / "exchanges.json").read_text())
exchanges = [e for e in recorded["exchanges"] if e["match"] is None]
Path({str(tmp_path / "ex.json")!r}).write_text(json.dumps({{"exchanges": exchanges}}))
from tracebound.integrations.llm import ReplayServer, load_exchanges
with ReplayServer(load_exchanges({str(tmp_path / "ex.json")!r})) as server:
    demo = remediate.build(Path({str(tmp_path / "ws")!r}), server.url)
    result = demo.loop.run(demo._context(), workflow_id="wf-repeat", target=demo.project)
print(json.dumps({{"status": result.status, "reason": result.reason,
                  "tags": [a.tag for a in result.attempts]}}))
"""
    (tmp_path / "ws").mkdir()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["status"] == "refused"
    assert out["reason"] == "repeats_failed_patch"
    assert out["tags"] == ["AppliedFromRecipe", "Refused"]
    log = events(tmp_path / "ws")
    assert sum(isinstance(e.payload, AttemptAnchorRecorded) for e in log) == 2
    (refused,) = [e.payload for e in log if isinstance(e.payload, AttemptRefused)]
    assert refused.cause == "not_retryable"


def test_learning_write_back_names_the_solving_patch(
    approved: tuple[Path, dict[str, Any]],
) -> None:
    """The KG view the retrieval side reads: advisory -solved_by-> the patch that passed."""
    import sqlite3

    workspace, summary = approved
    env = {"HOME": str(workspace / "home"), "PATH": str(Path(sys.executable).parent)}
    proc = subprocess.run(
        [sys.executable, "-m", "tracebound", "project", "run", "--json"],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    conn = sqlite3.connect(workspace / ".tracebound" / "views.db")
    edges = conn.execute("SELECT src, edge, dst FROM kg_edges ORDER BY edge").fetchall()
    conn.close()
    solved = [(s, d) for s, e, d in edges if e == "solved_by"]
    assert solved == [
        ("advisory:TBDEMO-2026-0001", f"patch:{summary['attempts'][1]['patch_blake3']}")
    ]
    assert sum(e == "attempted" for _, e, _ in edges) == 2  # the failure is learned from too


# -- what a new user sees (each failed before its fix) --------------------------------------


def _env(home: Path, *, venv_on_path: bool) -> dict[str, str]:
    """A terminal 80 columns wide; the venv's scripts on PATH or not (not activated)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env.update(HOME=str(home), COLUMNS="80", TERM="dumb")
    bin_dir = str(Path(sys.executable).parent)
    system = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir, *system] if venv_on_path else system)
    return env


def run_human(cwd: Path, *args: str, venv_on_path: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DEMO), *args], cwd=cwd, capture_output=True, text=True,
        env=_env(cwd / "home", venv_on_path=venv_on_path), timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def gated_human(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A run without --approve-as, as a terminal shows it at 80 columns."""
    cwd = tmp_path_factory.mktemp("gated-human")
    proc = run_human(cwd, "--dir", "ws")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cwd, proc.stdout


def test_a_gated_run_says_it_waits_and_not_that_it_patched(
    gated_human: tuple[Path, str],
) -> None:
    cwd, out = gated_human
    assert "waiting for approval: requirements.txt, app/greeting.py (not patched yet)" in out
    assert "patched:" not in out
    assert "@security-lead may approve it" in out
    assert (cwd / "ws" / "project" / "requirements.txt").read_text() == "tinytemplate==1.4.0\n"


def _table_rows(out: str) -> list[list[list[str]]]:
    """The attempts table's body: per row, the lines of its cells (split on the box's bars)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    rows: list[list[list[str]]] = []
    for line in lines[start + 1 :]:
        if line.startswith("└"):
            break
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0]:
            rows.append([])
        rows[-1].append(cells)
    return rows


def test_the_attempts_table_is_readable_at_80_columns(gated_human: tuple[Path, str]) -> None:
    _, out = gated_human
    table = out[: out.index("cost:")].splitlines()
    assert all(len(line) <= 80 for line in table), "\n".join(table)
    header = next(line for line in table if "planner" in line)
    assert [c.strip() for c in header.strip("┃").split("┃")] == [
        "#", "planner", "patch", "gates", "USD"
    ]  # fmt: skip
    first, second = _table_rows(out)
    # #, planner and USD whole on the row's first line; the hash cropped, not gone.
    assert first[0][:2] == ["1", "AppliedFromRecipe"] and first[0][4] == "0"
    assert re.fullmatch(r"[0-9a-f]{8,}", first[0][2])
    assert second[0][:2] == ["2", "AppliedFromLlm *"] and second[0][3:] == ["passed", "0.0033066"]
    # The failing gate, folded onto more lines, reads in full (it was one "…" per line).
    gates = "".join(cells[3] for cells in first)
    assert gates.replace(" ", "") == (
        "test_failure: tests/test_greeting.py::test_greets_by_name (+1 more)".replace(" ", "")
    )
    assert "* its prompt had the fenced summary of the earlier failure(s)" in out


@pytest.mark.parametrize("contents", ["an earlier run", "a file"])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_dir_that_is_not_empty_is_refused_clearly(
    tmp_path: Path, contents: str, as_json: bool
) -> None:
    workspace = tmp_path / "ws"
    (workspace / ("project" if contents == "an earlier run" else "")).mkdir(parents=True)
    (workspace / "notes.txt").write_text("mine\n")
    proc = run_human(tmp_path, "--dir", "ws", *(["--json"] if as_json else []))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    if as_json:
        error = json.loads(proc.stdout)["error"]
        assert error["kind"] == "ConfigError" and "--dir ws is not empty" in error["message"]
    else:
        assert proc.stderr.startswith("error: --dir ws is not empty; a new run needs a new or")
    assert sorted(p.name for p in workspace.iterdir()) == sorted(
        ["project", "notes.txt"] if contents == "an earlier run" else ["notes.txt"]
    )


@pytest.mark.parametrize("as_json", [False, True])
def test_approving_as_someone_who_is_not_an_owner_is_refused_and_the_run_waits(
    tmp_path: Path, as_json: bool
) -> None:
    """`--approve-as mallory` escaped as a NotAnOwner traceback (exit 1, and with --json no
    JSON at all), before the ledger was signed or the waiting run was described."""
    proc = run_human(tmp_path, "--dir", "ws", "--approve-as", "mallory",
                     *(["--json"] if as_json else []))  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    if as_json:
        summary = json.loads(proc.stdout)
        assert (summary["ok"], summary["status"]) == (False, "gated")
        assert summary["error"]["kind"] == "NotAnOwner"
        assert "mallory is not a CODEOWNER" in summary["error"]["message"]
        assert summary["waiting_for_approval"]["owners"] == ["@security-lead"]
        assert summary["verify"]["ok"]
    else:
        assert "error: mallory is not a CODEOWNER of requirements.txt" in proc.stderr
        assert "@security-lead may approve it" in proc.stdout
    project = tmp_path / "ws" / "project"
    assert (project / "requirements.txt").read_text() == "tinytemplate==1.4.0\n"


def test_resume_needs_the_workspace_of_a_gated_run(tmp_path: Path) -> None:
    proc = run_human(tmp_path, "--resume", "some-run")
    assert (proc.returncode, proc.stderr) == (
        2, "error: --resume needs --dir, the workspace of the run that waits\n"
    )  # fmt: skip
    proc = run_human(tmp_path, "--dir", "nothing-here", "--resume", "some-run")
    assert proc.returncode == 2 and "holds no remediation run to resume" in proc.stderr


@pytest.mark.parametrize("venv_on_path", [True, False], ids=["venv-active", "venv-inactive"])
def test_the_printed_commands_approve_and_finish_the_run(
    tmp_path: Path, venv_on_path: bool
) -> None:
    """Pasted as printed, from the directory the demo ran in, in a shell like the user's."""
    proc = run_human(tmp_path, "--dir", "ws", venv_on_path=venv_on_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    at = lines.index("To approve it and finish the run, from this directory:")
    approve, resume = (line.strip() for line in lines[at + 1 : at + 3])
    assert approve.startswith("tracebound approve " if venv_on_path else f"{sys.executable} -m")
    assert "--store ws/.tracebound --codeowners ws/project/CODEOWNERS" in approve
    env = _env(tmp_path / "home", venv_on_path=venv_on_path)
    for command in (approve, resume):
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert ": completed" in done.stdout and "patched: " in done.stdout
    project = tmp_path / "ws" / "project"
    assert (project / "requirements.txt").read_text() == "tinytemplate==2.0.0\n"
    log = events(tmp_path / "ws")
    (approval,) = [e.payload for e in log if isinstance(e.payload, ApprovalRecorded)]
    assert approval.approver == "security-lead"
