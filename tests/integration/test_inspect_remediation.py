"""`tracebound inspect RUN-ID`: re-verifies the attempts log every time, says what to do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.unit.retry.retry_kit import HEADER, WF, Kit, make_project, open_kit, plan
from tracebound.cli.app import app
from tracebound.pipeline.retry.gates import pytest_gate

NOT_FIXED = HEADER + "@@ -1,2 +1,3 @@\n def add(a, b):\n+    # TODO\n     return a - b\n"


@pytest.fixture
def run(tmp_path: Path) -> Kit:
    """A remediation run of two gated attempts (the first fails, the second passes)."""
    kit = open_kit(tmp_path)
    project = make_project(tmp_path / "project")
    runner = kit.runner([pytest_gate()])
    kit.attempt(runner, plan(0, NOT_FIXED), project)
    kit.attempt(runner, plan(1), project)
    kit.ledger.close()
    return kit


def _inspect(kit: Kit, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["inspect", *args, "--store", str(kit.root / "store")])
    return result.exit_code, result.output


def _corrupt_line(path: Path, number: int) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[number - 1] = lines[number - 1].replace(b'"confidence":"', b'"confidence":"low","x":"')
    path.write_bytes(b"".join(lines))


def test_shows_the_attempts_and_verifies(run: Kit) -> None:
    code, out = _inspect(run, WF)
    assert code == 0, out
    assert "chain ok" in out and "2 attempt(s)" in out
    assert "failed" in out and "passed" in out
    code, out = _inspect(run, WF, "--json")
    data = json.loads(out)
    assert data["ok"] and data["damage"] is None
    assert [a["attempt_index"] for a in data["attempts"]] == [0, 1]
    assert [a["trust"]["passed"] for a in data["attempts"]] == [False, True]


def test_reverifies_on_every_run_and_says_what_to_do(run: Kit) -> None:
    assert _inspect(run, WF)[0] == 0
    _corrupt_line(run.run_dir() / "attempts.jsonl", 2)
    code, out = _inspect(run, WF)
    assert code == 1
    text = " ".join(out.split())
    assert "AuditChainCorrupted at line 2:" in text
    assert "The attempts log no longer continues the planning side's chain." in text
    assert "Do not run more gates for this run" in text
    assert "docs/retry.md" in text
    code, out = _inspect(run, WF, "--json")
    assert code == 1
    damage = json.loads(out)["damage"]
    assert damage["line"] == 2 and damage["kind"] == "AuditChainCorrupted"
    assert "Do not run more gates" in damage["remediation"]


def test_an_attempt_in_flight_is_vouched_for_by_the_ledger(run: Kit) -> None:
    kit = open_kit(run.root)
    kit.planning_attempt(2)  # the planning side moved on; the gates have not run yet
    kit.ledger.close()
    code, out = _inspect(run, WF)
    assert code == 0, out
    assert "in flight" in out
    (run.run_dir() / "chain_head.bin").write_bytes(b"\x00" * 32)
    code, out = _inspect(run, WF)
    assert code == 1
    assert "AuditChainCorrupted at chain_head.bin" in " ".join(out.split())


def test_attempts_path_without_a_ledger(run: Kit, tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere"
    shutil.copytree(run.run_dir(), copy)
    result = CliRunner().invoke(
        app,
        [
            "inspect",
            "x",
            "--attempts",
            str(copy / "attempts.jsonl"),
            "--store",
            str(tmp_path / "none"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)["attempts"]) == 2
    (copy / "chain_head.bin").unlink()
    result = CliRunner().invoke(
        app, ["inspect", "x", "--attempts", str(copy / "attempts.jsonl"), "--json"]
    )
    assert result.exit_code == 1
    damage = json.loads(result.output)["damage"]
    assert damage["line"] is None and "chain_head.bin is missing" in damage["detail"]


def test_streams_are_still_inspected_as_before(run: Kit) -> None:
    code, out = _inspect(run, f"gates/{WF}", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["ok"] and data["stream_id"] == f"gates/{WF}"
    assert {e["event_type"] for e in data["events"]} >= {"trust_gate_failed", "trust_gate_passed"}


def test_attempts_needs_no_stream_argument(run: Kit) -> None:
    attempts = str(run.run_dir() / "attempts.jsonl")
    code, out = _inspect(run, "--attempts", attempts, "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["ok"] and len(data["attempts"]) == 2
    assert data["planning_head"] is not None  # the run id came from the run's folder name
    code, out = _inspect(run, "--json")
    assert code == 2
    error = json.loads(out)["error"]
    assert error["kind"] == "UsageError" and "--attempts PATH" in error["message"]


def test_a_wrong_attempts_path_is_a_typed_config_error(run: Kit, tmp_path: Path) -> None:
    """Both refusals said `"kind": "error"` in --json, where every other error names its
    type (`ConfigError` for a bad path the user gave)."""
    (tmp_path / "notes.txt").write_text("")
    for path in (tmp_path / "missing", tmp_path / "notes.txt"):
        code, out = _inspect(run, "--attempts", str(path), "--json")
        assert code == 2, out
        assert json.loads(out)["error"]["kind"] == "ConfigError"
