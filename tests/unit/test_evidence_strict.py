"""Evidence files as a forger edits them: the integrity hash is unkeyed, so every edit below
is resealed first, and only the signed records can refuse it.

Review findings: ``status`` could be set to ``running`` for a finished run, ``pipeline_type``
and ``critical`` changed or dropped, unknown members added anywhere, an artifact listed
twice, a key given twice in one object (parsers disagree on which wins), all accepted; a
list as ``status`` raised a raw ``TypeError``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.export.test_evidence import VERIFIER, _run

from tracebound import NoteSigner
from tracebound.errors import CheckpointError, TraceboundError
from tracebound.export.evidence import EvidenceInvalid, integrity_hash, verify_evidence
from tracebound.integrity.note import Checkpoint, SignedNote, parse_checkpoint, sign_checkpoint


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    _, path = _run(tmp_path_factory.mktemp("review-evidence"), ticket="T-7")
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _reseal(doc: dict[str, Any]) -> dict[str, Any]:
    doc["integrity"]["hash"] = integrity_hash(doc)
    return doc


def _rejects(doc: Any, part: str) -> str:
    with pytest.raises(EvidenceInvalid) as info:
        verify_evidence(doc, VERIFIER)
    assert info.value.part == part, info.value
    return str(info.value)


def test_the_file_as_written_verifies(evidence: dict[str, Any]) -> None:
    report = verify_evidence(copy.deepcopy(evidence), VERIFIER, origin="test.example/kit")
    assert report.signed and report.status == "completed"


def test_a_finished_run_cannot_be_relabelled_running(evidence: dict[str, Any]) -> None:
    doc = copy.deepcopy(evidence)
    doc["status"] = "running"
    assert "records it finishing" in _rejects(_reseal(doc), "chain")


def test_a_finished_run_relabelled_with_another_ending_is_named_as_such(
    evidence: dict[str, Any],
) -> None:
    doc = copy.deepcopy(evidence)
    doc["status"] = "failed"
    message = _rejects(_reseal(doc), "chain")
    # Before: "the stream does not end with the run finishing as 'failed': truncated", and
    # nothing was cut off: the file names another ending than its run_finished records.
    assert "truncated" not in message
    assert "ends with the run finishing as 'completed', not as the 'failed'" in message
    doc = copy.deepcopy(evidence)  # a stream that was cut off is still said to be so
    doc["events"], doc["proofs"] = doc["events"][:-1], doc["proofs"][:-1]
    assert "truncated" in _rejects(_reseal(doc), "chain")


@pytest.mark.parametrize(
    ("member", "value"),
    [("pipeline_type", "other"), ("pipeline_type", None), ("critical", True), ("critical", 0)],
)
def test_run_started_fields_must_match(evidence: dict[str, Any], member: str, value: Any) -> None:
    doc = copy.deepcopy(evidence)
    doc[member] = value
    assert member in _rejects(_reseal(doc), "record")


@pytest.mark.parametrize("member", ["pipeline_type", "critical"])
def test_run_started_fields_may_not_be_dropped(evidence: dict[str, Any], member: str) -> None:
    doc = copy.deepcopy(evidence)
    del doc[member]
    assert member in _rejects(_reseal(doc), "record")


@pytest.mark.parametrize("status", [[], {}, 1, None, True])
def test_a_status_of_another_type_is_an_error_not_a_crash(
    evidence: dict[str, Any], status: Any
) -> None:
    doc = copy.deepcopy(evidence)
    doc["status"] = status
    _rejects(_reseal(doc), "format")


@pytest.mark.parametrize(
    ("where", "part"),
    [("top", "format"), ("event", "record"), ("artifact", "digests"), ("proof", "proof")],
)
def test_unknown_members_are_refused(evidence: dict[str, Any], where: str, part: str) -> None:
    doc = copy.deepcopy(evidence)
    target = {
        "top": doc,
        "event": doc["events"][0],
        "artifact": doc["artifacts"][0],
        "proof": doc["proofs"][0],
    }[where]
    target["approved_by"] = "the CISO"
    assert "'approved_by'" in _rejects(_reseal(doc), part)


def test_an_artifact_listed_twice_is_refused(evidence: dict[str, Any]) -> None:
    doc = copy.deepcopy(evidence)
    doc["artifacts"].append(doc["artifacts"][0])
    assert "listed twice" in _rejects(_reseal(doc), "digests")


def test_a_key_twice_in_one_object_is_refused(evidence: dict[str, Any], tmp_path: Path) -> None:
    """A first-wins reader would see ``failed``; the verifier (last wins) ``completed``."""
    text = json.dumps(evidence)
    assert text.count('"status": "completed"') == 1
    forged = text.replace('"status": "completed"', '"status": "failed", "status": "completed"')
    path = tmp_path / "dup.json"
    path.write_text(forged)
    assert "'status' appears twice" in _rejects(path, "format")


def test_bytes_that_are_not_utf8_are_named(evidence: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "bin.json"
    path.write_bytes(json.dumps(evidence).encode().replace(b'"completed"', b'"compl\xffeted"'))
    assert "not UTF-8" in _rejects(path, "format")


def test_a_checkpoint_of_another_origin_is_refused_when_one_is_expected(
    evidence: dict[str, Any],
) -> None:
    doc = copy.deepcopy(evidence)
    cp = parse_checkpoint(SignedNote.parse(doc["checkpoint"]).text)
    doc["checkpoint"] = sign_checkpoint(
        Checkpoint("evil.example/log", cp.size, cp.root), NoteSigner("kit", bytes(32))
    )
    # The signed run head names the real origin and tree: refused beside another checkpoint.
    with pytest.raises(EvidenceInvalid) as head:
        verify_evidence(_reseal(doc), VERIFIER)
    assert head.value.part == "head"
    doc["run_head"] = doc["costs"]["head"] = None  # a file without heads: the origin check alone
    _reseal(doc)
    assert verify_evidence(doc, VERIFIER).origin == "evil.example/log"  # named in the report
    with pytest.raises(EvidenceInvalid) as info:
        verify_evidence(doc, VERIFIER, origin="test.example/kit")
    assert info.value.part == "checkpoint" and "evil.example/log" in str(info.value)
    assert isinstance(info.value.__cause__, CheckpointError)


# -- fuzzing ---------------------------------------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=5,
)


def _paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(value, dict):
        for k, v in value.items():
            if here == () and k == "integrity":
                continue  # resealed below; its edits are the integrity check's
            out += _paths(v, (*here, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:4]):
            out += _paths(v, (*here, i))
    return out


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_resealed_edit_is_refused_with_a_typed_error(
    evidence: dict[str, Any], data: st.DataObject
) -> None:
    doc = copy.deepcopy(evidence)
    paths = [p for p in _paths(doc) if p]
    path = data.draw(st.sampled_from(paths), label="path")
    parent: Any = doc
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    action = data.draw(st.sampled_from(["replace", "delete", "add"]), label="action")
    if action == "delete":
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[data.draw(st.text(min_size=1, max_size=6), label="key")] = data.draw(_json)
    else:
        parent[last] = data.draw(_json, label="value")
    if doc == evidence:
        return
    if path[-1] == "present" and isinstance(parent.get("present"), bool):
        return  # whether a blob was still present is the writer's word (documented)
    if action == "delete" and isinstance(parent, list) and path[0] == "proofs":
        pass  # a dropped proof is refused: one proof per event
    _reseal(doc)
    stripped_spend = path == ("costs", "head") and doc["costs"].get("head", "absent") is None
    if (path == ("run_head",) and doc.get("run_head", "absent") is None) or stripped_spend:
        # A stripped head reads as a file written without one (documented: the integrity
        # hash is unkeyed); such a file is refused only where a head is required.
        verify_evidence(copy.deepcopy(doc), VERIFIER)
        with pytest.raises(EvidenceInvalid) as stripped:
            verify_evidence(doc, VERIFIER, require_head=True)
        assert stripped.value.part == "head"
        return
    with pytest.raises(TraceboundError) as info:
        verify_evidence(doc, VERIFIER)
    assert isinstance(info.value, EvidenceInvalid), repr(info.value)
    assert info.value.detail
