"""Inclusion bundles as an adversary hands them over: every edit is refused, by name.

Review findings (offline verification): a bundle naming another stream passed
``verify_bundle``; loose parsing accepted ``"3"``, ``3.7``, upper-case or spaced hex and
unknown members; non-objects, ``1e400`` and deep nesting escaped as raw Python errors.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import pickle
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracebound import FixedClock, Ledger, NoteSigner, SequentialIds, SQLiteStore
from tracebound.errors import (
    BundleFieldMismatch,
    CheckpointError,
    ProofError,
    SignatureInvalid,
    TraceboundError,
)
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.integrity.chain import chain_hash
from tracebound.integrity.merkle import (
    HASH_SIZE,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from tracebound.integrity.note import Checkpoint, SignedNote, parse_checkpoint, sign_checkpoint
from tracebound.integrity.strict_json import loads_strict
from tracebound.ledger import InclusionBundle, verify_bundle
from tracebound.store.witness import FileWitness

SIGNER = NoteSigner("kit", bytes(32))
VERIFIER = SIGNER.verifier
ORIGIN = "test.example/review-proofs"


def _cost(i: int) -> CostIncurred:
    return CostIncurred(tier="direct", amount_usd=Decimal(f"0.{i:04d}"), source=CostSource("x"))


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    root = tmp_path_factory.mktemp("bundle")
    led = Ledger(
        SQLiteStore(root / "store"),
        clock=FixedClock(),
        ids=SequentialIds(namespace=5),
        signer=SIGNER,
        verifier=VERIFIER,
        witness=FileWitness(root / "witness" / "w.note", origin=ORIGIN),
        origin=ORIGIN,
    )
    with led:
        for i in range(7):
            led.record(f"run-{i % 2}", [_cost(i)])
        led.checkpoint()
        yield led


@pytest.fixture(scope="module")
def good(ledger: Ledger) -> dict[str, Any]:
    doc: dict[str, Any] = ledger.prove(3).as_dict()
    return doc


def _check(doc: Any) -> Checkpoint:
    return verify_bundle(InclusionBundle.from_dict(doc), VERIFIER)


def test_the_bundle_as_written_verifies(good: dict[str, Any]) -> None:
    assert _check(copy.deepcopy(good)).size == 7
    assert verify_bundle(InclusionBundle.from_json(json.dumps(good)), VERIFIER, origin=ORIGIN)


# -- the known finding: fields stated beside the record ---------------------------------------


def test_a_bundle_naming_another_stream_is_refused(good: dict[str, Any]) -> None:
    doc = {**good, "stream_id": "run-1"}  # the event is run-0's
    with pytest.raises(BundleFieldMismatch) as info:
        _check(doc)
    assert info.value.field == "stream_id"
    assert (info.value.stated, info.value.recorded) == ("run-1", "run-0")
    assert "stream_id" in str(info.value) and "'run-1'" in str(info.value)


def test_a_bundle_whose_position_is_not_the_records_is_refused(ledger: Ledger) -> None:
    # Built in Python, so the Merkle path is for the stated position: only the record
    # field comparison can tell that the record says otherwise.
    real = ledger.prove(3)
    moved = ledger.prove(5)
    doc = {**moved.as_dict(), "record": real.as_dict()["record"], "hash": real.hash.hex(),
           "prev_hash": real.prev_hash.hex()}  # fmt: skip
    with pytest.raises(BundleFieldMismatch) as info:
        _check(doc)
    assert info.value.field == "position"
    forged = InclusionBundle(
        position=4, stream_id=real.stream_id, prev_hash=real.prev_hash, hash=real.hash,
        body=real.body, tree_size=7, proof=real.proof, checkpoint=real.checkpoint,
    )  # fmt: skip
    with pytest.raises(BundleFieldMismatch) as info:
        verify_bundle(forged, VERIFIER)
    assert info.value.field == "position"


def _one_leaf_bundle(body: dict[str, Any], prev: bytes, position: int) -> InclusionBundle:
    """A bundle for a one-event tree holding ``body``, signed by the test key."""
    raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    h = chain_hash(prev, raw)
    note = sign_checkpoint(Checkpoint(ORIGIN, 1, leaf_hash(h)), SIGNER)
    return InclusionBundle(
        position=position, stream_id="run-0", prev_hash=prev, hash=h, body=raw, tree_size=1,
        proof=[], checkpoint=note,
    )  # fmt: skip


def test_a_record_whose_prev_hash_field_disagrees_is_refused(good: dict[str, Any]) -> None:
    """A record hashed with one prev_hash but naming another inside: a leaf no honest
    ledger writes. It is signed here by the test key, so only the field check catches it."""
    body = json.loads(base64.b64decode(good["record"]))
    body["prev_hash"] = "11" * 32
    prev = bytes.fromhex(good["prev_hash"])
    with pytest.raises(ProofError):  # position 3 is outside a tree of 1
        verify_bundle(_one_leaf_bundle(body, prev, 3), VERIFIER)
    body["position"] = 1
    with pytest.raises(BundleFieldMismatch) as info:
        verify_bundle(_one_leaf_bundle(body, prev, 1), VERIFIER)
    assert info.value.field == "prev_hash"


def test_the_mismatch_error_survives_pickling_and_is_short() -> None:
    error = BundleFieldMismatch("stream_id", "x" * 10_000, "run-0")
    back = pickle.loads(pickle.dumps(error))
    assert (back.field, back.stated, back.recorded) == ("stream_id", "x" * 10_000, "run-0")
    assert len(str(back)) < 300


# -- strict parsing ---------------------------------------------------------------------------

_BAD_VALUES: list[tuple[str, Any, str]] = [
    ("position", "3", "position"),
    ("position", 3.0, "position"),
    ("position", 3.7, "position"),
    ("position", True, "position"),
    ("position", 0, "position"),
    ("position", -1, "position"),
    ("position", 2**64, "position"),
    ("tree_size", "7", "tree_size"),
    ("tree_size", 7.5, "tree_size"),
    ("tree_size", -7, "tree_size"),
    ("tree_size", 2**70, "tree_size"),
    ("stream_id", 5, "stream_id"),
    ("stream_id", None, "stream_id"),
    ("checkpoint", 7, "checkpoint"),
    ("checkpoint", ["a"], "checkpoint"),
    ("hash", 1, "hash"),
    ("prev_hash", "00" * 3, "prev_hash"),
    ("record", "!!!", "record"),
    ("record", 3, "record"),
    ("proof", "ab", "proof"),
    ("proof", {"a": 1}, "proof"),
    ("proof", ["00" * 32] * 65, "proof"),
    ("proof", [1], "proof[0]"),
    ("proof", ["ab"], "proof[0]"),
]


@pytest.mark.parametrize(("member", "value", "named"), _BAD_VALUES)
def test_a_malformed_member_is_named(
    good: dict[str, Any], member: str, value: Any, named: str
) -> None:
    with pytest.raises(ProofError, match="malformed inclusion proof") as info:
        InclusionBundle.from_dict({**good, member: value})
    assert named in str(info.value)


@pytest.mark.parametrize("member", ["hash", "prev_hash"])
def test_hex_has_one_spelling(good: dict[str, Any], member: str) -> None:
    for spelling in (good[member].upper(), " " + good[member], good[member][:62] + " 0"):
        with pytest.raises(ProofError, match=member):
            InclusionBundle.from_dict({**good, member: spelling})


def test_base64_has_one_spelling(good: dict[str, Any]) -> None:
    record = good["record"]
    for spelling in (record.rstrip("="), record[:8] + "\n" + record[8:]):
        if spelling != record:
            with pytest.raises(ProofError, match="record"):
                InclusionBundle.from_dict({**good, "record": spelling})


@pytest.mark.parametrize("member", ["format", "position", "stream_id", "proof", "checkpoint"])
def test_a_missing_member_is_named(good: dict[str, Any], member: str) -> None:
    doc = dict(good)
    del doc[member]
    with pytest.raises(ProofError, match=member if member != "format" else "format=None"):
        InclusionBundle.from_dict(doc)


def test_unknown_members_are_refused(good: dict[str, Any]) -> None:
    with pytest.raises(ProofError, match=r"unknown member.*'event_type'"):
        InclusionBundle.from_dict({**good, "event_type": "merge_approved"})


@pytest.mark.parametrize("doc", [[], "x", None, 3, True])
def test_what_is_not_an_object_is_not_a_bundle(doc: Any) -> None:
    with pytest.raises(ProofError, match="not an object"):
        InclusionBundle.from_dict(doc)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "not JSON"),
        (b"{not json", "not JSON"),
        (b'{"position": 1e400}', "not JSON"),
        (b'{"position": NaN}', "not JSON"),
        (b'{"position": ' + b"9" * 5000 + b"}", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
        (b'{"a": "\xff"}', "not UTF-8"),
        (b'\xef\xbb\xbf{"a": 1}', "not JSON"),
        (b'{"a": "\\ud800"}', "not JSON"),
        (b'{"a": 1, "a": 2}', "'a' appears twice"),
        (b'{"b": {"a": 1, "a": 1}}', "'a' appears twice"),
    ],
)
def test_from_json_refuses_what_parsers_disagree_on(data: bytes, says: str) -> None:
    with pytest.raises(ProofError, match=says):
        InclusionBundle.from_json(data)


def test_a_duplicated_member_is_refused_even_when_the_last_one_is_right(
    good: dict[str, Any],
) -> None:
    text = json.dumps({**good, "stream_id": "run-1"})
    text = text[:-1] + ', "stream_id": "run-0"}'  # a last-wins parser sees run-0
    assert loads_strict(text.encode().replace(b', "stream_id": "run-0"', b"")) is not None
    with pytest.raises(ProofError, match="'stream_id' appears twice"):
        InclusionBundle.from_json(text)


# -- the checkpoint -----------------------------------------------------------------------------


def test_a_checkpoint_of_another_origin_is_refused_when_one_is_expected(
    good: dict[str, Any],
) -> None:
    cp = parse_checkpoint(SignedNote.parse(good["checkpoint"]).text)
    other = sign_checkpoint(Checkpoint("evil.example/log", cp.size, cp.root), SIGNER)
    bundle = InclusionBundle.from_dict({**good, "checkpoint": other})
    assert verify_bundle(bundle, VERIFIER).origin == "evil.example/log"  # says whose it is
    with pytest.raises(CheckpointError, match=r"evil\.example/log"):
        verify_bundle(bundle, VERIFIER, origin=ORIGIN)


def test_a_checkpoint_signed_by_another_key_of_the_same_name_is_refused(
    good: dict[str, Any],
) -> None:
    cp = parse_checkpoint(SignedNote.parse(good["checkpoint"]).text)
    forged = sign_checkpoint(cp, NoteSigner("kit", bytes([7]) * 32))
    with pytest.raises(SignatureInvalid):
        _check({**good, "checkpoint": forged})


def test_a_proof_for_another_tree_size_is_refused(ledger: Ledger, good: dict[str, Any]) -> None:
    for size in (6, 8):
        with pytest.raises(ProofError, match="checkpoint covers 7"):
            _check({**good, "tree_size": size})
    # A valid path of a smaller tree, put under the newer checkpoint: the path is too short.
    small = ledger.merkle_tree()
    from tracebound.integrity.merkle import inclusion_proof

    path = inclusion_proof(2, 4, small.subtree_root)
    with pytest.raises(ProofError, match="inclusion proof"):
        _check({**good, "proof": [h.hex() for h in path]})


def test_a_bundle_built_in_python_with_wrong_types_is_refused(ledger: Ledger) -> None:
    real = ledger.prove(3)
    for change in ({"position": "3"}, {"proof": [b"x"]}, {"hash": b"short"}, {"body": "text"}):
        with pytest.raises(ProofError, match="malformed inclusion bundle"):
            verify_bundle(dataclasses.replace(real, **change), VERIFIER)


# -- fuzzing the offline verifiers ------------------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**66), max_value=2**66)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_edit_of_any_member_is_refused_with_a_typed_error(
    good: dict[str, Any], data: st.DataObject
) -> None:
    doc = copy.deepcopy(good)
    member = data.draw(st.sampled_from(sorted(doc)), label="member")
    action = data.draw(st.sampled_from(["replace", "delete", "tweak"]), label="action")
    if action == "delete":
        del doc[member]
    elif action == "replace":
        doc[member] = data.draw(_json, label="value")
    else:
        value = doc[member]
        if isinstance(value, int):
            doc[member] = value + data.draw(st.integers(-10, 10).filter(bool), label="delta")
        elif isinstance(value, list) and value:
            i = data.draw(st.integers(0, len(value) - 1), label="i")
            doc[member] = value[:i] + value[i + 1 :]
        elif isinstance(value, str) and value:
            i = data.draw(st.integers(0, len(value) - 1), label="i")
            c = data.draw(st.characters(max_codepoint=0x7E).filter(lambda c: c != value[i]))
            doc[member] = value[:i] + c + value[i + 1 :]
    if doc == good:
        return
    with pytest.raises(TraceboundError) as info:
        _check(doc)
    assert isinstance(info.value, ProofError | CheckpointError), info.value
    assert str(info.value)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=300) | _json.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_give_a_proof_error_and_nothing_else(raw: bytes) -> None:
    with pytest.raises(ProofError):
        verify_bundle(InclusionBundle.from_json(raw), VERIFIER)


_hash = st.binary(min_size=0, max_size=40) | st.binary(min_size=HASH_SIZE, max_size=HASH_SIZE)


@settings(max_examples=400, deadline=None)
@given(
    leaf=_hash,
    index=st.integers(-(2**65), 2**65),
    size=st.integers(-(2**65), 2**65),
    proof=st.lists(_hash, max_size=70),
    root=_hash,
)
def test_verify_inclusion_only_ever_raises_proof_error(
    leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes
) -> None:
    try:
        verify_inclusion(leaf, index, size, proof, root)
    except ProofError:
        return
    pytest.fail("a random inclusion proof verified")  # pragma: no cover


@settings(max_examples=400, deadline=None)
@given(
    size1=st.integers(-(2**65), 2**65),
    size2=st.integers(-(2**65), 2**65),
    root1=_hash,
    root2=_hash,
    proof=st.lists(_hash, max_size=70),
)
def test_verify_consistency_only_ever_raises_proof_error(
    size1: int, size2: int, root1: bytes, root2: bytes, proof: list[bytes]
) -> None:
    try:
        verify_consistency(size1, size2, root1, root2, proof)
    except ProofError:
        return
    # Equal sizes with equal roots and no proof is the one trivially true statement.
    assert size1 == size2 and root1 == root2 and not proof


def test_a_consistency_proof_that_does_not_apply_is_refused(ledger: Ledger) -> None:
    tree = ledger.merkle_tree()
    root4, root7 = tree.subtree_root(0, 4), tree.subtree_root(0, 7)
    proof = ledger.consistency_proof(4, 7)
    verify_consistency(4, 7, root4, root7, proof)
    for args in [
        (3, 7, root4, root7, proof),  # another old size
        # (4, 6, root4, root7, proof) passes, as RFC 9162 has it: from size 4 the paths to
        # 6 and to 7 have one shape, and only a signature binds a root to its size.
        (4, 7, root7, root7, proof),  # another old root
        (4, 7, root4, root4, proof),  # another new root
        (4, 7, root4, root7, proof[:-1]),
        (4, 7, root4, root7, [*proof, proof[0]]),
        (7, 4, root7, root4, proof),  # shrinking
    ]:
        with pytest.raises(ProofError):
            verify_consistency(*args)


def test_the_strict_loader_is_plain_json_otherwise(tmp_path: Path, good: dict[str, Any]) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(good, indent=2))
    assert loads_strict(path.read_bytes()) == good
    assert loads_strict(path.read_text()) == good
