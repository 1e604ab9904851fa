"""Consistency proofs from a checkpoint someone kept to the newest one: built by the ledger,
checked offline with only the key that signed the checkpoint kept, across key rotations;
a rewritten, rolled back or forged ledger cannot produce one."""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracebound import FixedClock, Ledger, NoteSigner, SequentialIds, SQLiteStore
from tracebound.errors import (
    CheckpointError,
    ConfigError,
    DamageKind,
    LedgerDamaged,
    ProofError,
    SignatureInvalid,
)
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.integrity.consistency import (
    CONSISTENCY_FORMAT,
    ConsistencyBundle,
    held_note,
    verify_consistency_bundle,
)
from tracebound.integrity.note import Checkpoint, open_checkpoint, sign_checkpoint
from tracebound.store.witness import FileWitness

K1, K2, K3 = (NoteSigner("tracebound", bytes([i]) * 32) for i in (1, 2, 3))
ORIGIN = "test.example/consistency"


def _ledger(root: Path, signer: NoteSigner, verifier: NoteSigner | None = None) -> Ledger:
    return Ledger(
        SQLiteStore(root / "store"),
        clock=FixedClock(),
        ids=SequentialIds(namespace=9),
        signer=signer,
        verifier=None if verifier is None else verifier.verifier,
        witness=FileWitness(root / "witness.note", origin=ORIGIN),
        origin=ORIGIN,
    )


def _append(led: Ledger, n: int, stream: str = "s") -> None:
    led.record(
        stream,
        [
            CostIncurred(tier="direct", amount_usd=Decimal(f"0.{i:04d}"), source=CostSource("x"))
            for i in range(n)
        ],
    )


def _note(led: Ledger) -> str:
    note = led.store.latest_checkpoint()
    assert note is not None
    return note


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    return tmp_path, build_history(tmp_path)


def build_history(root: Path) -> dict[str, str]:
    """Checkpoints: a (3 events, K1), b (5, K1); rotation to K2 (hand-over at 6); c (9, K2);
    rotation to K3 (hand-over at 10); d (12, K3). Returns the notes an auditor could have
    kept along the way (tests/independent reuses it)."""
    kept: dict[str, str] = {}
    with _ledger(root, K1) as led:
        _append(led, 3)
        led.checkpoint()
        kept["a"] = _note(led)
        _append(led, 2, "t")
        led.checkpoint()
        kept["b"] = _note(led)
        led.rotate_key(K2, rotated_by="alice", reason="yearly")
        kept["handover1"] = _note(led)
        _append(led, 3)
        led.checkpoint()
        kept["c"] = _note(led)
        led.rotate_key(K3, rotated_by="bob", reason="leak drill")
        _append(led, 2, "u")
        led.checkpoint()
        kept["d"] = _note(led)
    return kept


def _round_trip(bundle: ConsistencyBundle) -> ConsistencyBundle:
    return ConsistencyBundle.from_json(json.dumps(bundle.as_dict()))


@pytest.mark.parametrize(
    ("held", "signer", "sizes", "keys"),
    [
        ("a", K1, [3, 6, 10, 12], [K1, K2, K3]),
        ("b", K1, [5, 6, 10, 12], [K1, K2, K3]),
        ("handover1", K1, [6, 10, 12], [K1, K2, K3]),
        ("handover1", K2, [6, 10, 12], [K2, K3]),
        ("c", K2, [9, 10, 12], [K2, K3]),
        ("d", K3, [12, 12], [K3]),
    ],
)
def test_a_kept_checkpoint_is_proven_a_prefix_of_the_newest_across_rotations(
    history: tuple[Path, dict[str, str]],
    held: str,
    signer: NoteSigner,
    sizes: list[int],
    keys: list[NoteSigner],
) -> None:
    root, kept = history
    with _ledger(root, K3, verifier=K1) as led:
        bundle = led.prove_consistency(kept[held])
    got = _round_trip(bundle)
    assert got == bundle
    held_cp = open_checkpoint(kept[held], signer.verifier)
    result = verify_consistency_bundle(
        got, signer.verifier, origin=ORIGIN, held=held_cp, newest_key=K3.verifier
    )
    assert [open_checkpoint(s.checkpoint, s.key).size for s in got.steps] == sizes
    assert result.old == held_cp and result.new.size == 12
    assert list(result.keys) == [k.verifier for k in keys]
    assert result.newest_key == K3.verifier
    assert got.as_dict()["format"] == CONSISTENCY_FORMAT


def test_the_ledger_refuses_a_checkpoint_its_retired_key_signed(
    history: tuple[Path, dict[str, str]],
) -> None:
    """The newest checkpoint re-signed by K1 after K1 was retired: the ledger knows its key
    history and refuses it. Offline, someone who knows only K1 cannot tell (nothing they
    hold says K1 was retired): the limit docs/evidence-format.md states, and why an auditor
    also pins the newest key (`verify-consistency --newest-key`)."""
    root, kept = history
    with _ledger(root, K3, verifier=K1) as led:
        bundle = led.prove_consistency(kept["a"])
    newest = open_checkpoint(kept["d"], K3.verifier)
    forged = bundle.as_dict()
    forged["checkpoints"] = [forged["checkpoints"][0], forged["checkpoints"][-1]]
    forged["checkpoints"][1]["key"] = K1.verifier.format()
    forged["checkpoints"][1]["checkpoint"] = sign_checkpoint(newest, K1)
    # The proof from 3 to 12 is a real one: only the keys are wrong.
    with _ledger(root, K3, verifier=K1) as led:
        forged["checkpoints"][1]["proof"] = [p.hex() for p in led.consistency_proof(3, 12)]
    good = ConsistencyBundle.from_dict(forged)
    assert verify_consistency_bundle(good, K1.verifier).new == newest  # K1 alone: accepted
    with pytest.raises(SignatureInvalid, match="the key expected to sign the ledger now"):
        verify_consistency_bundle(good, K1.verifier, newest_key=K3.verifier)
    # ...as it must be for a key nobody rotated; the ledger itself refuses the forgery:
    with _ledger(root, K3, verifier=K1) as led, pytest.raises(ProofError, match="retired"):
        led.prove_consistency(sign_checkpoint(newest, K1))


def test_a_hand_over_the_current_key_did_not_sign_is_refused(
    history: tuple[Path, dict[str, str]],
) -> None:
    root, kept = history
    with _ledger(root, K3, verifier=K1) as led:
        doc = led.prove_consistency(kept["a"]).as_dict()
    handover = open_checkpoint(doc["checkpoints"][1]["checkpoint"], K2.verifier)
    doc["checkpoints"][1]["checkpoint"] = sign_checkpoint(handover, K2)  # K2 alone
    with pytest.raises(SignatureInvalid, match=r"checkpoints\[1\] \(a hand-over to"):
        verify_consistency_bundle(ConsistencyBundle.from_dict(doc), K1.verifier)


def test_the_chain_must_start_from_the_checkpoint_held(
    history: tuple[Path, dict[str, str]],
) -> None:
    root, kept = history
    with _ledger(root, K3, verifier=K1) as led:
        bundle = led.prove_consistency(kept["b"])
    other = open_checkpoint(kept["a"], K1.verifier)
    with pytest.raises(ProofError, match="not from the one held"):
        verify_consistency_bundle(bundle, K1.verifier, held=other)
    with pytest.raises(CheckpointError, match="origin"):
        verify_consistency_bundle(bundle, K1.verifier, origin="another/log")


def _rewrite_hash(root: Path, position: int) -> None:
    """Someone with the store's files replaces one event's hash (its record with it, as far
    as a Merkle tree can tell) and drops the stored Merkle nodes that would still vouch for
    the old one."""
    with sqlite3.connect(root / "store" / "ledger.db") as conn:
        conn.execute("UPDATE events SET hash = ? WHERE position = ?", (b"\x07" * 32, position))
        conn.execute("DELETE FROM merkle_nodes")
    conn.close()


def test_a_ledger_that_no_longer_matches_its_checkpoints_proves_nothing(
    history: tuple[Path, dict[str, str]],
) -> None:
    """A consistency proof is about signed trees; one the log no longer matches is damage
    for `verify` to locate, not a proof to hand out."""
    root, kept = history
    _rewrite_hash(root, 2)
    with _ledger(root, K3, verifier=K1) as led, pytest.raises(LedgerDamaged) as info:
        led.prove_consistency(kept["a"])
    assert info.value.kind is DamageKind.TAMPER
    assert "newest checkpoint" in str(info.value)


def test_a_forked_ledger_is_named_a_fork(tmp_path: Path) -> None:
    """The auditor kept a checkpoint of 3 events; the operator then replaced the store with
    another log (same origin, same key) and signed it: the log the auditor saw is gone."""
    with _ledger(tmp_path / "one", K1) as led:
        _append(led, 3)
        led.checkpoint()
        kept = _note(led)
    with _ledger(tmp_path / "two", K1) as led:
        _append(led, 2, "other")
        _append(led, 3)
        led.checkpoint()
        with pytest.raises(LedgerDamaged) as info:
            led.prove_consistency(kept)
    assert info.value.kind is DamageKind.FORK
    assert "first 3 events" in str(info.value)


def test_a_ledger_rolled_back_behind_the_checkpoint_held(tmp_path: Path) -> None:
    with _ledger(tmp_path / "one", K1) as led:
        _append(led, 3)
        led.checkpoint()
        _append(led, 2)
        led.checkpoint()
        kept = _note(led)
    with _ledger(tmp_path / "two", K1) as led:
        _append(led, 3)
        led.checkpoint()
        with pytest.raises(LedgerDamaged) as info:
            led.prove_consistency(kept)
    assert info.value.kind is DamageKind.ROLLBACK
    assert info.value.position == 4


def test_a_checkpoint_of_another_log_or_key(history: tuple[Path, dict[str, str]]) -> None:
    root, kept = history
    stranger = sign_checkpoint(open_checkpoint(kept["a"], K1.verifier), NoteSigner("x", b"9" * 32))
    other_log = sign_checkpoint(Checkpoint("another/log", 1, b"\x01" * 32), K1)
    with _ledger(root, K3, verifier=K1) as led:
        with pytest.raises(ProofError, match="none of this ledger's keys"):
            led.prove_consistency(stranger)
        with pytest.raises(ConfigError, match="another/log"):
            led.prove_consistency(other_log)
        with pytest.raises(ProofError, match="no signed checkpoint"):
            led.prove_consistency("not a note")


def test_held_note_reads_the_checkpoint_of_any_file_an_auditor_kept(
    history: tuple[Path, dict[str, str]],
) -> None:
    root, kept = history
    with _ledger(root, K3, verifier=K1) as led:
        proof = led.prove(2).as_dict()
        consistency = led.prove_consistency(kept["a"]).as_dict()
    assert held_note(kept["c"].encode()) == kept["c"]
    assert held_note(json.dumps(proof).encode()) == proof["checkpoint"]
    assert held_note(json.dumps(consistency).encode()) == kept["d"]
    with pytest.raises(ProofError, match="holds no signed checkpoint"):
        held_note(json.dumps({"format": "tracebound-evidence/3", "checkpoint": None}).encode())
    with pytest.raises(ProofError, match="no tracebound proof"):
        held_note(b'{"a": 1}')
    with pytest.raises(ProofError, match="UTF-8"):
        held_note(b"\xff\xfe")


def _edits(doc: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """One edit of a consistency proof's JSON: a step dropped, swapped or duplicated, a
    proof hash flipped, dropped or added, a key or note replaced, a member added."""
    steps = doc["checkpoints"]
    n = len(steps)

    def with_steps(new: list[Any]) -> dict[str, Any]:
        return {**doc, "checkpoints": new}

    def flip(i: int, j: int, bit: int) -> dict[str, Any]:
        proof = list(steps[i]["proof"])
        raw = bytearray(bytes.fromhex(proof[j]))
        raw[bit // 8] ^= 1 << (bit % 8)
        proof[j] = raw.hex()
        return with_steps([*steps[:i], {**steps[i], "proof": proof}, *steps[i + 1 :]])

    def replace(i: int, member: str, value: Any) -> dict[str, Any]:
        return with_steps([*steps[:i], {**steps[i], member: value}, *steps[i + 1 :]])

    index = st.integers(0, n - 1)
    flips = [
        st.builds(flip, st.just(i), st.integers(0, len(s["proof"]) - 1), st.integers(0, 255))
        for i, s in enumerate(steps)
        if s["proof"]
    ]
    return st.one_of(
        index.map(lambda i: with_steps(steps[:i] + steps[i + 1 :])),
        index.map(lambda i: with_steps([*steps[:i], steps[i], *steps[i:]])),
        index.map(lambda i: with_steps([steps[-1 - i] for i in range(n)]) if n > 1 else None),
        *flips,
        st.builds(replace, index, st.just("proof"), st.just([])),
        st.builds(
            replace,
            index,
            st.just("key"),
            st.sampled_from([k.verifier.format() for k in (K1, K2, K3)]),
        ),
        st.builds(
            replace, index, st.just("checkpoint"), st.sampled_from([s["checkpoint"] for s in steps])
        ),
        st.builds(lambda i: replace(i, "extra", 1), index),
    ).filter(lambda d: d is not None and d != doc)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_every_edit_is_refused_or_proves_no_more_than_the_original(
    history: tuple[Path, dict[str, str]], data: st.DataObject
) -> None:
    """An edited file either fails with a typed error, or (a step dropped or repeated) still
    proves only what is true: from the checkpoint held to one the ledger signed."""
    root, kept = history
    with _ledger(root, K3, verifier=K1) as led:
        doc = led.prove_consistency(kept["a"]).as_dict()
        genuine = {c.size: c.root for c in map(_opened, dict(led.store.checkpoints()).values())}
    held = open_checkpoint(kept["a"], K1.verifier)
    edited = data.draw(_edits(doc))
    try:
        result = verify_consistency_bundle(
            ConsistencyBundle.from_dict(json.loads(json.dumps(edited))), K1.verifier, held=held
        )
    except (ProofError, CheckpointError):
        return
    assert result.old == held
    assert genuine.get(result.new.size) == result.new.root


def _opened(note: str) -> Checkpoint:
    """A stored checkpoint, opened with whichever of the test's keys signed it."""
    for key in (K3, K2, K1):
        try:
            return open_checkpoint(note, key.verifier)
        except CheckpointError:
            continue
    raise AssertionError(f"signed by none of the test's keys: {note!r}")
