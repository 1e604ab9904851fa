"""The reference remediation pipeline (`make demo`), run for real and checked end to end.

Real parts: the bundled project's tests under pytest in a network-less sandbox, offline pip
installs from the repo's wheels, a SQLite ledger, Ed25519 checkpoints, and the OpenAI
adapter talking HTTP to recorded responses on loopback (the one allowed fake).
"""

from __future__ import annotations

import json
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
    return json.loads(proc.stdout)


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
    workspace, _ = approved
    payloads = [e.payload for e in events(workspace)]
    (gate,) = [p for p in payloads if isinstance(p, GateRequested)]
    assert "requirements.txt" in gate.paths and gate.owners == ("@security-lead",)
    (approval,) = [p for p in payloads if isinstance(p, ApprovalRecorded)]
    assert (approval.approver, approval.decision) == ("security-lead", "approved")
    assert (workspace / "project" / "requirements.txt").read_text() == "tinytemplate==2.0.0\n"
    assert "render_string" in (workspace / "project" / "app" / "greeting.py").read_text()


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
