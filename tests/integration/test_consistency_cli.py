"""An auditor keeps a signed checkpoint, and months later checks that the ledger only grew
(`checkpoint --note`, `prove-consistency`, `verify-consistency`): real `tracebound`
processes on a real SQLite ledger, across a key rotation, and against a rewritten store."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_cli_runs import Shell, ledger_shell

ORIGIN = "test.example/consistency-cli"


@pytest.fixture
def sh(tmp_path: Path) -> Shell:
    return ledger_shell(tmp_path, ORIGIN)


def _error(doc: dict[str, Any]) -> str:
    return " ".join(str(doc["error"]["message"]).split())


def _auditor(tmp_path: Path) -> Shell:
    (tmp_path / "auditor").mkdir()
    return Shell(tmp_path / "auditor")


def test_an_auditor_follows_the_ledger_across_a_key_rotation(sh: Shell, tmp_path: Path) -> None:
    sh.start("clean")
    signed = sh.tb_json("checkpoint", "--note", "kept.note")
    old_key = sh.tb_json("keys", "show")["verifier_key"]
    auditor = _auditor(tmp_path)
    (auditor.cwd / "kept.note").write_bytes((sh.cwd / "kept.note").read_bytes())
    assert (sh.cwd / "kept.note").read_text() == signed["note"]

    sh.start("clean")
    sh.tb("keys", "rotate", "--by", "alice", "--reason", "yearly")
    sh.start("clean")
    newest = sh.tb_json("checkpoint")["size"]
    new_key = sh.tb_json("keys", "show")["verifier_key"]

    text = sh.tb("prove-consistency", "kept.note", "-o", "proof.json").stdout
    assert "through 1 key hand-over(s)" in " ".join(text.split())
    (auditor.cwd / "proof.json").write_bytes((sh.cwd / "proof.json").read_bytes())

    checked = auditor.tb_json(
        "verify-consistency", "proof.json", "--verifier-key", old_key, "--held", "kept.note",
        "--newest-key", new_key, "--origin", ORIGIN, "--update",
    )  # fmt: skip
    assert checked["ok"] and checked["old"]["size"] == signed["size"]
    assert checked["new"]["size"] == newest and checked["newest_key"] == new_key
    assert checked["keys"] == [old_key, new_key] and len(checked["handovers"]) == 1
    # --update: the auditor now keeps the newest checkpoint, which the new key checks.
    assert f"\n{newest}\n" in (auditor.cwd / "kept.note").read_text()
    again = sh.tb("prove-consistency", str(auditor.cwd / "kept.note")).stdout
    (auditor.cwd / "again.json").write_text(again)
    ok = auditor.tb_json(
        "verify-consistency", "again.json", "--verifier-key", new_key, "--held", "kept.note"
    )
    assert ok["old"] == ok["new"] and ok["keys"] == [new_key]  # nothing new since
    wrong = auditor.tb_json(
        "verify-consistency", "again.json", "--verifier-key", old_key, "--held", "kept.note", code=1
    )
    assert wrong["error"]["kind"] == "SignatureInvalid"


def test_a_replaced_ledger_cannot_prove_the_checkpoint_an_auditor_kept(sh: Shell) -> None:
    """The operator starts the ledger again under the same name and key (its own `verify`
    is clean) and records other runs: the proof from the auditor's checkpoint fails, as a
    fork once the new log is as long, as a rollback before; exit 1 both times."""
    sh.start("clean")
    kept = sh.tb_json("checkpoint", "--note", "kept.note")
    shutil.rmtree(sh.cwd / ".tracebound")
    shutil.rmtree(Path(sh.env["HOME"]) / ".local" / "state" / "tracebound")  # the witness
    sh.tb("init", "--origin", ORIGIN)
    sh.tb("checkpoint")
    behind = sh.tb_json("prove-consistency", "kept.note", code=1)
    assert behind["error"]["damage"]["kind"] == "rollback", behind
    while sh.tb_json("verify", code=None)["size"] < kept["size"]:
        sh.start("gated")
    sh.tb("checkpoint")
    assert sh.tb_json("verify")["ok"]
    forked = sh.tb_json("prove-consistency", "kept.note", code=1)
    assert forked["error"]["damage"]["kind"] == "fork", forked
    assert f"first {kept['size']} events" in _error(forked)


def test_refusals(sh: Shell, tmp_path: Path) -> None:
    nothing = sh.tb_json("prove-consistency", "absent.note", code=2)
    assert "absent.note" in _error(nothing)
    (sh.cwd / "junk.note").write_text("not a checkpoint\n")
    sh.start("clean")
    sh.tb("checkpoint", "--note", "kept.note")
    junk = sh.tb_json("prove-consistency", "junk.note", code=1)
    assert "no signed checkpoint" in _error(junk)
    inside = sh.tb_json("prove-consistency", "kept.note", "-o", ".tracebound/p.json", code=2)
    assert "inside the store directory" in _error(inside)
    noheld = sh.tb_json(
        "verify-consistency", "kept.note", "--verifier-key", "x+1+AA", "--update", code=2
    )
    assert "--update replaces the --held file" in _error(noheld)
    proc = sh.tb("verify-consistency", "kept.note", code=None)
    assert proc.returncode in {1, 2} and "Traceback" not in proc.stderr
