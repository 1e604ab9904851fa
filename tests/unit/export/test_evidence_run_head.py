"""The signed run head of an evidence file: where the run ends, bound to the checkpoint.

Every file here is written by the real writer (a recorded run, its `EvidenceWriter` output)
and then edited as a forger without the signing key would: the integrity hash is unkeyed,
so each edit is resealed. The world is the forgeries module's (runs A and B, C gated then
resumed).
"""

# ruff: noqa: F811 - ``world`` is the forgeries module's fixture, imported to be shared

from __future__ import annotations

import contextlib
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.export.test_evidence import VERIFIER
from tests.unit.export.test_evidence_forgeries import (
    OWNER,
    World,
    _cut_to_gate,
    _rejects,
    _reseal,
    world,  # noqa: F401 - the module fixture, shared
)
from tests.unit.replay import replay_pipelines as rp

from tracebound import NoteSigner
from tracebound.errors import CheckpointError, SignatureInvalid
from tracebound.export.evidence import FORMAT, FORMAT_V1, EvidenceWriter, verify_evidence
from tracebound.integrity.merkle import root_of
from tracebound.integrity.note import (
    Checkpoint,
    SignedNote,
    open_checkpoint,
    parse_checkpoint,
    sign_checkpoint,
)
from tracebound.integrity.run_head import (
    RunHead,
    format_run_head_body,
    open_run_head,
    parse_run_head,
    sign_run_head,
)

IMPOSTOR = NoteSigner("kit", bytes([9]) * 32)  # the owner's key name, another key


def _head(doc: dict[str, Any]) -> RunHead:
    return open_run_head(doc["run_head"], VERIFIER)


# -- what the writer writes -----------------------------------------------------------------


def test_the_writer_signs_where_each_run_ends(world: World) -> None:
    for doc in world:
        assert doc["format"] == FORMAT
        head = _head(doc)
        cp = open_checkpoint(doc["checkpoint"], VERIFIER)
        last = doc["events"][-1]
        assert (head.origin, head.run_id, head.status) == (cp.origin, doc["run_id"], doc["status"])
        assert (head.stream_version, head.hash.hex()) == (last["stream_version"], last["hash"])
        assert (head.tree_size, head.root) == (cp.size, cp.root)
        report = verify_evidence(copy.deepcopy(doc), VERIFIER, require_head=True)
        assert report.run_head == head
        assert report.as_dict()["run_head"] == {
            "stream_version": last["stream_version"],
            "hash": last["hash"],
            "status": doc["status"],
            "tree_size": cp.size,
        }


def test_a_ledger_without_the_signing_key_writes_no_head(tmp_path: Path) -> None:
    """Signed checkpoint, but only the verifier key at hand: ``run_head`` null, as said."""
    writer = EvidenceWriter(tmp_path / "evidence")
    runner = rp.make_runner(tmp_path, evidence=writer)
    runner.run(rp.repaired, {"ticket": "T-1"})
    signer = runner.ledger.signer
    runner.ledger.signer = None
    try:
        run_id = json.loads(writer.written[-1].read_text())["run_id"]
        path = writer(runner.ledger, runner.blobs, run_id)
    finally:
        runner.ledger.signer = signer
    doc = json.loads(path.read_text())
    assert doc["checkpoint"] is not None and doc["run_head"] is None
    assert verify_evidence(path, VERIFIER).run_head is None
    assert "no signed run head" in _rejects(path, "head", require_head=True)


# -- forged, misplaced or copied heads -------------------------------------------------------


def test_a_head_signed_by_another_key_is_refused(world: World) -> None:
    doc = copy.deepcopy(world.resumed)
    genuine = _head(doc)
    doc["run_head"] = sign_run_head(genuine, IMPOSTOR)  # same text, same key name
    assert "not signed by" in _rejects(_reseal(doc), "head")
    # The owner's key name and key ID, the impostor's signature.
    parsed = SignedNote.parse(world.resumed["run_head"])
    (line,) = parsed.signatures
    forged = line.__class__(line.name, line.key_hash, IMPOSTOR.sign(parsed.text.encode()))
    doc["run_head"] = parsed.text + "\n" + forged.format()
    assert "bad signature" in _rejects(_reseal(doc), "head")
    doc["run_head"] = sign_run_head(genuine, NoteSigner("kit2", bytes(32)))  # another name
    assert "not signed by" in _rejects(_reseal(doc), "head")


def test_a_cut_file_with_a_head_forged_to_match_is_refused(world: World) -> None:
    """The cut, and a head saying it ends there, signed by anyone but the owner."""
    doc = _cut_to_gate(copy.deepcopy(world.resumed))
    last = doc["events"][-1]
    cp = open_checkpoint(doc["checkpoint"], VERIFIER)
    forged = RunHead(cp.origin, doc["run_id"], last["stream_version"],
                     bytes.fromhex(last["hash"]), "gated", cp.size, cp.root)  # fmt: skip
    doc["run_head"] = sign_run_head(forged, IMPOSTOR)
    _rejects(_reseal(doc), "head")


def test_a_head_for_another_run_is_refused(world: World) -> None:
    """Run B's genuine head, signed beside the same checkpoint, on run A's file."""
    doc = copy.deepcopy(world.again)
    assert doc["checkpoint"] == world.second["checkpoint"]
    doc["run_head"] = world.second["run_head"]
    assert "is for run" in _rejects(_reseal(doc), "head")


def test_a_head_of_another_origin_is_refused(world: World) -> None:
    doc = copy.deepcopy(world.first)
    head = _head(doc)
    other = RunHead("other.example/log", head.run_id, head.stream_version, head.hash,
                    head.status, head.tree_size, head.root)  # fmt: skip
    doc["run_head"] = sign_run_head(other, OWNER)  # even by the owner's key
    assert "origin" in _rejects(_reseal(doc), "head")


def test_an_earlier_head_of_the_run_on_a_longer_file_is_refused(world: World) -> None:
    """The head written at the gate, on the resumed file: it ends elsewhere, in another tree."""
    doc = copy.deepcopy(world.resumed)
    doc["run_head"] = world.gated["run_head"]
    assert "tree of" in _rejects(_reseal(doc), "head")


def test_a_later_head_of_the_run_on_a_shorter_file_is_refused(world: World) -> None:
    """The resumed run's head on the gated file (its own, older checkpoint and proofs)."""
    doc = copy.deepcopy(world.gated)
    doc["run_head"] = world.resumed["run_head"]
    _rejects(_reseal(doc), "head")
    # The cut resumed file keeps the newer checkpoint; the gate's head was signed beside the
    # older one, so it does not bind here either.
    doc = _cut_to_gate(copy.deepcopy(world.resumed))
    doc["run_head"] = world.gated["run_head"]
    assert "tree of" in _rejects(_reseal(doc), "head")


def test_the_same_run_rebuilt_later_needs_the_head_of_its_checkpoint(world: World) -> None:
    """Run A's first head on A's file rebuilt against B's checkpoint: same records, another
    tree, so refused; its own head verifies."""
    doc = copy.deepcopy(world.again)
    assert doc["events"] == world.first["events"]
    assert verify_evidence(copy.deepcopy(doc), VERIFIER, require_head=True).run_head
    doc["run_head"] = world.first["run_head"]
    assert "tree of" in _rejects(_reseal(doc), "head")


def test_an_older_genuine_file_still_verifies_as_the_run_up_to_then(world: World) -> None:
    """Not a forgery: the file written at the gate shows the run as of its tree. Freshness
    is the reader's to judge, by the checkpoint's size."""
    gated = verify_evidence(copy.deepcopy(world.gated), VERIFIER, require_head=True)
    resumed = verify_evidence(copy.deepcopy(world.resumed), VERIFIER, require_head=True)
    assert gated.run_id == resumed.run_id
    assert (gated.status, gated.final) == ("gated", False)
    assert gated.tree_size is not None and resumed.tree_size is not None
    assert gated.tree_size < resumed.tree_size


def test_a_head_that_is_a_checkpoint_or_the_reverse_is_refused(world: World) -> None:
    doc = copy.deepcopy(world.first)
    doc["run_head"] = doc["checkpoint"]
    assert "not a run head" in _rejects(_reseal(doc), "head")
    doc = copy.deepcopy(world.first)
    doc["checkpoint"] = doc["run_head"]
    _rejects(_reseal(doc), "checkpoint")


@pytest.mark.parametrize("value", [{}, [], 1, 0, False, True, ""])
def test_a_head_that_is_not_a_note_is_refused(world: World, value: Any) -> None:
    doc = copy.deepcopy(world.first)
    doc["run_head"] = value
    _rejects(_reseal(doc), "head")


def test_a_head_without_a_checkpoint_is_refused(world: World) -> None:
    doc = copy.deepcopy(world.first)
    doc.update(checkpoint=None, tree_size=None, proofs=[])
    assert "without a checkpoint" in _rejects(_reseal(doc), "head", require_signed=False)


# -- stripped heads and the format version --------------------------------------------------


def test_a_stripped_head_is_reported_and_refused_on_request(world: World) -> None:
    """Nulled in a version 2 file, or the file relabelled version 1 without the member."""
    nulled = copy.deepcopy(world.first)
    nulled["run_head"] = None
    older = copy.deepcopy(world.first)
    del older["run_head"], older["costs"]
    older["format"] = FORMAT_V1
    for doc in (_reseal(nulled), _reseal(older)):
        report = verify_evidence(copy.deepcopy(doc), VERIFIER)
        assert report.signed and report.final and report.run_head is None
        assert report.as_dict()["run_head"] is None
        assert "no signed run head" in _rejects(doc, "head", require_head=True)


def test_the_format_versions_have_their_own_members(world: World) -> None:
    missing = copy.deepcopy(world.first)
    del missing["run_head"]
    assert "'run_head'" in _rejects(_reseal(missing), "format")
    v1_with_head = copy.deepcopy(world.first)
    del v1_with_head["costs"]
    v1_with_head["format"] = FORMAT_V1
    assert "unknown member" in _rejects(_reseal(v1_with_head), "format")


def test_an_unsigned_file_has_no_head_to_require(world: World) -> None:
    doc = copy.deepcopy(world.first)
    doc.update(checkpoint=None, tree_size=None, proofs=[], run_head=None)
    doc["costs"].update(proofs=[], head=None)
    assert not verify_evidence(_reseal(doc), VERIFIER, require_signed=False).signed
    _rejects(doc, "head", require_signed=False, require_head=True)
    _rejects(doc, "checkpoint", require_head=True)


def test_a_cut_version_1_file_is_the_old_limit(world: World) -> None:
    """A version 1 file (no head) cut back verifies as before: what require_head is for."""
    doc = _cut_to_gate(copy.deepcopy(world.resumed))
    del doc["run_head"], doc["costs"]
    doc["format"] = FORMAT_V1
    report = verify_evidence(_reseal(doc), VERIFIER)
    assert (report.status, report.final, report.run_head) == ("gated", False, None)
    _rejects(doc, "head", require_head=True)


# -- the note format ------------------------------------------------------------------------


def _sample(**changes: Any) -> RunHead:
    fields: dict[str, Any] = {
        "origin": "test.example/kit", "run_id": "r-1", "stream_version": 7,
        "hash": bytes(range(32)), "status": "completed", "tree_size": 12,
        "root": bytes([7]) * 32,
    }  # fmt: skip
    fields.update(changes)
    return RunHead(**fields)


@pytest.mark.parametrize("run_id", ["r-1", 'a "quoted" id', "línea\u2028", "x" * 300])
def test_a_run_head_round_trips(run_id: str) -> None:
    head = _sample(run_id=run_id)
    text = format_run_head_body(head)
    assert text.startswith("tracebound-run-head/1\norigin ") and text.count("\n") == 8
    assert parse_run_head(text) == head
    assert open_run_head(sign_run_head(head, OWNER), VERIFIER, origin=head.origin) == head


def test_a_run_head_can_never_be_read_as_a_checkpoint_nor_the_reverse() -> None:
    """Even with an origin named like the run-head format line."""
    head = _sample(origin="tracebound-run-head/1")
    with pytest.raises(CheckpointError):
        parse_checkpoint(format_run_head_body(head))
    with pytest.raises(CheckpointError):
        open_checkpoint(sign_run_head(head, OWNER), VERIFIER)
    cp = Checkpoint("tracebound-run-head/1", 0, root_of([]))
    with pytest.raises(CheckpointError, match="run head"):
        open_run_head(sign_checkpoint(cp, OWNER), VERIFIER)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("stream-version 7\n", "stream-version 07\n"),
        ("tree-size 12\n", "tree-size +12\n"),
        ("stream-version 7\n", f"stream-version {'9' * 5000}\n"),  # int() refuses > 4300
        ("tree-size 12\n", f"tree-size 1{'0' * 20}\n"),
        ("hash 00", "hash 00 "),
        ('run "r-1"', 'run "\\u0072-1"'),
        ('run "r-1"', "run r-1"),
        ("status completed", "status done"),
        ("status completed\n", "status completed\nextra line\n"),
        ("tracebound-run-head/1", "tracebound-run-head/2"),
        ("tree-size 12\n", ""),
        ("hash ", "Hash "),
    ],
)
def test_a_run_head_not_in_its_written_form_is_refused(old: str, new: str) -> None:
    text = format_run_head_body(_sample())
    assert text.count(old) == 1
    with pytest.raises(CheckpointError):
        parse_run_head(text.replace(old, new))


# Pieces an edit may splice in: other values' spellings, a number past Python's 4300-digit
# int() limit (which raises ValueError, not a parse error), nesting past Python's stack
# (RecursionError), escapes, a lone surrogate.
_SPLICES = st.sampled_from(
    ["9" * 5000, "1" * 21, "0", "-1", " ", "\n", '"', "\\u0000", "\ud800", "\u00e9", "NaN",
     "[" * 5000, '["r"]']
)  # fmt: skip


@pytest.mark.parametrize("run", ["[" * 100_000, '{"a":' * 100_000, "1" * 5000])
def test_a_run_id_python_json_cannot_hold_is_a_checkpoint_error(run: str) -> None:
    text = format_run_head_body(_sample(run_id="r"))
    with pytest.raises(CheckpointError, match="run id"):
        parse_run_head(text.replace('run "r"\n', f"run {run}\n"))


@settings(max_examples=200)
@given(data=st.data())
def test_an_edited_run_head_text_is_another_head_or_a_checkpoint_error(
    data: st.DataObject,
) -> None:
    text = format_run_head_body(_sample())
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, min(len(text), i + 80)))
    edited = text[:i] + data.draw(_SPLICES | st.text(max_size=6)) + text[j:]
    try:
        got = parse_run_head(edited)
    except CheckpointError:
        return
    # An edit may name another origin or run; what parses is then that head, in its one
    # written form, and differs from the original unless the text is unchanged.
    assert format_run_head_body(got) == edited
    assert (got == _sample()) == (edited == text)


@settings(max_examples=200)
@given(st.text(alphabet=st.sampled_from('tracebound-hdorign 0123456789af"\n\ud800'), max_size=400))
def test_any_text_is_a_run_head_or_a_checkpoint_error(text: str) -> None:
    with contextlib.suppress(CheckpointError):
        assert format_run_head_body(parse_run_head(text)) == text


def test_a_run_head_note_edited_after_signing_is_refused() -> None:
    note = sign_run_head(_sample(), OWNER)
    parsed = SignedNote.parse(note)
    edited = parsed.text.replace("stream-version 7", "stream-version 6") + note[len(parsed.text) :]
    with pytest.raises(SignatureInvalid):
        open_run_head(edited, VERIFIER)
    with pytest.raises(CheckpointError, match="origin"):
        open_run_head(note, VERIFIER, origin="other.example/log")
