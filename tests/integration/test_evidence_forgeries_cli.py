"""Forged evidence and proofs as a third party's `verify-evidence` / `verify-proof` see them:
only the verifier key, files a forger edited (and resealed), exit 1 with a typed JSON error,
never a traceback, never exit 0. The Python side of each case is in
tests/unit/export/test_evidence_forgeries.py."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_cli import CLI
from tests.unit.export.test_evidence import VERIFIER
from tests.unit.export.test_evidence_forgeries import (
    OWNER,
    World,
    _cut_to_gate,
    _dup_status,
    _owner_signs,
    _reseal,
    world,  # noqa: F401 - the module fixture, shared
)
from tracebound import NoteSigner
from tracebound.integrity.chain import chain_hash
from tracebound.integrity.merkle import inclusion_proof_from_leaves, leaf_hash, node_hash, root_of
from tracebound.integrity.note import Checkpoint, SignedNote, sign_checkpoint

KEY = VERIFIER.format()


@pytest.fixture
def auditor(tmp_path: Path) -> CLI:
    return CLI(tmp_path / "auditor")


def _unsigned_proofs_object(w: World) -> dict[str, Any]:
    doc = copy.deepcopy(w.first)
    doc.update(checkpoint=None, tree_size=None, proofs={})
    return _reseal(doc)


def _interior(w: World) -> dict[str, Any]:
    doc = copy.deepcopy(w.first)
    a, b = (bytes.fromhex(e["hash"]) for e in doc["events"][:2])
    doc["events"][0]["hash"] = node_hash(leaf_hash(a), leaf_hash(b)).hex()
    doc["proofs"][0]["proof"] = doc["proofs"][0]["proof"][1:]
    return _reseal(doc)


def _splice(w: World) -> dict[str, Any]:
    doc = copy.deepcopy(w.again)
    doc["events"][1] = copy.deepcopy(w.second["events"][1])
    doc["proofs"][1] = copy.deepcopy(w.second["proofs"][1])
    return _reseal(doc)


def _older_checkpoint(w: World) -> dict[str, Any]:
    doc = copy.deepcopy(w.second)
    doc.update(checkpoint=w.first["checkpoint"], tree_size=w.first["tree_size"])
    return _reseal(doc)


def _crlf(w: World) -> dict[str, Any]:
    doc = copy.deepcopy(w.first)
    doc["checkpoint"] = doc["checkpoint"].replace("\n", "\r\n")
    return _reseal(doc)


def _bad_then_good_signature(w: World) -> dict[str, Any]:
    doc = copy.deepcopy(w.first)
    parsed = SignedNote.parse(doc["checkpoint"])
    (line,) = parsed.signatures
    bad = line.__class__(line.name, line.key_hash, bytes(len(line.signature)))
    doc["checkpoint"] = parsed.text + "\n" + bad.format() + line.format()
    return _reseal(doc)


def _head_by_another_key(w: World) -> dict[str, Any]:
    doc = copy.deepcopy(w.resumed)
    text = SignedNote.parse(doc["run_head"]).text
    doc["run_head"] = SignedNote.sign(text, NoteSigner("kit", bytes([9]) * 32)).encode()
    return _reseal(doc)


FORGERIES: dict[str, tuple[Callable[[World], dict[str, Any]], str]] = {
    "a record with a key twice, signed": (
        lambda w: _owner_signs(_dup_status(copy.deepcopy(w.first))),
        "appears twice",
    ),
    "unsigned, proofs {}": (_unsigned_proofs_object, "unsigned file"),
    "a hash posing as an interior node": (_interior, "hash"),
    "an event of another run": (_splice, "disagree"),
    "events past an older checkpoint": (_older_checkpoint, "outside a tree"),
    "a CRLF note": (_crlf, "U+000D"),
    "a bad signature line before the good one": (_bad_then_good_signature, "bad signature"),
    "the gate's head on the resumed file": (
        lambda w: _reseal({**copy.deepcopy(w.resumed), "run_head": w.gated["run_head"]}),
        "tree of",
    ),
    "another run's head": (
        lambda w: _reseal({**copy.deepcopy(w.again), "run_head": w.second["run_head"]}),
        "is for run",
    ),
    "a head signed by another key": (_head_by_another_key, "not signed by"),
}


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_forged_evidence_file_exits_1_with_a_typed_error(
    world: World,  # noqa: F811 - the shared fixture
    auditor: CLI,
    name: str,
) -> None:
    make, says = FORGERIES[name]
    (auditor.cwd / "e.json").write_text(json.dumps(make(world)))
    out = auditor.json("verify-evidence", "e.json", "--verifier-key", KEY, code=1)
    assert out["ok"] is False and out["error"]["kind"] == "EvidenceInvalid", out
    assert says in out["error"]["message"], out
    proc = auditor.run("verify-evidence", "e.json", "--verifier-key", KEY)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert "OK" not in proc.stdout


def test_a_run_cut_back_to_its_gate_is_refused_by_its_head(
    world: World,  # noqa: F811 - the shared fixture
    auditor: CLI,
) -> None:
    """Cut back with the signed run head kept: exit 1. With the head stripped: it verifies
    (exit 0) as files without a head always did, says so, and ``--require-head`` refuses it."""
    doc = _reseal(_cut_to_gate(copy.deepcopy(world.resumed)))
    (auditor.cwd / "e.json").write_text(json.dumps(doc))
    out = auditor.json("verify-evidence", "e.json", "--verifier-key", KEY, code=1)
    assert out["ok"] is False and out["error"]["kind"] == "EvidenceInvalid", out
    assert "head check failed" in out["error"]["message"]
    assert "cut back" in out["error"]["message"]
    proc = auditor.run("verify-evidence", "e.json", "--verifier-key", KEY)
    assert proc.returncode == 1 and "OK" not in proc.stdout and "Traceback" not in proc.stderr

    doc["run_head"] = None
    (auditor.cwd / "e.json").write_text(json.dumps(_reseal(doc)))
    out = auditor.json("verify-evidence", "e.json", "--verifier-key", KEY)
    said = (out["ok"], out["status"], out["final"], out["run_head"])
    assert said == (True, "gated", False, None)
    proc = auditor.run("verify-evidence", "e.json", "--verifier-key", KEY)
    assert proc.returncode == 0 and "NOT FINAL" in proc.stdout and "NO RUN HEAD" in proc.stdout
    args = ("verify-evidence", "e.json", "--verifier-key", KEY, "--require-head")
    out = auditor.json(*args, code=1)
    assert out["error"]["kind"] == "EvidenceInvalid"
    assert "no signed run head" in out["error"]["message"]
    proc = auditor.run(*args)
    assert proc.returncode == 1 and "OK" not in proc.stdout


def test_a_genuine_file_reports_its_signed_head(
    world: World,  # noqa: F811 - the shared fixture
    auditor: CLI,
) -> None:
    (auditor.cwd / "e.json").write_text(json.dumps(world.resumed))
    args = ("verify-evidence", "e.json", "--verifier-key", KEY, "--require-head")
    out = auditor.json(*args)
    last = world.resumed["events"][-1]
    assert (out["ok"], out["status"], out["final"]) == (True, "completed", True)
    assert out["run_head"] == {
        "stream_version": last["stream_version"],
        "hash": last["hash"],
        "status": "completed",
        "tree_size": world.resumed["tree_size"],
    }
    proc = auditor.run(*args)
    assert proc.returncode == 0 and "OK" in proc.stdout
    assert "NOT FINAL" not in proc.stdout and "NO RUN HEAD" not in proc.stdout


# -- verify-proof -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundle(world: World) -> dict[str, Any]:  # noqa: F811 - the shared fixture
    """A genuine `prove` bundle of run A's run_finished, as the evidence file states it."""
    doc = world.first
    event, proof = doc["events"][-1], doc["proofs"][-1]
    return {
        "format": "tracebound-inclusion/1",
        "position": event["position"],
        "stream_id": doc["stream_id"],
        "prev_hash": event["prev_hash"],
        "hash": event["hash"],
        "record": event["body"],
        "tree_size": doc["tree_size"],
        "proof": proof["proof"],
        "checkpoint": doc["checkpoint"],
    }


def _dup_stream_bundle(b: dict[str, Any]) -> dict[str, Any]:
    """The record's bytes with stream_id twice (another run's first), signed by the owner
    in a tree where it sits at its own position (the other leaves are filler)."""
    body = base64.b64decode(b["record"])
    sid = f'"stream_id":"{b["stream_id"]}"'.encode()
    body = body.replace(sid, b'"stream_id":"run/other",' + sid)
    digest = chain_hash(bytes.fromhex(b["prev_hash"]), body)
    position = json.loads(body)["position"]
    leaves = [leaf_hash(bytes([i]) * 32) for i in range(position - 1)] + [leaf_hash(digest)]
    note = sign_checkpoint(Checkpoint("test.example/kit", position, root_of(leaves)), OWNER)
    proof = [h.hex() for h in inclusion_proof_from_leaves(leaves, position - 1)]
    record = base64.b64encode(body).decode()
    return {**b, "position": position, "hash": digest.hex(), "tree_size": position,
            "record": record, "proof": proof, "checkpoint": note}  # fmt: skip


PROOF_FORGERIES: dict[str, tuple[Callable[[dict[str, Any]], Any], str, str]] = {
    "the genuine bundle": (lambda b: b, "", ""),
    "an extra hash": (lambda b: {**b, "proof": [*b["proof"], "00" * 32]}, "ProofError", "longer"),
    "a missing hash": (lambda b: {**b, "proof": b["proof"][:-1]}, "ProofError", "shorter"),
    "position past the tree": (
        lambda b: {**b, "position": b["tree_size"] + 1},
        "ProofError",
        "outside",
    ),
    "a CRLF note": (
        lambda b: {**b, "checkpoint": b["checkpoint"].replace("\n", "\r\n")},
        "CheckpointError",
        "U+000D",
    ),
    "a record with stream_id twice": (_dup_stream_bundle, "ProofError", "appears twice"),
}


@pytest.mark.parametrize("name", list(PROOF_FORGERIES))
def test_a_forged_bundle_exits_1_with_a_typed_error(
    bundle: dict[str, Any], auditor: CLI, name: str
) -> None:
    make, kind, says = PROOF_FORGERIES[name]
    (auditor.cwd / "p.json").write_text(json.dumps(make(copy.deepcopy(bundle))))
    if not kind:
        out = auditor.json("verify-proof", "p.json", "--verifier-key", KEY)
        assert out["ok"] is True
        return
    out = auditor.json("verify-proof", "p.json", "--verifier-key", KEY, code=1)
    assert out["ok"] is False and out["error"]["kind"] == kind, out
    assert says in out["error"]["message"], out
    proc = auditor.run("verify-proof", "p.json", "--verifier-key", KEY)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
