"""`verify-evidence` answers "what did the run cost, and can you prove it" from the file alone:
the proven total and its sums by role, source and tier (table and ``--json``), the spend
records with ``--show``, and ``--require-spend`` refusing a file that proves no spend."""

# ruff: noqa: F811 - ``spent`` is the spend module's fixture, imported to be shared

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.e2e.test_cli import CLI
from tests.unit.export.test_evidence import VERIFIER
from tests.unit.export.test_evidence_forgeries import _reseal
from tests.unit.export.test_evidence_spend import (
    Spent,
    spent,  # noqa: F401 - the module fixture, shared
)

KEY = VERIFIER.format()
FIXTURES = Path(__file__).parents[1] / "fixtures" / "evidence"


@pytest.fixture
def auditor(tmp_path: Path) -> CLI:
    return CLI(tmp_path / "auditor")


def _write(auditor: CLI, doc: dict[str, object]) -> str:
    (auditor.cwd / "e.json").write_text(json.dumps(doc))
    return "e.json"


def test_the_proven_spend_is_in_the_json_and_the_table(spent: Spent, auditor: CLI) -> None:
    name = _write(auditor, spent.costly)
    out = auditor.json("verify-evidence", name, "--verifier-key", KEY, "--require-spend")
    spend = out["spend"]
    assert (spend["proven"], spend["total_usd"], spend["records"]) == (True, "0.5213", 2)
    assert spend["by_role"] == [
        {"role": "Executor", "total_usd": "0.0213", "records": 1},
        {"role": None, "total_usd": "0.5", "records": 1},
    ]
    proc = auditor.run("verify-evidence", name, "--verifier-key", KEY)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert f"Spend: 0.5213 USD in 2 cost record(s) of {spend['stream_id']}" in text
    for row in ("role Executor 0.0213 1", "role unattributed 0.5 1", "source sandbox 0.5 1",
                "tier direct 0.0213 1"):  # fmt: skip
        assert row in " ".join(" ".join(line.replace("│", " ").split()) for line in
                               proc.stdout.splitlines()), row  # fmt: skip


def test_show_lists_the_spend_records(spent: Spent, auditor: CLI) -> None:
    name = _write(auditor, spent.costly)
    out = auditor.json("verify-evidence", name, "--verifier-key", KEY, "--show")
    rows = out["cost_records"]
    assert [r["stream_id"] for r in rows] == [out["spend"]["stream_id"]] * 2
    assert [r["payload"]["amount_usd"] for r in rows] == ["0.0213", "0.5"]
    assert all(r["stream_id"].startswith("run/") for r in out["records"])
    proc = auditor.run("verify-evidence", name, "--verifier-key", KEY, "--show")
    assert proc.returncode == 0 and "2 verified spend record(s) of run" in proc.stdout


def test_a_run_without_spend_is_proven_to_have_none(spent: Spent, auditor: CLI) -> None:
    name = _write(auditor, spent.free)
    out = auditor.json("verify-evidence", name, "--verifier-key", KEY, "--require-spend")
    assert out["spend"]["total_usd"] == "0" and out["spend"]["records"] == 0
    proc = auditor.run("verify-evidence", name, "--verifier-key", KEY)
    assert "Spend: 0 USD in 0 cost record(s)" in " ".join(proc.stdout.split())


def test_a_stripped_spend_head_warns_and_require_spend_refuses(spent: Spent, auditor: CLI) -> None:
    doc = copy.deepcopy(spent.costly)
    doc["costs"]["head"] = None
    name = _write(auditor, _reseal(doc))
    proc = auditor.run("verify-evidence", name, "--verifier-key", KEY)
    assert proc.returncode == 0 and "SPEND NOT PROVEN" in proc.stdout
    out = auditor.json("verify-evidence", name, "--verifier-key", KEY, "--require-spend", code=1)
    assert out["error"]["kind"] == "EvidenceInvalid"
    assert "no signed spend head" in out["error"]["message"]


def test_a_version_2_file_says_it_proves_no_spend(auditor: CLI) -> None:
    (auditor.cwd / "e.json").write_bytes((FIXTURES / "v2-completed.json").read_bytes())
    out = auditor.json("verify-evidence", "e.json", "--verifier-key", KEY, "--require-head")
    assert out["ok"] is True and out["spend"] is None
    proc = auditor.run("verify-evidence", "e.json", "--verifier-key", KEY)
    assert proc.returncode == 0 and "NO SPEND" in proc.stdout
    out = auditor.json("verify-evidence", "e.json", "--verifier-key", KEY, "--require-spend",
                       code=1)  # fmt: skip
    assert "proves nothing about what the run cost" in out["error"]["message"]


def test_a_dropped_cost_record_exits_1_naming_the_spend_head(spent: Spent, auditor: CLI) -> None:
    doc = copy.deepcopy(spent.costly)
    gone = doc["costs"]["events"].pop()["position"]
    doc["costs"]["proofs"] = [p for p in doc["costs"]["proofs"] if p["position"] != gone]
    name = _write(auditor, _reseal(doc))
    out = auditor.json("verify-evidence", name, "--verifier-key", KEY, code=1)
    assert "spend records were dropped or added" in out["error"]["message"]
    proc = auditor.run("verify-evidence", name, "--verifier-key", KEY)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
