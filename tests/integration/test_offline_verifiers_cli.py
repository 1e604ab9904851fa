"""`verify-proof` and `verify-evidence` as a third party runs them: a fresh machine, only the
public key, and files an adversary edited. Exit 1 with a readable message (JSON with
--json), never a traceback, never an OK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_cli import CLI, _lines
from tests.unit.export.test_evidence import VERIFIER, _run
from tracebound.export.evidence import integrity_hash


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[CLI, dict[str, Any], str]:
    """A ledger of 7 events, signed; the proof of position 3 (stream run-0) and the key."""
    cli = CLI(tmp_path_factory.mktemp("review-cli"))
    cli.json("init")
    pub = cli.json("keys", "init")["verifier_key"]
    cli.json("append", stdin=_lines(7))
    cli.json("checkpoint")
    proc = cli.run("prove", "3", "-o", "p3.json")
    assert proc.returncode == 0, proc.stderr
    bundle: dict[str, Any] = json.loads((cli.cwd / "p3.json").read_text())
    return cli, bundle, pub


@pytest.fixture
def auditor(tmp_path: Path) -> CLI:
    """Another machine: no store, no keys, nothing but what it is handed."""
    return CLI(tmp_path / "auditor")


def _write(auditor: CLI, data: bytes | dict[str, Any] | str) -> str:
    path = auditor.cwd / "proof.json"
    if isinstance(data, dict):
        data = json.dumps(data)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path.name


def test_a_third_party_checks_a_proof_with_only_the_public_key(
    signed: tuple[CLI, dict[str, Any], str], auditor: CLI
) -> None:
    _, bundle, pub = signed
    name = _write(auditor, bundle)
    out = auditor.json("verify-proof", name, "--verifier-key", pub)
    assert (out["ok"], out["position"], out["stream_id"]) == (True, 3, "run-0")
    origin = out["origin"]
    assert auditor.json("verify-proof", name, "--verifier-key", pub, "--origin", origin)["ok"]
    wrong = auditor.json(
        "verify-proof", name, "--verifier-key", pub, "--origin", "other.example/log", code=1
    )
    assert wrong["error"]["kind"] == "CheckpointError" and origin in wrong["error"]["message"]
    text = auditor.run("verify-proof", name, "--verifier-key", pub)
    assert text.returncode == 0 and "position 3 (stream run-0)" in text.stdout


def test_a_bundle_relabelled_to_another_stream_is_refused(
    signed: tuple[CLI, dict[str, Any], str], auditor: CLI
) -> None:
    """The known finding: the bundle's stream_id was not checked against its record."""
    _, bundle, pub = signed
    name = _write(auditor, {**bundle, "stream_id": "run-1"})
    out = auditor.json("verify-proof", name, "--verifier-key", pub, code=1)
    assert out["ok"] is False
    assert out["error"]["kind"] == "BundleFieldMismatch"
    assert "stream_id" in out["error"]["message"] and "'run-1'" in out["error"]["message"]
    proc = auditor.run("verify-proof", name, "--verifier-key", pub)
    assert proc.returncode == 1 and "stream_id" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda b: "[]", "not an object"),
        (lambda b: "null", "not an object"),
        (lambda b: json.dumps(b).replace('"position": 3', '"position": 1e400'), "not JSON"),
        (lambda b: "[" * 50_000 + "]" * 50_000, "not JSON"),
        (lambda b: json.dumps(b)[:-1] + ', "stream_id": "run-0"}', "appears twice"),
        (lambda b: json.dumps({**b, "position": "3"}), "position must be an integer"),
        (lambda b: json.dumps({**b, "tree_size": 3.5}), "tree_size must be an integer"),
        (lambda b: json.dumps({**b, "note": "approved"}), "unknown member"),
        (lambda b: json.dumps({**b, "hash": b["hash"].upper()}), "hash must be"),
    ],
)
def test_malformed_bundles_give_a_json_error_and_exit_1(
    signed: tuple[CLI, dict[str, Any], str], auditor: CLI, edit: Any, says: str
) -> None:
    _, bundle, pub = signed
    name = _write(auditor, edit(bundle))
    out = auditor.json("verify-proof", name, "--verifier-key", pub, code=1)
    assert out["error"]["kind"] == "ProofError", out
    assert says in out["error"]["message"]


def test_bytes_that_are_not_utf8_are_not_a_proof(
    signed: tuple[CLI, dict[str, Any], str], auditor: CLI
) -> None:
    """Exit 1 (not a valid proof), as documented; 2 is for files that cannot be read."""
    _, bundle, pub = signed
    name = _write(auditor, json.dumps(bundle).encode().replace(b"run-0", b"run-\xff"))
    out = auditor.json("verify-proof", name, "--verifier-key", pub, code=1)
    assert out["error"]["kind"] == "ProofError" and "not UTF-8" in out["error"]["message"]


def test_markup_in_a_hostile_file_is_printed_not_interpreted(
    signed: tuple[CLI, dict[str, Any], str], auditor: CLI
) -> None:
    """A message quoting "[/x]" made rich raise MarkupError: a traceback and exit 1."""
    _, bundle, pub = signed
    name = _write(auditor, {**bundle, "stream_id": "[/x]"})
    proc = auditor.run("verify-proof", name, "--verifier-key", pub)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "[/x]" in proc.stderr


def test_a_third_party_checks_evidence_with_only_the_key_text(tmp_path: Path, auditor: CLI) -> None:
    """docs/pipeline.md section 7: `verify-evidence` needs only the verifier key."""
    _, path = _run(tmp_path / "writer", ticket="T-3")
    doc = json.loads(path.read_text())
    key = VERIFIER.format()
    (auditor.cwd / "e.json").write_text(path.read_text())
    out = auditor.json("verify-evidence", "e.json", "--verifier-key", key)
    assert out["ok"] and out["signed"] and out["status"] == "completed"
    assert auditor.json(
        "verify-evidence", "e.json", "--verifier-key", key, "--origin", out["origin"]
    )
    other = auditor.json(
        "verify-evidence", "e.json", "--verifier-key", key, "--origin", "other.example/log", code=1
    )
    assert (
        other["error"]["kind"] == "EvidenceInvalid" and out["origin"] in other["error"]["message"]
    )

    doc["status"] = "running"  # a forger hides how the run ended, and reseals
    doc["integrity"]["hash"] = integrity_hash(doc)
    (auditor.cwd / "e.json").write_text(json.dumps(doc))
    bad = auditor.json("verify-evidence", "e.json", "--verifier-key", key, code=1)
    assert bad["error"]["kind"] == "EvidenceInvalid" and "running" in bad["error"]["message"]

    doc["status"] = []
    doc["integrity"]["hash"] = integrity_hash(doc)
    (auditor.cwd / "e.json").write_text(json.dumps(doc))
    proc = auditor.run("verify-evidence", "e.json", "--verifier-key", key, "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["error"]["kind"] == "EvidenceInvalid"
