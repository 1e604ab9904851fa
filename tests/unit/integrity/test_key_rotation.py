"""Signing-key rotation inside one ledger (ADR 0017): the trust walk from any key of the
history, the hand-over, and what a retired key can no longer sign."""

from __future__ import annotations

import base64
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from tracebound import FixedClock, Ledger, NoteSigner, SequentialIds, SQLiteStore
from tracebound.errors import (
    DamageKind,
    KeyRotationRefused,
    LedgerDamaged,
    SignatureInvalid,
    ValidationFailed,
)
from tracebound.events.catalog import CostIncurred, CostSource, SigningKeyRotated
from tracebound.integrity.note import Checkpoint, sign_checkpoint
from tracebound.integrity.rotation import (
    KEY_STREAM,
    KeyHistory,
    Rotation,
    open_checkpoints,
    rotation_from_record,
)
from tracebound.ledger import verify_bundle
from tracebound.store.rotations import read_rotations
from tracebound.store.witness import FileWitness

K1, K2, K3 = (NoteSigner("tracebound", bytes([i]) * 32) for i in (1, 2, 3))
ORIGIN = "test.example/rotation"


def _cost(i: int) -> CostIncurred:
    return CostIncurred(tier="direct", amount_usd=Decimal(f"0.{i:04d}"), source=CostSource("x"))


def _ledger(root: Path, signer: NoteSigner, verifier: NoteSigner | None = None) -> Ledger:
    return Ledger(
        SQLiteStore(root / "store"),
        clock=FixedClock(),
        ids=SequentialIds(namespace=7),
        signer=signer,
        verifier=None if verifier is None else verifier.verifier,
        witness=FileWitness(root / "witness.note", origin=ORIGIN),
        origin=ORIGIN,
    )


def _append(led: Ledger, n: int, stream: str = "s") -> None:
    led.record(stream, [_cost(i) for i in range(n)])


@pytest.fixture
def rotated(tmp_path: Path) -> Path:
    """3 events, checkpoint (K1); rotate to K2 (event 4, hand-over at 4); 2 events,
    checkpoint (K2) at 6."""
    with _ledger(tmp_path, K1) as led:
        _append(led, 3)
        led.checkpoint()
        run = led.rotate_key(K2, rotated_by="alice", reason="yearly")
        assert run.rotation.position == 4 and run.handover.checkpoint.size == 4
        assert led.signer is K2 and led.verifier == K2.verifier
        _append(led, 2)
        led.checkpoint()
    return tmp_path


def _edit(root: Path, position: int, old: str, new: str) -> None:
    """The attacker edits one record's bytes in the SQLite file."""
    store = SQLiteStore(root / "store")
    path = store.path
    store.close()
    with sqlite3.connect(path) as conn:
        (body,) = conn.execute("SELECT body FROM events WHERE position = ?", (position,)).fetchone()
        assert old.encode() in body
        conn.execute(
            "UPDATE events SET body = ? WHERE position = ?",
            (bytes(body).replace(old.encode(), new.encode()), position),
        )
    conn.close()


def _sigs(note: str) -> int:
    return note.count("\n\u2014 ")


def test_the_hand_over_is_signed_by_both_keys_and_names_who(rotated: Path) -> None:
    store = SQLiteStore(rotated / "store")
    notes = dict(store.checkpoints())
    assert sorted(notes) == [3, 4, 6]
    assert [_sigs(notes[3]), _sigs(notes[4]), _sigs(notes[6])] == [1, 2, 1]
    (rotation,) = read_rotations(store)
    assert (rotation.old, rotation.new) == (K1.verifier, K2.verifier)
    assert (rotation.rotated_by, rotation.reason, rotation.position) == ("alice", "yearly", 4)
    store.close()


@pytest.mark.parametrize("root", [K1, K2], ids=["old-key", "new-key"])
def test_verify_with_any_key_of_the_history(rotated: Path, root: NoteSigner) -> None:
    with _ledger(rotated, K2, verifier=root) as led:
        report = led.verify()
        assert report.ok, report
        assert report.checkpoint_size == 6 and report.witness_size == 6
        assert [r.position for r in report.rotations] == [4]
        assert report.as_dict()["key_rotations"][0]["rotated_by"] == "alice"
        assert led.active_verifier() == K2.verifier
        bundle = led.prove(2)
        verify_bundle(bundle, K2.verifier, origin=ORIGIN)
        with pytest.raises(SignatureInvalid, match="another key"):
            verify_bundle(bundle, K1.verifier, origin=ORIGIN)


def test_a_key_outside_the_history_is_refused(rotated: Path) -> None:
    with _ledger(rotated, K2, verifier=K3) as led:
        report = led.verify()
    assert report.damage is not None
    assert report.damage.kind is DamageKind.FORGED_SIGNATURE and report.damage.position == 3
    assert "none of this ledger's keys" in report.damage.detail


def test_a_checkpoint_the_retired_key_signs_after_the_rotation_is_forged(rotated: Path) -> None:
    store = SQLiteStore(rotated / "store")
    with _ledger(rotated, K2) as led:
        _append(led, 1)
        root = bytes.fromhex(led.verify(require_signed=False).root)
    # The leaked old key signs the log of 7 events: it verifies with K1, yet K1 was retired.
    store.save_checkpoint(7, sign_checkpoint(Checkpoint(ORIGIN, 7, root), K1))
    store.close()
    for root_key in (K1, K2):
        with _ledger(rotated, K2, verifier=root_key) as led:
            damage = led.verify().damage
        assert damage is not None
        assert (damage.kind, damage.position) == (DamageKind.RETIRED_KEY, 7)
        assert "retired by the rotation at position 4" in damage.detail
        assert "alice" in damage.detail


def test_a_hand_over_without_the_outgoing_key_is_forged(tmp_path: Path) -> None:
    with _ledger(tmp_path, K1) as led:
        _append(led, 2)
        led.checkpoint()
        led.rotate_key(K2, rotated_by="alice")
    store = SQLiteStore(tmp_path / "store")
    # Re-sign the hand-over with the new key alone: the old key no longer vouches for K2.
    (size, note), *_ = [(s, n) for s, n in store.checkpoints() if s == 3]
    body = note.split("\n\n", 1)[0] + "\n"
    lines = body.split("\n")
    cp = Checkpoint(lines[0], int(lines[1]), base64.b64decode(lines[2]))
    store.save_checkpoint(size, sign_checkpoint(cp, K2))
    store.close()
    with _ledger(tmp_path, K2) as led:
        damage = led.verify().damage
    assert damage is not None and (damage.kind, damage.position) == (
        DamageKind.FORGED_SIGNATURE,
        3,
    )
    assert "not signed by the outgoing key" in damage.detail


def test_two_rotations_verify_from_each_key(tmp_path: Path) -> None:
    with _ledger(tmp_path, K1) as led:
        _append(led, 2)
        led.checkpoint()
        led.rotate_key(K2, rotated_by="alice")
        _append(led, 1)
        led.checkpoint()
        led.rotate_key(K3, rotated_by="bob", reason="suspected leak")
        _append(led, 1)
        led.checkpoint()
    for root in (K1, K2, K3):
        with _ledger(tmp_path, K3, verifier=root) as led:
            report = led.verify()
            assert report.ok, report.damage
            assert [(r.old, r.new) for r in report.rotations] == [
                (K1.verifier, K2.verifier),
                (K2.verifier, K3.verifier),
            ]
            assert led.active_verifier() == K3.verifier


def test_the_retired_key_cannot_sign_or_rotate_again(rotated: Path) -> None:
    with _ledger(rotated, K1) as led:
        _append(led, 1)
        with pytest.raises(KeyRotationRefused, match="retired by the rotation at position 4"):
            led.checkpoint()
        with pytest.raises(KeyRotationRefused, match="retired"):
            led.rotate_key(K3, rotated_by="mallory")


def test_rotation_refuses_a_key_that_did_not_sign_the_newest_checkpoint(tmp_path: Path) -> None:
    with _ledger(tmp_path, K1) as led:
        _append(led, 2)
        led.checkpoint()
    with _ledger(tmp_path, K3) as led, pytest.raises(KeyRotationRefused, match="newest"):
        led.rotate_key(K2, rotated_by="alice")
    with _ledger(tmp_path, K1) as led, pytest.raises(KeyRotationRefused, match="current key"):
        led.rotate_key(K1, rotated_by="alice")


def test_rotation_refuses_a_damaged_log(tmp_path: Path) -> None:
    with _ledger(tmp_path, K1) as led:
        _append(led, 3)
        led.checkpoint()
    _edit(tmp_path, 2, "0.0001", "0.0009")
    with _ledger(tmp_path, K1) as led, pytest.raises(LedgerDamaged) as info:
        led.rotate_key(K2, rotated_by="alice")
    assert info.value.position == 2
    assert read_rotations(SQLiteStore(tmp_path / "store")) == []


def test_an_interrupted_rotation_is_finished_by_running_it_again(tmp_path: Path) -> None:
    with _ledger(tmp_path, K1) as led:
        _append(led, 2)
        led.checkpoint()
        # The event is written, then the process dies before the hand-over is signed.
        led.store.append(
            KEY_STREAM,
            [
                led.event(
                    SigningKeyRotated(
                        old_key=K1.verifier.format(),
                        new_key=K2.verifier.format(),
                        rotated_by="alice",
                    )
                )
            ],
            expected_version=0,
        )
        with pytest.raises(KeyRotationRefused, match="unfinished"):
            led.checkpoint()
        with pytest.raises(KeyRotationRefused, match="unfinished"):
            led.rotate_key(K3, rotated_by="alice")
        # verify says so (nothing is damaged, but checkpoints wait for it)
        pending = led.verify()
        assert pending.pending_rotation is not None
        assert (pending.pending_rotation.position, pending.pending_rotation.new) == (
            3,
            K2.verifier,
        )
        assert pending.as_dict()["pending_key_rotation"]["new_key"] == K2.verifier.format()
        run = led.rotate_key(K2, rotated_by="alice")
        assert run.resumed and run.handover.checkpoint.size == 3
        assert led.verify().ok
        assert led.verify().pending_rotation is None


def test_rotation_events_are_the_ledgers_own(tmp_path: Path) -> None:
    payload = SigningKeyRotated(
        old_key=K1.verifier.format(), new_key=K3.verifier.format(), rotated_by="mallory"
    )
    with _ledger(tmp_path, K1) as led:
        with pytest.raises(ValidationFailed, match="keys rotate"):
            led.record("s", [payload])
        with pytest.raises(ValidationFailed, match="keys rotate"):
            led.record(KEY_STREAM, [_cost(1)])


def test_a_tampered_rotation_event_is_found(rotated: Path) -> None:
    _edit(rotated, 4, "alice", "mallo")
    for root in (K1, K2):
        with _ledger(rotated, K2, verifier=root) as led:
            damage = led.verify().damage
        assert damage is not None and (damage.kind, damage.position) == (DamageKind.TAMPER, 4)


# -- the pure walk ------------------------------------------------------------------------


def _rotation(position: int, old: NoteSigner, new: NoteSigner) -> Rotation:
    return Rotation(position, old.verifier, new.verifier, "alice", None, "t")


def test_history_keys_and_active_key_by_size() -> None:
    history = KeyHistory([_rotation(4, K1, K2), _rotation(9, K2, K3)], K3.verifier)
    assert history.keys == (K1.verifier, K2.verifier, K3.verifier)
    assert [history.active(s) for s in (1, 3, 4, 8, 9, 20)] == [
        K1.verifier, K1.verifier, K2.verifier, K2.verifier, K3.verifier, K3.verifier,
    ]  # fmt: skip
    assert history.retired_by(K1.verifier) == history.rotations[0]
    assert history.retired_by(K3.verifier) is None


def test_a_broken_chain_of_keys_is_tampering() -> None:
    with pytest.raises(LedgerDamaged) as info:
        KeyHistory([_rotation(4, K1, K2), _rotation(9, K1, K3)], K1.verifier)
    assert (info.value.kind, info.value.position) == (DamageKind.TAMPER, 9)


def test_a_pending_rotation_changes_no_required_key() -> None:
    note = sign_checkpoint(Checkpoint(ORIGIN, 3, bytes(32)), K1)
    cps, history = open_checkpoints([(3, note)], K1.verifier, [_rotation(5, K1, K2)], origin=ORIGIN)
    assert [c.size for c in cps] == [3] and history.rotations == ()


def test_a_record_that_is_not_a_rotation_is_refused() -> None:
    with pytest.raises(LedgerDamaged) as info:
        rotation_from_record(4, b'{"event_type":"x"}')
    assert (info.value.kind, info.value.position) == (DamageKind.TAMPER, 4)


# -- rotation events nobody could have written (security review) ---------------------------


def _planted(root: Path, old: NoteSigner, new: NoteSigner) -> None:
    """3 events signed (K1); then someone with write access to the store, and no key,
    appends a rotation event after the newest checkpoint, chained like any other."""
    with _ledger(root, K1) as led:
        _append(led, 3)
        led.checkpoint()
        payload = SigningKeyRotated(
            old_key=old.verifier.format(), new_key=new.verifier.format(), rotated_by="mallory"
        )
        led.store.append(KEY_STREAM, [led.event(payload)], expected_version=0)


@pytest.mark.parametrize(
    ("old", "new"), [(K3, K2), (K1, K1)], ids=["not-the-signing-key", "same-key"]
)
def test_a_pending_rotation_the_signing_key_could_not_have_made_is_tampering(
    tmp_path: Path, old: NoteSigner, new: NoteSigner
) -> None:
    """`rotate_key` writes only a rotation from the key that signs the newest checkpoint
    to another key; one that is not is no interrupted rotation to finish, and `verify`
    (which `checkpoint`'s refusal points to) says so instead of 'ok'."""
    _planted(tmp_path, old, new)
    with _ledger(tmp_path, K1) as led:
        damage = led.verify().damage
        assert damage is not None
        assert (damage.kind, damage.position) == (DamageKind.TAMPER, 4)
        assert "could not have" in str(damage)
        with pytest.raises(LedgerDamaged) as info:
            led.rotate_key(K2, rotated_by="alice")
        assert info.value.position == 4


def test_a_rotation_to_the_same_key_is_tampering() -> None:
    with pytest.raises(LedgerDamaged) as info:
        KeyHistory([_rotation(4, K1, K2), _rotation(9, K2, K2)], K1.verifier)
    assert (info.value.kind, info.value.position) == (DamageKind.TAMPER, 9)


@pytest.mark.parametrize("full", [False, True], ids=["incremental", "full"])
def test_a_checkpoint_right_after_a_rotation_keeps_the_hand_over(
    tmp_path: Path, full: bool
) -> None:
    """`keys rotate`, then `checkpoint` with no new event (a cron job, a habit): the same
    size is not signed again by the new key alone, which replaced the hand-over both keys
    signed and left the ledger verifying as forged."""
    with _ledger(tmp_path, K1) as led:
        _append(led, 3)
        led.checkpoint()
        led.rotate_key(K2, rotated_by="alice")
        run = led.checkpoint_run(full=full)
        assert run.checkpoint.size == 4
        assert {s: _sigs(n) for s, n in led.store.checkpoints()} == {3: 1, 4: 2}
        report = led.verify()
        assert report.ok, report.damage


def test_a_checkpoint_overtaken_by_a_rotation_does_not_sign_past_it_with_the_old_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes on one ledger (a cron `checkpoint`, an operator's `keys rotate`): the
    checkpoint found no rotation when it started, then the rotation's event landed before
    it read the events after its previous checkpoint. It signed that log, rotation
    included, with the outgoing key alone: the ledger verified as `retired-key` ("treat it
    as leaked") and the rotation could not be finished."""
    with _ledger(tmp_path, K1) as led:
        _append(led, 3)
        led.checkpoint()
    rotating = _ledger(tmp_path, K1)
    checkpointing = _ledger(tmp_path, K1)
    signed_base = checkpointing._signed_base

    def overtaken() -> object:
        payload = SigningKeyRotated(
            old_key=K1.verifier.format(), new_key=K2.verifier.format(), rotated_by="alice"
        )
        # `keys rotate` records its event now; its hand-over is still to be signed.
        rotating.store.append(KEY_STREAM, [rotating.event(payload)], expected_version=0)
        return signed_base()

    monkeypatch.setattr(checkpointing, "_signed_base", overtaken)
    with checkpointing, pytest.raises(KeyRotationRefused, match="unfinished"):
        checkpointing.checkpoint()
    with rotating:
        run = rotating.rotate_key(K2, rotated_by="alice")
        assert run.resumed and run.handover.checkpoint.size == 4
        report = rotating.verify()
        assert report.ok, report.damage
