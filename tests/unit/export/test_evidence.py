"""Evidence files: written at the end of each run, checked offline, and every tamper caught."""

from __future__ import annotations

import base64
import copy
import json
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.pipeline_kit import SECRET, Kit
from tests.unit.replay import replay_pipelines as rp

from tracebound import FixedClock, Ledger, NoteSigner, SequentialIds, SQLiteStore
from tracebound.errors import KeyRotationRefused
from tracebound.events.catalog import CostIncurred, RunFinished, StepRecorded
from tracebound.export.evidence import (
    EvidenceInvalid,
    EvidenceWriter,
    build_evidence,
    integrity_hash,
    verify_evidence,
    write_evidence,
)
from tracebound.ids import RunId, StepId
from tracebound.integrity.keys import NoteVerifier
from tracebound.pipeline.runner import Runner, approve, run_stream

VERIFIER = NoteSigner("kit", bytes(32)).verifier


def _run(tmp_path: Path, pipeline: Any = rp.repaired, **inputs: Any) -> tuple[Runner, Path]:
    writer = EvidenceWriter(tmp_path / "evidence")
    runner = rp.make_runner(tmp_path, evidence=writer)
    result = runner.run(pipeline, inputs or {"ticket": "T-1"})
    return runner, writer.written[-1] if writer.written else tmp_path / f"{result.run_id}.json"


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _reseal(doc: dict[str, Any]) -> dict[str, Any]:
    """What a forger would do after editing: recompute the (unkeyed) integrity hash."""
    doc["integrity"]["hash"] = integrity_hash(doc)
    return doc


def test_each_run_writes_evidence_that_verifies_offline(tmp_path: Path) -> None:
    runner, path = _run(tmp_path, ticket="T-1", note=f"use {SECRET}")
    run_id = path.stem
    assert path == tmp_path / "evidence" / f"{run_id}.json"
    report = verify_evidence(path, VERIFIER)
    stream = list(runner.ledger.store.read_stream(run_stream(run_id)))
    assert (report.run_id, report.pipeline, report.status) == (run_id, "repaired", "completed")
    assert report.signed and report.events == len(stream)
    assert report.tree_size == runner.ledger.store.size()  # checkpointed at the end of the run

    doc = _load(path)
    assert [e["hash"] for e in doc["events"]] == [e.hash.hex() for e in stream]
    assert [base64.b64decode(e["body"]) for e in doc["events"]] == [
        r.body for r in runner.ledger.store.read_raw() if r.stream_id == run_stream(run_id)
    ]
    listed = {(a["kind"], a["step_id"], a["digest"]): a["present"] for a in doc["artifacts"]}
    for e in stream:
        if isinstance(e.payload, StepRecorded):
            assert listed[("artifact", e.payload.step_id, e.payload.artifact_hash)] is True
    # The ledger holds only redacted data, and the evidence only what the ledger holds.
    assert SECRET not in path.read_text()
    assert SECRET not in json.dumps([base64.b64decode(e["body"]).decode() for e in doc["events"]])


def test_a_gated_run_writes_evidence_then_rewrites_it_when_done(tmp_path: Path) -> None:
    writer = EvidenceWriter(tmp_path / "evidence")
    runner = rp.make_runner(tmp_path, evidence=writer)
    first = runner.run(rp.gated, {})
    assert verify_evidence(writer.written[-1], VERIFIER).status == "gated"
    approve(runner.ledger, RunId(first.run_id), StepId("execute"), "alice",
            codeowners=runner.codeowners)  # fmt: skip
    runner.resume(rp.gated, first.run_id)
    assert writer.written[0] == writer.written[-1]
    report = verify_evidence(writer.written[-1], VERIFIER)
    assert report.status == "completed"
    assert any(e["event_type"] == "approval_recorded" for e in _load(writer.written[-1])["events"])


def test_a_critical_run_with_slo_alerts_verifies(tmp_path: Path) -> None:
    _, path = _run(tmp_path, rp.harmful)
    doc = _load(path)
    kinds = [e["event_type"] for e in doc["events"]]
    assert kinds[-3:] == ["run_finished", "slo_alert_raised", "slo_alert_raised"]
    assert verify_evidence(path, VERIFIER).status == "failed"
    del doc["events"][-3]  # the run_finished: what is left ends in alerts only
    doc["proofs"] = doc["proofs"][:-1]
    _rejects(_reseal(doc), "chain")


def test_batched_proofs_equal_ledger_prove_across_leaf_chunks(tmp_path: Path) -> None:
    runner = rp.make_runner(tmp_path)
    filler = CostIncurred(tier="direct", amount_usd="0.01", source="llm")  # type: ignore[arg-type]
    runner.ledger.record("filler", [filler] * 5000)
    result = runner.run(rp.deterministic, {})
    runner.ledger.record("filler", [filler] * 300)
    runner.ledger.checkpoint()
    doc = build_evidence(runner.ledger, runner.blobs, result.run_id)
    assert doc["tree_size"] == 5300 + len(doc["events"])
    for proof in doc["proofs"]:
        expected = runner.ledger.prove(proof["position"]).proof
        assert proof["proof"] == [h.hex() for h in expected]
    assert verify_evidence(doc, VERIFIER).signed


def test_without_a_signer_the_evidence_is_unsigned_and_says_so(tmp_path: Path) -> None:
    kit = Kit(tmp_path)
    ledger = Ledger(SQLiteStore(kit.store_dir), clock=FixedClock(), ids=SequentialIds(9),
                    origin="test.example/kit")  # fmt: skip
    writer = EvidenceWriter(tmp_path / "evidence")
    runner = rp.make_runner(tmp_path, evidence=writer)
    runner.ledger = ledger
    runner.run(rp.deterministic, {})
    doc = _load(writer.written[-1])
    assert (doc["checkpoint"], doc["tree_size"], doc["proofs"]) == (None, None, [])
    with pytest.raises(EvidenceInvalid) as info:
        verify_evidence(doc, VERIFIER)
    assert info.value.part == "checkpoint"
    assert not verify_evidence(doc, VERIFIER, require_signed=False).signed


# -- tampering ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    _, path = _run(tmp_path_factory.mktemp("evidence"), ticket="T-9")
    return _load(path)


def _rejects(doc: dict[str, Any], part: str, verifier: NoteVerifier = VERIFIER) -> str:
    with pytest.raises(EvidenceInvalid) as info:
        verify_evidence(doc, verifier)
    assert info.value.part == part, info.value
    return str(info.value)


def _flip(text: str) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[len(raw) // 2] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def test_a_flipped_byte_in_a_record_is_caught(evidence: dict[str, Any]) -> None:
    doc = copy.deepcopy(evidence)
    doc["events"][2]["body"] = _flip(doc["events"][2]["body"])
    _rejects(doc, "integrity")
    message = _rejects(_reseal(doc), "record")
    assert f"position {doc['events'][2]['position']}" in message


@pytest.mark.parametrize("index", [1, 3, -1])
def test_a_dropped_event_is_caught(evidence: dict[str, Any], index: int) -> None:
    doc = copy.deepcopy(evidence)
    del doc["events"][index]
    doc["proofs"] = [p for p in doc["proofs"] if p["position"] in
                     {e["position"] for e in doc["events"]}]  # fmt: skip
    _rejects(doc, "integrity")
    _rejects(_reseal(doc), "chain")


def test_reordered_events_are_caught(evidence: dict[str, Any]) -> None:
    doc = copy.deepcopy(evidence)
    doc["events"][1], doc["events"][2] = doc["events"][2], doc["events"][1]
    _rejects(_reseal(doc), "chain")


def test_an_edited_checkpoint_is_caught(evidence: dict[str, Any]) -> None:
    doc = copy.deepcopy(evidence)
    origin, size, *rest = doc["checkpoint"].split("\n")
    doc["checkpoint"] = "\n".join([origin, str(int(size) + 1), *rest])
    _rejects(doc, "integrity")
    _rejects(_reseal(doc), "checkpoint")


def test_another_key_is_refused(evidence: dict[str, Any]) -> None:
    other = NoteSigner("kit", bytes([7]) * 32).verifier
    _rejects(copy.deepcopy(evidence), "checkpoint", verifier=other)


def test_an_edited_digest_is_caught(evidence: dict[str, Any]) -> None:
    doc = copy.deepcopy(evidence)
    entry = next(a for a in doc["artifacts"] if a["kind"] == "artifact")
    entry["digest"] = "sha256:" + "0" * 64
    _rejects(doc, "integrity")
    message = _rejects(_reseal(doc), "digests")
    assert entry["step_id"] in message or "0" * 64 in message


def test_an_unlisted_digest_is_caught(evidence: dict[str, Any]) -> None:
    doc = copy.deepcopy(evidence)
    doc["artifacts"] = [a for a in doc["artifacts"] if a["kind"] != "artifact"]
    _rejects(_reseal(doc), "digests")


def test_an_edited_proof_is_caught(evidence: dict[str, Any]) -> None:
    doc = copy.deepcopy(evidence)
    proof = next(p for p in doc["proofs"] if p["proof"])
    proof["proof"][0] = "00" * 32
    _rejects(_reseal(doc), "proof")
    doc = copy.deepcopy(evidence)
    doc["proofs"].pop()
    _rejects(_reseal(doc), "proof")


def test_stripping_the_signature_is_caught(evidence: dict[str, Any]) -> None:
    doc = copy.deepcopy(evidence)
    doc["checkpoint"] = None
    _rejects(_reseal(doc), "checkpoint")
    with pytest.raises(EvidenceInvalid, match="proofs without a checkpoint"):
        verify_evidence(doc, VERIFIER, require_signed=False)


def test_other_documents_are_not_evidence(tmp_path: Path, evidence: dict[str, Any]) -> None:
    path = tmp_path / "e.json"
    path.write_text("[]")
    with pytest.raises(EvidenceInvalid, match="format"):
        verify_evidence(path, VERIFIER)
    path.write_text("{not json")
    with pytest.raises(EvidenceInvalid, match="format"):
        verify_evidence(path, VERIFIER)
    _rejects({**copy.deepcopy(evidence), "format": "tracebound-evidence/0"}, "format")


def test_evidence_errors_survive_pickling() -> None:
    error = EvidenceInvalid("proof", "position 3: wrong root")
    back = pickle.loads(pickle.dumps(error))
    assert (back.part, back.detail, str(back)) == (error.part, error.detail, str(error))


def _positions(text: str) -> list[int]:
    return [i for i, c in enumerate(text) if not c.isspace()]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_mutation_of_an_evidence_file_is_rejected(
    evidence: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    text = json.dumps(evidence, indent=2, sort_keys=True)
    positions = _positions(text)
    where = data.draw(st.sampled_from(positions), label="offset")
    new = data.draw(
        st.characters(min_codepoint=0x21, max_codepoint=0x7E).filter(lambda c: c != text[where]),
        label="byte",
    )
    mutated = text[:where] + new + text[where + 1 :]
    path = tmp_path_factory.mktemp("mutated") / "evidence.json"
    path.write_text(mutated)
    with pytest.raises(EvidenceInvalid):
        verify_evidence(path, VERIFIER)


def test_write_evidence_rewrites_a_run_on_demand(tmp_path: Path) -> None:
    runner, path = _run(tmp_path)
    again = write_evidence(runner.ledger, runner.blobs, path.stem, tmp_path / "again")
    assert again.name == path.name
    assert _load(again) == _load(path)  # same ledger, same checkpoint: same bytes


def test_after_a_key_rotation_evidence_is_signed_by_the_new_key(tmp_path: Path) -> None:
    """ADR 0017: a run after `keys rotate` is signed (checkpoint and run head) by the new
    key; checked with the retired key it is refused, naming both keys and the rotation."""
    writer = EvidenceWriter(tmp_path / "evidence")
    runner = rp.make_runner(tmp_path, evidence=writer)
    runner.run(rp.repaired, {"ticket": "T-1"})
    new = NoteSigner("kit", bytes([9]) * 32)
    runner.ledger.rotate_key(new, rotated_by="alice", reason="yearly")
    runner.run(rp.repaired, {"ticket": "T-2"})
    first, second = writer.written
    verify_evidence(first, VERIFIER)  # written before the rotation: the old key's
    report = verify_evidence(second, new.verifier)
    assert report.signed and report.tree_size == runner.ledger.store.size()
    with pytest.raises(EvidenceInvalid) as info:
        verify_evidence(second, VERIFIER)
    message = str(info.value)
    assert f"{VERIFIER.key_hash:08x}" in message and f"{new.verifier.key_hash:08x}" in message
    assert "keys rotate" in message
    assert runner.ledger.verify().ok


def test_a_rotation_elsewhere_while_a_run_goes_on_says_the_run_ended_without_evidence(
    tmp_path: Path,
) -> None:
    """Another process (another host) rotates the key while a run goes on: when it ends,
    its evidence checkpoint with the retired key is refused. Before, the refusal said only
    that the key was retired: nothing said the run had ended (recorded completed) and
    only its evidence was missing, so a rerun of a run that had applied its changes
    looked like the fix."""
    writer = EvidenceWriter(tmp_path / "evidence")
    elsewhere = Kit(tmp_path).ledger()

    def rotate_then_write(ledger: Ledger, blobs: Any, run_id: RunId) -> Path:
        elsewhere.rotate_key(NoteSigner("kit", bytes([9]) * 32), rotated_by="alice")
        return writer(ledger, blobs, run_id)

    runner = rp.make_runner(tmp_path, evidence=rotate_then_write)
    with pytest.raises(KeyRotationRefused) as info:
        runner.run(rp.repaired, {"ticket": "T-1"})
    message = str(info.value)
    found = re.search(r"run (\S+) ended completed", message)
    assert found is not None, message
    run_id = found.group(1)
    (*_, last) = runner.ledger.store.read_stream(run_stream(run_id))
    assert isinstance(last.payload, RunFinished) and last.payload.status == "completed"
    assert "retired" in message and f"tracebound export evidence {run_id}" in message
    assert not writer.written
