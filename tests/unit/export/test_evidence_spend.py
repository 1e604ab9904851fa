"""The run's spend in its evidence file: every `cost_incurred` record of ``costs/RUN`` up to
the checkpoint, chain-linked, proven and ended by a signed stream head, so that a verified
file says what the run cost, exactly, and not only that some cost records exist.

The files are written by the real writer over real pipeline runs whose spend is recorded as
a billing import or the remediation loop records it (``ledger.record("costs/RUN", ...)``),
then edited as a forger without the signing key would (the integrity hash is unkeyed, so
each edit is resealed).
"""

from __future__ import annotations

import base64
import copy
import json
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.independent import verify_evidence as iv
from tests.integration.pipeline_kit import Kit
from tests.unit.export.test_evidence import VERIFIER
from tests.unit.export.test_evidence_forgeries import OWNER, _rejects, _reseal
from tests.unit.replay import replay_pipelines as rp

from tracebound import NoteSigner
from tracebound.errors import CheckpointError, LedgerDamaged, TraceboundError
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.export.evidence import (
    FORMAT,
    EvidenceInvalid,
    EvidenceWriter,
    build_evidence,
    cost_stream,
    verify_evidence,
)
from tracebound.ids import RunId, StepId
from tracebound.integrity.chain import GENESIS
from tracebound.integrity.merkle import inclusion_proof_from_leaves, leaf_hash, root_of
from tracebound.integrity.note import Checkpoint, open_checkpoint, parse_checkpoint, sign_checkpoint
from tracebound.integrity.run_head import (
    RunHead,
    format_run_head_body,
    parse_run_head,
    sign_run_head,
)
from tracebound.integrity.stream_head import (
    StreamHead,
    format_stream_head_body,
    open_stream_head,
    parse_stream_head,
    sign_stream_head,
)
from tracebound.pipeline.runner import approve

KEY = iv.Key.parse(VERIFIER.format())
IMPOSTOR = NoteSigner("kit", bytes([9]) * 32)  # the owner's key name, another key


class Spent(NamedTuple):
    costly: dict[str, Any]  # run C (gated, spend recorded at the gate, resumed): 2 costs
    other: dict[str, Any]  # run B, same checkpoint: 1 cost of its own
    free: dict[str, Any]  # run A: no spend recorded at all
    late: dict[str, Any]  # run C again, a third cost recorded after the checkpoint
    later: dict[str, Any]  # run C again, after a checkpoint that covers the third cost


def _cost(amount: str, source: str, tier: str, role: str | None) -> CostIncurred:
    return CostIncurred.model_validate(
        {"tier": tier, "amount_usd": Decimal(amount), "source": CostSource(source), "role": role}
    )


@pytest.fixture(scope="module")
def spent(tmp_path_factory: pytest.TempPathFactory) -> Spent:
    root = tmp_path_factory.mktemp("spend")
    writer = EvidenceWriter(root / "evidence")
    runner = rp.make_runner(root, evidence=writer)
    ledger = runner.ledger

    def doc() -> dict[str, Any]:
        out: dict[str, Any] = json.loads(writer.written[-1].read_text())
        return out

    a = runner.run(rp.repaired, {"ticket": "T-1"})
    free = doc()
    c = runner.run(rp.gated, {})
    # While the run waits at its gate, its spend is recorded, as a billing import would.
    for cost in (_cost("0.0213", "openai", "direct", "Executor"),
                 _cost("0.5", "sandbox", "overhead", None)):  # fmt: skip
        ledger.record(cost_stream(c.run_id), [cost], workflow_id=c.run_id)
    b = runner.run(rp.repaired, {"ticket": "T-2"})
    ledger.record(cost_stream(b.run_id), [_cost("1.25", "openai", "direct", "Planner")],
                  workflow_id=b.run_id)  # fmt: skip
    approve(ledger, RunId(c.run_id), StepId("execute"), "alice", codeowners=runner.codeowners)
    runner.resume(rp.gated, c.run_id)
    costly = doc()
    other = build_evidence(ledger, runner.blobs, b.run_id)
    assert other["checkpoint"] == costly["checkpoint"]
    ledger.record(cost_stream(c.run_id), [_cost("2", "openai", "direct", "Executor")],
                  workflow_id=c.run_id)  # fmt: skip
    late = build_evidence(ledger, runner.blobs, c.run_id)
    ledger.checkpoint()
    later = build_evidence(ledger, runner.blobs, c.run_id)
    assert a.run_id != c.run_id
    return Spent(costly, other, free, late, later)


def _payload(entry: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(base64.b64decode(entry["body"]))["payload"]
    return out


# -- what the writer writes and the verifiers report -----------------------------------------


def test_the_file_proves_the_whole_spend_of_the_run(spent: Spent) -> None:
    doc = spent.costly
    assert doc["format"] == FORMAT == "tracebound-evidence/3"
    costs = doc["costs"]
    assert costs["stream_id"] == f"costs/{doc['run_id']}"
    assert [_payload(e)["amount_usd"] for e in costs["events"]] == ["0.0213", "0.5"]
    report = verify_evidence(copy.deepcopy(doc), VERIFIER, require_head=True, require_spend=True)
    spend = report.spend
    assert spend is not None and spend.proven
    assert (spend.total_usd, spend.records) == (Decimal("0.5213"), 2)
    assert spend.as_dict() == {
        "stream_id": costs["stream_id"],
        "proven": True,
        "total_usd": "0.5213",
        "records": 2,
        "by_role": [
            {"role": "Executor", "total_usd": "0.0213", "records": 1},
            {"role": None, "total_usd": "0.5", "records": 1},
        ],
        "by_source": [
            {"source": "openai", "total_usd": "0.0213", "records": 1},
            {"source": "sandbox", "total_usd": "0.5", "records": 1},
        ],
        "by_tier": [
            {"tier": "direct", "total_usd": "0.0213", "records": 1},
            {"tier": "overhead", "total_usd": "0.5", "records": 1},
        ],
        "head": {
            "stream_version": 2,
            "hash": costs["events"][-1]["hash"],
            "tree_size": doc["tree_size"],
        },
    }
    assert report.as_dict()["spend"] == spend.as_dict()
    assert [r.stream_id for r in report.cost_records] == [costs["stream_id"]] * 2
    # The independent verifier, from the spec alone, states the same spend.
    summary = iv.verify_evidence(json.dumps(doc).encode(), KEY, require_spend=True)
    assert summary.spend == {k: v for k, v in spend.as_dict().items() if k not in
                             {"stream_id", "head"}}  # fmt: skip


def test_the_head_is_signed_beside_the_checkpoint(spent: Spent) -> None:
    doc = spent.costly
    cp = open_checkpoint(doc["checkpoint"], VERIFIER)
    head = open_stream_head(doc["costs"]["head"], VERIFIER, origin=cp.origin)
    last = doc["costs"]["events"][-1]
    assert head == StreamHead(cp.origin, f"costs/{doc['run_id']}", 2,
                              bytes.fromhex(last["hash"]), cp.size, cp.root)  # fmt: skip


def test_a_run_with_no_spend_is_proven_to_have_none(spent: Spent) -> None:
    """Version 0 and the zero hash, signed: not a missing head."""
    doc = spent.free
    assert doc["costs"]["events"] == [] and doc["costs"]["proofs"] == []
    head = open_stream_head(doc["costs"]["head"], VERIFIER)
    assert (head.stream_version, head.hash, head.tree_size) == (0, GENESIS, doc["tree_size"])
    spend = verify_evidence(copy.deepcopy(doc), VERIFIER, require_spend=True).spend
    assert spend is not None and spend.proven
    assert (spend.total_usd, spend.records, spend.by_role) == (Decimal(0), 0, ())
    assert spend.as_dict()["total_usd"] == "0"


def test_spend_after_the_checkpoint_is_not_in_the_file_until_the_next(spent: Spent) -> None:
    """What a file proves is the spend up to its checkpoint's tree, no more."""
    late = verify_evidence(copy.deepcopy(spent.late), VERIFIER, require_spend=True)
    assert late.spend is not None and late.spend.total_usd == Decimal("0.5213")
    assert late.tree_size == spent.costly["tree_size"]
    later = verify_evidence(copy.deepcopy(spent.later), VERIFIER, require_spend=True)
    assert later.spend is not None and later.spend.total_usd == Decimal("2.5213")
    assert [s.total_usd for s in later.spend.by_role] == [Decimal("2.0213"), Decimal("0.5")]


# -- what a forger without the key cannot do --------------------------------------------------


def test_a_tampered_cost_record_is_refused(spent: Spent) -> None:
    doc = copy.deepcopy(spent.costly)
    entry = doc["costs"]["events"][0]
    body = base64.b64decode(entry["body"]).replace(b'"0.0213"', b'"0.0013"')
    entry["body"] = base64.b64encode(body).decode()
    message = _rejects(_reseal(doc), "record")
    assert "cost record at position" in message and "do not hash to its hash" in message


def test_a_cost_record_rehashed_after_an_edit_is_refused_by_its_proof(spent: Spent) -> None:
    doc = copy.deepcopy(spent.costly)
    entry = doc["costs"]["events"][-1]
    body = base64.b64decode(entry["body"]).replace(b'"0.5"', b'"0.0"')
    entry["body"] = base64.b64encode(body).decode()
    entry["hash"] = iv.chain_hash(bytes.fromhex(entry["prev_hash"]), body).hex()
    assert "cost record at position" in _rejects(_reseal(doc), "proof")


def test_dropping_the_last_cost_record_is_refused_by_the_head(spent: Spent) -> None:
    doc = copy.deepcopy(spent.costly)
    gone = doc["costs"]["events"].pop()["position"]
    doc["costs"]["proofs"] = [p for p in doc["costs"]["proofs"] if p["position"] != gone]
    message = _rejects(_reseal(doc), "head")
    assert "ends at version 2" in message and "end at version 1" in message
    assert "dropped or added" in message


def test_dropping_every_cost_record_is_refused_by_the_head(spent: Spent) -> None:
    doc = copy.deepcopy(spent.costly)
    doc["costs"].update(events=[], proofs=[])
    assert "end at version 0" in _rejects(_reseal(doc), "head")


def test_dropping_a_middle_cost_record_breaks_the_chain(spent: Spent) -> None:
    doc = copy.deepcopy(spent.costly)
    gone = doc["costs"]["events"].pop(0)["position"]
    doc["costs"]["proofs"] = [p for p in doc["costs"]["proofs"] if p["position"] != gone]
    assert "spend record was removed" in _rejects(_reseal(doc), "chain")


def test_a_forged_cost_head_is_refused(spent: Spent) -> None:
    doc = copy.deepcopy(spent.costly)
    head = open_stream_head(doc["costs"]["head"], VERIFIER)
    doc["costs"]["head"] = sign_stream_head(head, IMPOSTOR)  # same name, another key
    assert "spend head" in _rejects(_reseal(doc), "head")


def test_a_no_spend_head_of_the_same_run_from_another_tree_is_refused(spent: Spent) -> None:
    """A store holder who kept the gate-time file (no spend yet) cannot pair its head with
    the final file's checkpoint after dropping the cost records."""
    gated_head = open_stream_head(spent.free["costs"]["head"], VERIFIER)
    assert gated_head.stream_version == 0
    doc = copy.deepcopy(spent.costly)
    doc["costs"].update(events=[], proofs=[], head=spent.free["costs"]["head"])
    assert "not " in _rejects(_reseal(doc), "head")  # another stream, or another tree


def test_a_cost_record_of_another_run_is_refused(spent: Spent) -> None:
    doc = copy.deepcopy(spent.costly)
    theirs = spent.other["costs"]
    doc["costs"]["events"][-1] = theirs["events"][0]
    doc["costs"]["proofs"][-1] = theirs["proofs"][0]
    assert "disagree with the hashed record" in _rejects(_reseal(doc), "record")


def test_another_runs_whole_spend_stream_is_refused(spent: Spent) -> None:
    doc = copy.deepcopy(spent.costly)
    doc["costs"] = copy.deepcopy(spent.other["costs"])
    assert "stream_id is not" in _rejects(_reseal(doc), "format")
    doc["costs"]["stream_id"] = spent.costly["costs"]["stream_id"]  # relabelled too
    _rejects(_reseal(doc), "record")


def test_a_stripped_spend_head_is_reported_and_refused_on_request(spent: Spent) -> None:
    doc = copy.deepcopy(spent.costly)
    doc["costs"]["head"] = None
    spend = verify_evidence(copy.deepcopy(_reseal(doc)), VERIFIER).spend
    assert spend is not None and not spend.proven and spend.as_dict()["head"] is None
    assert "no signed spend head" in _rejects(doc, "head", require_spend=True)
    assert "no signed spend head" in _rejects(doc, "head", require_head=True)


def test_a_file_downgraded_to_version_2_says_nothing_about_spend(spent: Spent) -> None:
    """Dropping the spend stream and relabelling the file /2 leaves a valid /2 file: it
    verifies, with spend None (not zero), and require_spend refuses it."""
    doc = copy.deepcopy(spent.costly)
    del doc["costs"]
    doc["format"] = "tracebound-evidence/2"
    report = verify_evidence(copy.deepcopy(_reseal(doc)), VERIFIER, require_head=True)
    assert report.spend is None and report.as_dict()["spend"] is None
    assert "proves nothing about what the run cost" in _rejects(doc, "head", require_spend=True)
    v3_without_costs = copy.deepcopy(spent.costly)
    del v3_without_costs["costs"]
    assert "'costs'" in _rejects(_reseal(v3_without_costs), "format")


@pytest.mark.parametrize(
    "amount", ["1e3", "-1", "0x10", " 1", "1.", ".5", "NaN", "Infinity", 5, None]
)
def test_a_cost_record_whose_amount_is_not_a_plain_decimal_is_refused(amount: Any) -> None:
    """Through the ledger such a record cannot be written; a signed one is still refused,
    never summed (a float, an exponent or a sign would make the total depend on the reader)."""
    record = iv.Record(1, 1, bytes(32), bytes(32), {"payload": {
        "kind": "cost_incurred", "amount_usd": amount, "source": "s", "tier": "direct",
    }})  # fmt: skip
    with pytest.raises(iv.Refused):
        iv._spend([record], proven=True)


def test_a_cost_record_with_an_exponent_amount_is_refused_by_tracebound(spent: Spent) -> None:
    """The owner's own key signing a record whose amount is spelt with an exponent (a raw row
    a store holder wrote before the checkpoint): refused as a record, by both verifiers."""
    doc = _owner_resigns(spent.free, amount="1E+3")
    assert "amount_usd is not a plain decimal" in _rejects(doc, "record")
    with pytest.raises(iv.Refused) as info:
        iv.verify_evidence(json.dumps(doc).encode(), KEY)
    assert info.value.part == "record"


def _owner_resigns(base: dict[str, Any], *, amount: str) -> dict[str, Any]:
    """A one-record spend stream the owner's key signs as written (only the key holder
    could), for records the ledger's API would not write."""
    doc = copy.deepcopy(base)
    size = doc["tree_size"]
    stream = doc["costs"]["stream_id"]
    payload = {"amount_usd": amount, "kind": "cost_incurred", "role": None, "source": "x",
               "tier": "direct"}  # fmt: skip
    record = {"correlation_id": None, "event_id": "e", "event_type": "cost_incurred",
              "payload": payload, "position": size + 1, "prev_hash": "00" * 32,
              "schema_version": 1, "stream_id": stream, "stream_version": 1,
              "timestamp": "2026-01-01T00:00:00.000000Z", "workflow_id": None}  # fmt: skip
    body = iv.canonical(record)
    digest = iv.chain_hash(bytes(32), body)
    # The tree: the file's leaves are unknown here, so the file is rebuilt over a tree of
    # the run's own records plus this one, positions kept (a fresh log that held only them).
    events = doc["events"]
    assert [e["position"] for e in events] == list(range(1, len(events) + 1)) and size == len(
        events
    )
    leaves = [leaf_hash(bytes.fromhex(e["hash"])) for e in events] + [leaf_hash(digest)]
    cp = Checkpoint(parse_checkpoint(doc["checkpoint"].split("\n\n")[0] + "\n").origin,
                    size + 1, root_of(leaves))  # fmt: skip
    doc["checkpoint"], doc["tree_size"] = sign_checkpoint(cp, OWNER), size + 1
    doc["proofs"] = [
        {"position": i + 1, "proof": [h.hex() for h in inclusion_proof_from_leaves(leaves, i)]}
        for i in range(size)
    ]
    last = events[-1]
    run = RunHead(cp.origin, doc["run_id"], last["stream_version"], bytes.fromhex(last["hash"]),
                  doc["status"], cp.size, cp.root)  # fmt: skip
    doc["run_head"] = sign_run_head(run, OWNER)
    doc["costs"] = {
        "stream_id": stream,
        "events": [{"position": size + 1, "stream_version": 1, "event_type": "cost_incurred",
                    "prev_hash": "00" * 32, "hash": digest.hex(),
                    "body": base64.b64encode(body).decode()}],
        "proofs": [{"position": size + 1, "proof": [
            h.hex() for h in inclusion_proof_from_leaves(leaves, size)]}],
        "head": sign_stream_head(
            StreamHead(cp.origin, stream, 1, digest, cp.size, cp.root), OWNER
        ),
    }  # fmt: skip
    return _reseal(doc)


def test_an_owner_signed_plain_amount_verifies(spent: Spent) -> None:
    """The helper above is sound: the same file with a plain amount verifies."""
    doc = _owner_resigns(spent.free, amount="1000")
    spend = verify_evidence(doc, VERIFIER, require_spend=True).spend
    assert spend is not None and spend.as_dict()["total_usd"] == "1000"


# -- the writer refuses a damaged spend stream --------------------------------------------------


def test_the_writer_refuses_a_spend_stream_whose_bytes_were_edited(tmp_path: Path) -> None:
    """A store holder edits an amount in the store: the owner's writer signs no head over it."""
    writer = EvidenceWriter(tmp_path / "evidence")
    runner = rp.make_runner(tmp_path, evidence=writer)
    c = runner.run(rp.gated, {})
    runner.ledger.record(cost_stream(c.run_id), [_cost("0.5", "openai", "direct", None)],
                         workflow_id=c.run_id)  # fmt: skip
    runner.ledger.checkpoint()  # signed first: the edit comes after, as a store holder's would
    runner.ledger.close()
    with sqlite3.connect(Kit(tmp_path).store_dir / "ledger.db") as db:
        (position, body), = db.execute(
            "SELECT position, body FROM events WHERE stream_id = ?", (cost_stream(c.run_id),)
        )  # fmt: skip
        edited = bytes(body).replace(b'"0.5"', b'"0.1"')
        assert edited != bytes(body)
        db.execute("UPDATE events SET body = ? WHERE position = ?", (edited, position))
    db.close()
    runner = rp.make_runner(tmp_path, evidence=writer)
    with pytest.raises(LedgerDamaged) as info:
        build_evidence(runner.ledger, runner.blobs, c.run_id)
    assert info.value.position == position


# -- the note format ------------------------------------------------------------------------


def _sample(**changes: Any) -> StreamHead:
    fields: dict[str, Any] = {
        "origin": "test.example/kit", "stream_id": "costs/r-1", "stream_version": 7,
        "hash": bytes(range(32)), "tree_size": 12, "root": bytes([7]) * 32,
    }  # fmt: skip
    fields.update(changes)
    return StreamHead(**fields)


@pytest.mark.parametrize("stream", ["costs/r-1", 'costs/a "quoted" id', "costs/l\u00ednea\u2028"])
def test_a_stream_head_round_trips(stream: str) -> None:
    head = _sample(stream_id=stream)
    text = format_stream_head_body(head)
    assert text.startswith("tracebound-stream-head/1\norigin ") and text.count("\n") == 7
    assert parse_stream_head(text) == head
    note = sign_stream_head(head, NoteSigner("kit", bytes(32)))
    assert open_stream_head(note, VERIFIER, origin=head.origin) == head
    assert iv.open_stream_head(note, KEY) == iv.StreamHead(*(getattr(head, f) for f in (
        "origin", "stream_id", "stream_version", "hash", "tree_size", "root")))  # fmt: skip


def test_an_empty_stream_head_has_the_zero_hash() -> None:
    assert parse_stream_head(format_stream_head_body(_sample(stream_version=0, hash=GENESIS)))
    with pytest.raises(CheckpointError, match="zero hash"):
        _sample(stream_version=0)


def test_a_stream_head_is_neither_a_run_head_nor_a_checkpoint() -> None:
    text = format_stream_head_body(_sample(origin="tracebound-run-head/1"))
    with pytest.raises(CheckpointError):
        parse_checkpoint(text)
    with pytest.raises(CheckpointError):
        parse_run_head(text)
    run_head = format_run_head_body(parse_run_head(text.replace(
        "tracebound-stream-head/1\n", "tracebound-run-head/1\n").replace(
        'stream "costs/r-1"\n', 'run "r-1"\n').replace(
        "tree-size", "status completed\ntree-size")))  # fmt: skip
    with pytest.raises(CheckpointError, match="stream head"):
        parse_stream_head(run_head)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("stream-version 7\n", "stream-version 07\n"),
        ("stream-version 7\n", "stream-version -1\n"),
        ("tree-size 12\n", "tree-size 0\n"),
        ("stream-version 7\n", f"stream-version {'9' * 5000}\n"),
        ('stream "costs/r-1"', "stream costs/r-1"),
        ('stream "costs/r-1"', 'stream "\\u0063osts/r-1"'),
        ("tracebound-stream-head/1", "tracebound-stream-head/2"),
        ("tree-size 12\n", ""),
        ("root ", "root  "),
    ],
)
def test_a_stream_head_not_in_its_written_form_is_refused(old: str, new: str) -> None:
    text = format_stream_head_body(_sample())
    assert text.count(old) == 1
    with pytest.raises(CheckpointError):
        parse_stream_head(text.replace(old, new))


_SPLICES = st.sampled_from(
    ["9" * 5000, "1" * 21, "0", "-1", " ", "\n", '"', "\\u0000", "\ud800", "\u00e9", "NaN",
     "[" * 5000, '["r"]', "0" * 64]
)  # fmt: skip


@settings(max_examples=200)
@given(data=st.data())
def test_an_edited_stream_head_text_is_another_head_or_a_checkpoint_error(
    data: st.DataObject,
) -> None:
    text = format_stream_head_body(_sample())
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, min(len(text), i + 80)))
    edited = text[:i] + data.draw(_SPLICES | st.text(max_size=6)) + text[j:]
    try:
        got = parse_stream_head(edited)
    except CheckpointError:
        return
    assert format_stream_head_body(got) == edited
    assert (got == _sample()) == (edited == text)


# -- fuzzing the spend stream of a file ---------------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=5,
)  # fmt: skip


def _paths(value: Any, here: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*here, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*here, i))
    return out


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_resealed_edit_of_the_spend_stream_is_refused_by_both(
    spent: Spent, data: st.DataObject
) -> None:
    """Any edit under ``costs`` (the head nulled aside: that is a stripped head, reported as
    unproven spend) is refused by tracebound with a typed error, and by the independent
    verifier with the same part."""
    doc = copy.deepcopy(spent.costly)
    path = data.draw(st.sampled_from(_paths(doc["costs"], ("costs",))[1:]), label="path")
    parent: Any = doc
    for step in path[:-1]:
        parent = parent[step]
    action = data.draw(st.sampled_from(["replace", "delete", "add"]), label="action")
    if action == "delete":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[data.draw(st.text(min_size=1, max_size=6), label="key")] = data.draw(_json)
    else:
        parent[path[-1]] = data.draw(_json, label="value")
    if doc == spent.costly or (path == ("costs", "head") and parent.get("head", 0) is None):
        return
    _reseal(doc)
    with pytest.raises(TraceboundError) as info:
        verify_evidence(copy.deepcopy(doc), VERIFIER)
    assert isinstance(info.value, EvidenceInvalid), repr(info.value)
    with pytest.raises(iv.Refused) as theirs:
        iv.verify_evidence(json.dumps(doc).encode(), KEY)
    assert theirs.value.part == info.value.part
