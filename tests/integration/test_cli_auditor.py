"""What an external auditor gets from the team, and checks without the team's machine.

The owner prepares the evidence (`verify`, `resume`, `prove`, `keys show`); the auditor,
with an empty HOME and only the verifier key, runs `verify-evidence` and `verify-proof`
(docs/pipeline.md, "Answering the four questions about one run"). Real `tracebound`
processes on a real SQLite ledger (the Shell of test_cli_runs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.test_cli_runs import CODEOWNERS, POLICY, Shell

ORIGIN = "test.example/auditor"


@pytest.fixture
def sh(tmp_path: Path) -> Shell:
    shell = Shell(tmp_path)
    shell.tb("init", "--origin", ORIGIN)
    shell.tb("keys", "init")
    (shell.cwd / "tracebound-policy.toml").write_text(POLICY)
    (shell.cwd / "CODEOWNERS").write_text(CODEOWNERS)
    return shell


def _words(text: str) -> str:
    return " ".join(text.split())


def _auditor(tmp_path: Path) -> Shell:
    """The auditor's machine: another HOME (no key files), another working directory."""
    (tmp_path / "auditor").mkdir()
    return Shell(tmp_path / "auditor")


def _completed_run(sh: Shell) -> tuple[str, Path]:
    run = sh.start("gated")
    sh.tb("approve", run, "execute", "--as", "@alice")
    assert sh.tb_json("resume", run)["status"] == "completed"
    return run, sh.cwd / "artifacts" / "agent-runs" / f"{run}.json"


def test_verify_names_the_origin_an_auditor_passes_as_origin(sh: Shell, tmp_path: Path) -> None:
    """`verify` did not say the ledger's origin, the name the auditor's `verify-evidence
    --origin` and `verify-proof --origin` require: the owner had to find it in `init`'s
    output or inside a proof file. `verify` now says it (JSON `origin`, and a row of its
    table), and so does `checkpoint`'s text."""
    assert sh.tb_json("verify", code=3)["origin"] == ORIGIN  # before any checkpoint: known
    run, evidence = _completed_run(sh)
    assert f"of {ORIGIN}" in _words(sh.tb("checkpoint").stdout)
    report = sh.tb_json("verify")
    assert report["ok"] and report["origin"] == ORIGIN
    assert re.search(rf"origin\s*│\s*{re.escape(ORIGIN)}", sh.tb("verify").stdout)
    verifier = sh.tb("keys", "show").stdout.strip()
    auditor = _auditor(tmp_path)
    checked = auditor.tb_json(
        "verify-evidence", str(evidence), "--verifier-key", verifier, "--origin", report["origin"]
    )
    assert checked["ok"] and checked["origin"] == ORIGIN and checked["run_id"] == run
    # `--key` is no longer in the help of the offline checks, but scripts on the owner's
    # machine that pass it still work: it finds the `.pub` beside the signing key.
    key = Path(sh.env["HOME"]) / ".config" / "tracebound" / "keys" / "tracebound.key"
    assert sh.tb_json("verify-evidence", str(evidence), "--key", str(key))["ok"]


def test_resume_keeps_the_artifact_digest_readable_at_100_columns(sh: Shell) -> None:
    """At 100 columns a long reason took the room and `resume` cut each artifact digest to
    `sha256:5`, nothing an auditor could match against the evidence file (`replay` shows
    19 characters). The digest now keeps its 19 characters; the reason folds instead."""
    run = sh.start("blamed")
    sh.tb("approve", run, "execute", "--as", "@alice")
    digests = [s["artifact_hash"] for s in sh.tb_json("replay", run)["steps"]]
    for columns in (100, 80):
        sh.env["COLUMNS"] = str(columns)
        lines = sh.tb("resume", run, code=3).stdout.splitlines()
        assert all(len(line) <= columns for line in lines), "\n".join(lines)
        text = "\n".join(lines)
        assert "vulnerable" in text  # the long reason is in the table (folded)
        for digest in digests:
            assert digest[:19] in text, text
