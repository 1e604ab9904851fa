"""Forging evidence and proofs without the signing key: what an offline verifier must refuse.

Every artefact here is made for real (a recorded run, its evidence file, a `prove` bundle)
and then edited as a forger would: the integrity hash is unkeyed, so every edit is resealed.
The cases already covered elsewhere (a flipped byte, a dropped or reordered event, an edited
checkpoint, digest or proof, unknown members, a key twice at the top level, another origin)
are not repeated.

Review findings (security review of the offline verifiers):

* a record whose hashed bytes hold a key twice (``"status":"failed","status":"completed"``)
  was accepted once a checkpoint signed it: the verifier read the last value, a first-wins
  reader the first. Whoever holds the store files can write such a row before the owner's
  next checkpoint signs it (the checkpoint checks the chain, not the JSON), so the verifiers
  now refuse any record that is not in the canonical form the ledger writes;
* ``verify_bundle`` had the same gap for the record of a `prove` bundle;
* an unsigned file with ``"proofs": {}`` (or ``0``, ``false``) or without ``tree_size`` and
  ``proofs`` at all passed ``require_signed=False``; ``tree_size: true`` passed for a tree of
  one event (``True == 1``);
* a finished run cut back before its ``run_finished`` and relabelled ``running`` passed, and
  so did a resumed run cut back to its ``gated`` finish: no signed statement said where a
  run ends. Closed by the signed run head (tests/unit/export/test_evidence_run_head.py);
  with the head stripped they still verify, reported ``run_head=None`` and not final, and
  ``require_head=True`` refuses them.
"""

from __future__ import annotations

import base64
import copy
import json
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.pipeline_kit import Kit
from tests.unit.export.test_evidence import VERIFIER
from tests.unit.replay import replay_pipelines as rp

from tracebound import NoteSigner
from tracebound.errors import ProofError, TraceboundError
from tracebound.events.catalog import RunStarted
from tracebound.export.evidence import (
    EvidenceInvalid,
    EvidenceWriter,
    build_evidence,
    integrity_hash,
    verify_evidence,
)
from tracebound.ids import RunId, Sha256Digest, StepId
from tracebound.integrity.chain import chain_hash
from tracebound.integrity.merkle import (
    inclusion_proof_from_leaves,
    leaf_hash,
    node_hash,
    root_of,
)
from tracebound.integrity.note import Checkpoint, SignedNote, parse_checkpoint, sign_checkpoint
from tracebound.ledger import InclusionBundle, verify_bundle
from tracebound.pipeline.runner import approve, run_stream
from tracebound.store.blobs import FileBlobStore

# The integration kit's key (tests only): used solely to play the ledger's owner signing a
# checkpoint over a log a store holder edited first, never to play the forger.
OWNER = NoteSigner("kit", bytes(32))
ORIGIN = "test.example/kit"


class World(NamedTuple):
    first: dict[str, Any]  # run A's evidence as written at its end (tree = its own events)
    again: dict[str, Any]  # run A's evidence rebuilt after run B, against B's checkpoint
    second: dict[str, Any]  # run B's evidence
    gated: dict[str, Any]  # run C's evidence as written at its gate
    resumed: dict[str, Any]  # run C's evidence after approval and resume


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("forgeries")
    writer = EvidenceWriter(root / "evidence")
    runner = rp.make_runner(root, evidence=writer)

    def doc() -> dict[str, Any]:
        out: dict[str, Any] = json.loads(writer.written[-1].read_text())
        return out

    a = runner.run(rp.repaired, {"ticket": "T-1"})
    first = doc()
    runner.run(rp.repaired, {"ticket": "T-2"})
    second = doc()
    again = build_evidence(runner.ledger, runner.blobs, a.run_id)
    c = runner.run(rp.gated, {})
    gated = doc()
    approve(runner.ledger, RunId(c.run_id), StepId("execute"), "alice",
            codeowners=runner.codeowners)  # fmt: skip
    runner.resume(rp.gated, c.run_id)
    resumed = doc()
    assert first["tree_size"] == len(first["events"])  # the log held only run A
    assert again["checkpoint"] == second["checkpoint"]
    return World(first, again, second, gated, resumed)


def _reseal(doc: dict[str, Any]) -> dict[str, Any]:
    doc["integrity"]["hash"] = integrity_hash(doc)
    return doc


def _rejects(doc: Any, part: str, **kwargs: Any) -> str:
    with pytest.raises(EvidenceInvalid) as info:
        verify_evidence(doc, VERIFIER, **kwargs)
    assert info.value.part == part, info.value
    return str(info.value)


def _keep(doc: dict[str, Any], count: int) -> dict[str, Any]:
    """The first ``count`` events of the run, their proofs and the digests they name."""
    doc["events"] = doc["events"][:count]
    kept = {e["position"] for e in doc["events"]}
    doc["proofs"] = [p for p in doc["proofs"] if p["position"] in kept]
    named: set[tuple[str, Any, Any]] = set()
    for event in doc["events"]:
        p = json.loads(base64.b64decode(event["body"]))["payload"]
        if p["kind"] == "run_started":
            named.add(("inputs", None, p["inputs_digest"]))
        elif p["kind"] == "step_recorded":
            named.add(("artifact", p["step_id"], p["artifact_hash"]))
        elif p["kind"] == "validation_recorded" and p.get("output_digest") is not None:
            named.add(("validation-output", p["step_id"], p["output_digest"]))
    doc["artifacts"] = [
        a for a in doc["artifacts"] if (a["kind"], a["step_id"], a["digest"]) in named
    ]
    return doc


def _owner_signs(doc: dict[str, Any]) -> dict[str, Any]:
    """Recompute every link, leaf, proof and the checkpoint of a file whose log holds only
    this run: what the owner's next checkpoint signs after a store holder edited a row."""
    prev = bytes(32)
    for event in doc["events"]:
        event["prev_hash"] = prev.hex()
        body = base64.b64decode(event["body"])
        record = json.loads(body)  # last wins; only used for the fields beside the bytes
        assert record["prev_hash"] is not None
        prev = chain_hash(prev, body)
        event["hash"] = prev.hex()
    leaves = [leaf_hash(bytes.fromhex(e["hash"])) for e in doc["events"]]
    size = len(leaves)
    assert [e["position"] for e in doc["events"]] == list(range(1, size + 1))
    doc["proofs"] = [
        {"position": i + 1, "proof": [h.hex() for h in inclusion_proof_from_leaves(leaves, i)]}
        for i in range(size)
    ]
    doc["checkpoint"] = sign_checkpoint(Checkpoint(ORIGIN, size, root_of(leaves)), OWNER)
    doc["tree_size"] = size
    return _reseal(doc)


# -- records: what the verifier shows is what was hashed -----------------------------------


def test_an_edited_event_keeping_its_hash_and_proof_is_refused(world: World) -> None:
    """The leaf is recomputed from the bytes shown, not taken from the file's ``hash``."""
    doc = copy.deepcopy(world.first)
    event = doc["events"][-1]
    body = base64.b64decode(event["body"]).replace(b'"completed"', b'"failed"')
    event["body"] = base64.b64encode(body).decode()
    doc["status"] = "failed"
    assert "do not hash to its hash" in _rejects(_reseal(doc), "record")


def test_a_hash_posing_as_an_interior_node_is_refused(world: World) -> None:
    """Second preimage: the hash of leaves 0 and 1 as one record, with the path above them."""
    doc = copy.deepcopy(world.first)
    a, b = (bytes.fromhex(e["hash"]) for e in doc["events"][:2])
    interior = node_hash(leaf_hash(a), leaf_hash(b))
    doc["events"][0]["hash"] = interior.hex()
    doc["proofs"][0]["proof"] = doc["proofs"][0]["proof"][1:]
    _rejects(_reseal(doc), "record")


def _dup_status(doc: dict[str, Any]) -> dict[str, Any]:
    """The run_finished record's bytes with ``status`` twice: failed first, completed last."""
    event = doc["events"][-1]
    body = base64.b64decode(event["body"])
    assert body.count(b'"status":"completed"') == 1
    body = body.replace(b'"status":"completed"', b'"status":"failed","status":"completed"')
    event["body"] = base64.b64encode(body).decode()
    return doc


def test_a_signed_record_with_a_key_twice_is_refused(world: World) -> None:
    """Finding: a first-wins reader saw ``failed`` where the verifier reported ``completed``."""
    doc = _owner_signs(_dup_status(copy.deepcopy(world.first)))
    message = _rejects(doc, "record")
    assert "'status' appears twice" in message


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b'"status":"completed"', b'"status": "completed"'),  # a space
        (b'"status":"completed"', b'"status":"\\u0063ompleted"'),  # an escape
        (b'"kind":"run_finished"', b'"zz":1,"kind":"run_finished"'),  # a member out of order
    ],
)
def test_a_signed_record_not_in_canonical_form_is_refused(
    world: World, old: bytes, new: bytes
) -> None:
    """The ledger writes RFC 8785 bytes only: other bytes were written by someone else."""
    doc = copy.deepcopy(world.first)
    event = doc["events"][-1]
    body = base64.b64decode(event["body"])
    assert body.count(old) == 1
    event["body"] = base64.b64encode(body.replace(old, new)).decode()
    assert "canonical" in _rejects(_owner_signs(doc), "record")


def test_a_bundle_whose_record_has_a_key_twice_is_refused() -> None:
    """The same for `verify-proof`: a first-wins reader of this record sees another stream."""
    stream = run_stream("r-1")
    body = (
        b'{"correlation_id":null,"event_id":"e","event_type":"x","payload":{"kind":"x"},'
        b'"position":1,"prev_hash":"' + bytes(32).hex().encode() + b'","schema_version":1,'
        b'"stream_id":"run-other","stream_id":"' + stream.encode() + b'",'
        b'"stream_version":1,"timestamp":"t","workflow_id":null}'
    )
    digest = chain_hash(bytes(32), body)
    note = sign_checkpoint(Checkpoint(ORIGIN, 1, leaf_hash(digest)), OWNER)
    bundle = InclusionBundle(1, stream, bytes(32), digest, body, 1, [], note)
    with pytest.raises(ProofError, match="appears twice"):
        verify_bundle(bundle, VERIFIER)


# -- the run: its events, their order, its end -----------------------------------------------


def test_an_event_of_another_run_with_its_own_proof_is_refused(world: World) -> None:
    """Run B's step record (genuine, proven against the same checkpoint) spliced into A's."""
    doc = copy.deepcopy(world.again)
    other = world.second
    i = next(i for i, e in enumerate(doc["events"]) if e["event_type"] == "step_recorded")
    doc["events"][i] = copy.deepcopy(other["events"][i])
    doc["proofs"][i] = copy.deepcopy(other["proofs"][i])
    assert "disagree" in _rejects(_reseal(doc), "record")


def test_events_of_another_run_appended_are_refused(world: World) -> None:
    doc = copy.deepcopy(world.again)
    doc["events"] += copy.deepcopy(world.second["events"])
    doc["proofs"] += copy.deepcopy(world.second["proofs"])
    _rejects(_reseal(doc), "record")


def test_a_run_relabelled_as_another_is_refused(world: World) -> None:
    doc = copy.deepcopy(world.again)
    doc["run_id"] = world.second["run_id"]
    doc["stream_id"] = world.second["stream_id"]
    _rejects(_reseal(doc), "record")


def test_events_beyond_an_older_checkpoint_are_refused(world: World) -> None:
    """Run B's events proven against run A's checkpoint (positions past its tree)."""
    doc = copy.deepcopy(world.second)
    doc["checkpoint"] = world.first["checkpoint"]
    doc["tree_size"] = world.first["tree_size"]
    message = _rejects(_reseal(doc), "proof")
    assert "outside a tree" in message


def _cut_to_running(doc: dict[str, Any]) -> dict[str, Any]:
    """A finished run cut back before its run_finished and called running (not resealed)."""
    end = next(i for i, e in enumerate(doc["events"]) if e["event_type"] == "run_finished")
    doc = _keep(doc, end)
    doc["status"] = "running"
    return doc


def _cut_to_gate(doc: dict[str, Any]) -> dict[str, Any]:
    """A resumed run cut back to its first run_finished, gated (not resealed)."""
    gate = next(i for i, e in enumerate(doc["events"]) if e["event_type"] == "run_finished")
    doc = _keep(doc, gate + 1)
    doc["status"] = "gated"
    return doc


def test_a_finished_run_cut_back_to_running_is_refused(world: World) -> None:
    """Was a strict xfail (accepted): the signed run head says the stream ends later."""
    message = _rejects(_reseal(_cut_to_running(copy.deepcopy(world.first))), "head")
    assert "cut back" in message


def test_a_resumed_run_cut_back_to_its_gate_is_refused(world: World) -> None:
    """Was a strict xfail (accepted): the signed run head says the stream ends later."""
    message = _rejects(_reseal(_cut_to_gate(copy.deepcopy(world.resumed))), "head")
    assert "cut back" in message


def test_a_status_that_is_not_final_is_reported_so(world: World) -> None:
    """The cuts above with the head stripped (the integrity hash is unkeyed): they verify,
    as files without a head did, reported not final and with no run head; a verifier that
    wants the end proven asks for the head."""
    assert verify_evidence(copy.deepcopy(world.resumed), VERIFIER).final
    assert not verify_evidence(copy.deepcopy(world.gated), VERIFIER).final
    for cut in (_cut_to_gate(copy.deepcopy(world.resumed)),
                _cut_to_running(copy.deepcopy(world.first))):  # fmt: skip
        cut["run_head"] = None
        report = verify_evidence(_reseal(cut), VERIFIER)
        assert not report.final and report.run_head is None
        assert report.as_dict()["final"] is False and report.as_dict()["run_head"] is None
        assert "no signed run head" in _rejects(cut, "head", require_head=True)


def test_a_status_the_events_do_not_support_is_refused(world: World) -> None:
    doc = copy.deepcopy(world.gated)
    doc["status"] = "completed"
    _rejects(_reseal(doc), "chain")
    doc = copy.deepcopy(world.first)
    doc["status"] = "rejected"
    _rejects(_reseal(doc), "chain")


# -- unsigned files and the members beside the proofs ----------------------------------------


@pytest.mark.parametrize(
    "edit",
    [
        {"proofs": {}},
        {"proofs": 0},
        {"proofs": False},
        {"proofs": ""},
        {"proofs": None},
        {"tree_size": None, "proofs": "del"},
        {"tree_size": "del"},
        {"checkpoint": "del"},
    ],
)
def test_an_unsigned_file_says_so_in_the_format(world: World, edit: dict[str, Any]) -> None:
    """Finding: with require_signed=False these passed (and the CLI exited 3, not 1)."""
    doc = copy.deepcopy(world.first)
    doc.update(checkpoint=None, tree_size=None, proofs=[])
    for key, value in edit.items():
        if value == "del":
            del doc[key]
        else:
            doc[key] = value
    _rejects(_reseal(doc), "format", require_signed=False)


def test_a_tree_size_of_another_type_is_refused(tmp_path: Path) -> None:
    """Finding: ``tree_size: true`` passed for a tree of one event (``True == 1``)."""
    kit = Kit(tmp_path)
    ledger = kit.ledger()
    blobs = FileBlobStore(tmp_path / "blobs")
    started = RunStarted(run_id=RunId("r-1"), pipeline="p", pipeline_type="t", critical=False,
                         inputs_digest=Sha256Digest("sha256:" + "0" * 64),
                         inputs_pointer="x")  # fmt: skip
    ledger.record(run_stream("r-1"), [started])
    ledger.checkpoint()
    doc = build_evidence(ledger, blobs, "r-1")
    ledger.close()
    assert (doc["tree_size"], doc["status"]) == (1, "running")
    assert verify_evidence(copy.deepcopy(doc), VERIFIER).tree_size == 1
    doc["tree_size"] = True
    _rejects(_reseal(doc), "checkpoint")


# -- the checkpoint note --------------------------------------------------------------------


def _note_edits(note: str) -> list[tuple[str, str]]:
    parsed = SignedNote.parse(note)
    (line,) = parsed.signatures
    cp = parse_checkpoint(parsed.text)
    bad = line.__class__(line.name, line.key_hash, bytes(len(line.signature)))
    other_name = NoteSigner("kit2", bytes(32))
    impostor = NoteSigner("kit", bytes([9]) * 32)  # same name, another key (and key ID)
    forged_id = line.__class__("kit", line.key_hash, impostor.sign(parsed.text.encode()))
    zero = sign_checkpoint(Checkpoint(ORIGIN, 0, root_of([])), impostor)
    return [
        ("crlf", note.replace("\n", "\r\n")),
        ("trailing text", note + "x"),
        ("a blank line after", note + "\n"),
        ("bad line, then the good one", parsed.text + "\n" + bad.format() + line.format()),
        ("good line, then a bad one", parsed.text + "\n" + line.format() + bad.format()),
        ("the key ID of the key, another key's signature", parsed.text + "\n" + forged_id.format()),
        ("another key name, same key", SignedNote.sign(parsed.text, other_name).encode()),
        ("another key, same name", sign_checkpoint(cp, impostor)),
        ("a size-0 tree by another key", zero),
        ("the text alone", parsed.text),
        ("signatures alone", "\n" + line.format()),
    ]


@pytest.mark.parametrize("index", range(11))
def test_a_forged_or_mangled_note_is_refused(world: World, index: int) -> None:
    doc = copy.deepcopy(world.first)
    name, note = _note_edits(doc["checkpoint"])[index]
    doc["checkpoint"] = note
    assert _rejects(_reseal(doc), "checkpoint"), name


def test_a_cosignature_by_another_key_does_no_harm(world: World) -> None:
    """A witness's cosignature line is ignored (the spec): the file still verifies."""
    doc = copy.deepcopy(world.first)
    parsed = SignedNote.parse(doc["checkpoint"])
    cosign = SignedNote.sign(parsed.text, NoteSigner("witness", bytes([3]) * 32)).signatures
    doc["checkpoint"] += cosign[0].format()
    assert verify_evidence(_reseal(doc), VERIFIER).signed


# -- size and time --------------------------------------------------------------------------


def test_a_huge_file_is_refused_in_bounded_time(world: World, tmp_path: Path) -> None:
    """20,000 copies of an event and a 100,000-hash path: refused, linear time, no hang."""
    doc = copy.deepcopy(world.first)
    doc["events"] = doc["events"][:1] * 20_000
    doc["proofs"][0]["proof"] = ["00" * 32] * 100_000
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(_reseal(doc)))
    started = time.perf_counter()
    _rejects(path, "chain")
    assert time.perf_counter() - started < 30
    doc = copy.deepcopy(world.first)
    doc["proofs"][0]["proof"] = ["00" * 32] * 100_000
    started = time.perf_counter()
    assert "too long" in _rejects(_reseal(doc), "proof")
    assert time.perf_counter() - started < 30


# -- fuzzing the file's text ----------------------------------------------------------------


def _meaning(text: str) -> Any:
    """The document a mutated text means, or None when readers could disagree or refuse."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        if len(out) != len(items):
            raise ValueError("duplicate")
        return out

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=float)
    except (ValueError, RecursionError):
        return None
    return json.dumps(value, sort_keys=True)  # 1, 1.0 and true are three meanings


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_span_mutation_passes_only_when_the_meaning_is_unchanged(
    world: World, tmp_path: Path, data: st.DataObject
) -> None:
    """Delete, repeat or move a span of the file, or insert a few characters: the result is
    refused with a typed error unless it still means the same document."""
    text = json.dumps(world.first, indent=1, sort_keys=True)
    n = len(text)
    start = data.draw(st.integers(0, n - 1), label="start")
    end = data.draw(st.integers(start, min(n, start + 200)), label="end")
    action = data.draw(st.sampled_from(["delete", "repeat", "move", "insert"]), label="action")
    span = text[start:end]
    if action == "delete":
        mutated = text[:start] + text[end:]
    elif action == "repeat":
        mutated = text[:end] + span + text[end:]
    elif action == "move":
        rest = text[:start] + text[end:]
        at = data.draw(st.integers(0, len(rest)), label="to")
        mutated = rest[:at] + span + rest[at:]
    else:
        mutated = text[:start] + data.draw(st.text(max_size=4), label="chars") + text[start:]
    path = tmp_path / "mutated.json"
    path.write_bytes(mutated.encode("utf-8", "surrogatepass"))
    if _meaning(mutated) == _meaning(text):
        assert verify_evidence(path, VERIFIER).status == "completed"
        return
    with pytest.raises(TraceboundError) as info:
        verify_evidence(path, VERIFIER)
    assert isinstance(info.value, EvidenceInvalid), repr(info.value)
