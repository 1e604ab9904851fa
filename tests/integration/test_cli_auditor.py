"""What an external auditor gets from the team, and checks without the team's machine.

The owner prepares the evidence (`verify`, `resume`, `prove`, `keys show`); the auditor,
with an empty HOME and only the verifier key, runs `verify-evidence` and `verify-proof`
(docs/pipeline.md, "Answering the four questions about one run"). Real `tracebound`
processes on a real SQLite ledger (the Shell of test_cli_runs).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.integration.test_cli_runs import Shell, ledger_shell

ORIGIN = "test.example/auditor"


@pytest.fixture
def sh(tmp_path: Path) -> Shell:
    return ledger_shell(tmp_path, ORIGIN)


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


def test_verify_evidence_show_lists_what_the_file_holds_only_once_verified(
    sh: Shell, tmp_path: Path
) -> None:
    """`verify-evidence` only said OK: what the file holds (which steps, who approved, how
    the run ended) was base64 inside it, out of reach without code. `--show` lists the
    verified records (position, stream, version, type, time, hash and a detail of the
    payload), `--json --show` gives them as `records`, the rows `log --json` gives; a file
    that fails lists nothing, and an unsigned one is marked as such."""
    run, evidence = _completed_run(sh)
    verifier = sh.tb("keys", "show").stdout.strip()
    logged = sh.tb_json("log", "--stream", f"run/{run}", "--limit", "0")["events"]
    auditor = _auditor(tmp_path)
    args = ("verify-evidence", str(evidence), "--verifier-key", verifier, "--show")
    shown = auditor.tb_json(*args)
    assert shown["ok"] and shown["events"] == len(logged)
    assert shown["records"] == logged  # decoded as `log` decodes the ledger's own
    assert "records" not in auditor.tb_json(*args[:-1])  # only when asked
    auditor.env["COLUMNS"] = "120"
    text = auditor.tb(*args).stdout
    assert text.index("OK") < text.index(f"{len(logged)} verified event(s)"), text
    for row in logged:
        assert re.search(rf"│\s*{row['position']}\s*│", text), (row["position"], text)
        assert row["event_type"] in text
    assert "approver=@alice" in _words(text) and "status=completed" in _words(text)

    # Damaged: nothing of the file is shown, only what failed.
    doc = json.loads(evidence.read_text())
    doc["integrity"]["hash"] = "sha256:" + "0" * 64
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    refused = auditor.tb("verify-evidence", str(bad), "--verifier-key", verifier, "--show", code=1)
    assert "step_recorded" not in refused.stdout + refused.stderr
    failed = auditor.tb_json(
        "verify-evidence", str(bad), "--verifier-key", verifier, "--show", code=1
    )
    assert "records" not in failed and not failed["ok"]

    # Unsigned (written before any key): chain-checked only, and said so beside the list.
    sh.env["HOME"] = str(tmp_path / "keyless")
    unsigned_run = sh.start("clean")
    unsigned = sh.cwd / "artifacts" / "agent-runs" / f"{unsigned_run}.json"
    args = ("verify-evidence", str(unsigned), "--verifier-key", verifier, "--show")
    listed = auditor.tb_json(*args, code=3)
    assert not listed["ok"] and not listed["signed"] and listed["records"]
    marked = _words(auditor.tb(*args, code=3).stdout)
    assert "NOT SIGNED" in marked and "verified event(s)" not in marked, marked


def test_an_auditor_reads_a_proven_cost_record_with_verify_proof_show(
    sh: Shell, tmp_path: Path
) -> None:
    """Spend is recorded under `costs/RUN`, outside the evidence file: its proof is one
    `prove` per cost record. But `verify-proof` said only "position N is in ORIGIN", the
    amount base64 inside the file. `--show` lists the proven record (as `verify-evidence
    --show` does), `--json --show` gives it as `record`, the row `log --json` gives."""
    run, _evidence = _completed_run(sh)
    spend = {
        "stream_id": f"costs/{run}",
        "workflow_id": run,
        "payload": {"kind": "cost_incurred", "tier": "direct", "amount_usd": "0.0213",
                    "source": "openai", "role": "Executor"},
    }  # fmt: skip
    (sh.cwd / "spend.jsonl").write_text(json.dumps(spend) + "\n")
    sh.tb("append", "spend.jsonl")
    sh.tb("checkpoint")
    (cost,) = sh.tb_json("log", "--stream", f"costs/{run}")["events"]
    sh.tb("prove", str(cost["position"]), "-o", "cost-proof.json")
    verifier = sh.tb("keys", "show").stdout.strip()
    auditor = _auditor(tmp_path)
    proof = str(sh.cwd / "cost-proof.json")
    args = ("verify-proof", proof, "--verifier-key", verifier, "--origin", ORIGIN, "--show")
    shown = auditor.tb_json(*args)
    assert shown["ok"] and shown["record"] == cost
    assert "record" not in auditor.tb_json(*args[:-1])
    auditor.env["COLUMNS"] = "120"
    text = _words(auditor.tb(*args).stdout)
    assert "amount_usd=0.0213" in text and "cost_incurred" in text and f"costs/{run}" in text

    doc = json.loads((sh.cwd / "cost-proof.json").read_text())
    doc["proof"] = doc["proof"][::-1] if len(doc["proof"]) > 1 else ["00" * 32]
    bad = tmp_path / "bad-proof.json"
    bad.write_text(json.dumps(doc))
    refused = auditor.tb("verify-proof", str(bad), "--verifier-key", verifier, "--show", code=1)
    assert "0.0213" not in refused.stdout + refused.stderr
