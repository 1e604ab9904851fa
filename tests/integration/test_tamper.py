"""At-rest attacks on the store's files: each one is reported with its kind and position.

The attacker holds the store directory (they can run any SQL on the file, copy it back,
rewrite every hash) but not the signing key or the witness file, which live elsewhere.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable

import pytest
from blake3 import blake3

from tests.integration.conftest import ORIGIN, World, cost
from tracebound.errors import DamageKind, LedgerDamaged
from tracebound.integrity.keys import NoteSigner
from tracebound.integrity.note import Checkpoint, sign_checkpoint


def sql(world: World, *statements: str) -> None:
    conn = sqlite3.connect(world.db)
    with conn:
        for s in statements:
            conn.execute(s)
    conn.close()


def damage_of(world: World) -> LedgerDamaged:
    with world.open() as ledger:
        report = ledger.verify(workers=1)
    assert report.damage is not None, report.as_dict()
    assert not report.ok
    return report.damage


def test_intact_ledger_verifies(filled: Callable[[int], World]) -> None:
    world = filled(40)
    with world.open() as ledger:
        report = ledger.verify(workers=1)
    assert report.ok, report.as_dict()
    assert (report.size, report.checkpoint_size, report.witness_size) == (40, 40, 40)
    assert report.checks == {
        "chain": "ok",
        "positions": "ok",
        "merkle": "ok",
        "signature": "ok",
        "witness": "ok",
    }


def test_edit_one_payload_is_tamper_at_that_position(filled: Callable[[int], World]) -> None:
    world = filled(30)
    sql(world, "UPDATE events SET body = replace(body, '0.0017', '0.9017') WHERE position = 18")
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TAMPER, 18)


def test_edit_index_column_is_tamper(filled: Callable[[int], World]) -> None:
    world = filled(30)
    sql(world, "UPDATE events SET workflow_id = 'wf-9' WHERE position = 7")
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TAMPER, 7)


def test_delete_last_events_is_truncation(filled: Callable[[int], World]) -> None:
    world = filled(30)
    sql(world, "DELETE FROM events WHERE position > 26")
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TRUNCATION, 27)


def test_delete_middle_event_is_gap(filled: Callable[[int], World]) -> None:
    world = filled(30)
    sql(world, "DELETE FROM events WHERE position = 12")
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.GAP, 12)


def test_delete_middle_event_and_renumber_is_reported(filled: Callable[[int], World]) -> None:
    world = filled(30)
    sql(
        world,
        "DELETE FROM events WHERE position = 12",
        "UPDATE events SET position = position - 1 WHERE position > 12",
    )
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.REORDER, 12)


def test_swap_two_events_is_reorder(filled: Callable[[int], World]) -> None:
    world = filled(30)
    sql(
        world,
        "UPDATE events SET position = -1 WHERE position = 9",
        "UPDATE events SET position = 9 WHERE position = 21",
        "UPDATE events SET position = 21 WHERE position = -1",
    )
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.REORDER, 9)


def _rewrite_chain(world: World, position: int) -> None:
    """Change one payload and recompute every hash after it: a consistent forgery."""
    conn = sqlite3.connect(world.db)
    rows = conn.execute(
        "SELECT position, stream_id, prev_hash, hash, body FROM events ORDER BY position"
    ).fetchall()
    heads: dict[str, bytes] = {}
    renamed: dict[bytes, bytes] = {}
    with conn:
        for pos, sid, prev, old_hash, old_body in rows:
            new_prev = heads.get(sid, prev)
            body = old_body
            if pos == position:
                body = body.replace(b'"amount_usd":"0.', b'"amount_usd":"9.')
            body = body.replace(prev.hex().encode(), new_prev.hex().encode())
            new_hash = blake3(new_prev + body).digest()
            renamed[old_hash] = new_hash
            heads[sid] = new_hash
            conn.execute(
                "UPDATE events SET prev_hash = ?, hash = ?, body = ? WHERE position = ?",
                (new_prev, new_hash, body, pos),
            )
    conn.close()


def test_consistent_rewrite_without_key_fails_merkle(filled: Callable[[int], World]) -> None:
    world = filled(30)
    _rewrite_chain(world, 14)
    with world.open() as ledger:
        report = ledger.verify(workers=1)
    assert report.checks["chain"] == "ok"  # the forgery is internally consistent...
    assert report.damage is not None  # ...but not with what was signed
    assert report.damage.kind is DamageKind.TAMPER
    assert report.checks["merkle"] == "failed"


def test_rewrite_and_resign_with_own_key_is_forged_signature(
    filled: Callable[[int], World],
) -> None:
    world = filled(30)
    _rewrite_chain(world, 14)
    with world.open() as ledger:
        forged_root = bytes.fromhex(ledger.verify(workers=1).root)
    attacker = NoteSigner("tb-test", b"\x01" * 32)  # same name, different key
    note = sign_checkpoint(Checkpoint(origin=ORIGIN, size=30, root=forged_root), attacker)
    sql(world, "DELETE FROM checkpoints")
    conn = sqlite3.connect(world.db)
    with conn:
        conn.execute("INSERT INTO checkpoints (size, note) VALUES (30, ?)", (note,))
    conn.close()
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.FORGED_SIGNATURE, 30)


def test_rewrite_and_drop_checkpoints_is_caught_by_witness(
    filled: Callable[[int], World],
) -> None:
    world = filled(30)
    _rewrite_chain(world, 14)
    sql(world, "DELETE FROM checkpoints")
    d = damage_of(world)
    assert d.kind is DamageKind.ROLLBACK  # the store's checkpoints are behind the witness


def test_copy_back_older_snapshot_is_rollback(world: World, tmp_path: object) -> None:
    with world.open() as ledger:
        for i in range(10):
            ledger.record("run", [cost(i)])
        ledger.checkpoint()
    snapshot = world.store_dir.with_name("snapshot")
    shutil.copytree(world.store_dir, snapshot)
    with world.open() as ledger:
        for i in range(10, 25):
            ledger.record("run", [cost(i)])
        ledger.checkpoint()
    shutil.rmtree(world.store_dir)
    shutil.copytree(snapshot, world.store_dir)
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.ROLLBACK, 11)


def test_events_after_last_checkpoint_are_chain_checked(filled: Callable[[int], World]) -> None:
    world = filled(20)
    with world.open() as ledger:
        ledger.record("run-x", [cost(99)])
        report = ledger.verify(workers=1)
        assert report.ok and report.uncovered == 1
    sql(world, "UPDATE events SET body = replace(body, '0.0099', '0.0098') WHERE position = 21")
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TAMPER, 21)


def test_checkpoint_refuses_to_sign_damage(filled: Callable[[int], World]) -> None:
    world = filled(10)
    sql(world, "UPDATE events SET body = replace(body, '0.0003', '0.0004') WHERE position = 4")
    with world.open() as ledger, pytest.raises(LedgerDamaged) as info:
        ledger.checkpoint()
    assert info.value.position == 4


def test_parallel_verify_reports_same_as_serial(
    filled: Callable[[int], World], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracebound.ledger as ledger_mod

    monkeypatch.setattr(ledger_mod, "CHUNK", 8)  # many chunks from a small log
    world = filled(45)
    with world.open() as ledger:
        serial, parallel = ledger.verify(workers=1), ledger.verify(workers=2)
    assert serial.ok and parallel.ok
    assert serial.root == parallel.root
    sql(world, "DELETE FROM events WHERE position = 33")
    with world.open() as ledger:
        a, b = ledger.verify(workers=1), ledger.verify(workers=2)
    assert a.damage is not None and b.damage is not None
    assert (a.damage.kind, a.damage.position) == (b.damage.kind, b.damage.position)
    assert (a.damage.kind, a.damage.position) == (DamageKind.GAP, 33)


def test_inclusion_proof_round_trip(filled: Callable[[int], World]) -> None:
    from tracebound.errors import ProofError
    from tracebound.ledger import InclusionBundle, verify_bundle

    world = filled(23)
    with world.open() as ledger:
        for position in (1, 2, 13, 23):
            bundle = ledger.prove(position)
            again = InclusionBundle.from_dict(bundle.as_dict())
            assert verify_bundle(again, world.signer.verifier).size == 23
        bad = bundle.as_dict()
        bad["record"] = bad["record"][:-8] + "AAAAAAA="
        with pytest.raises(ProofError):
            verify_bundle(InclusionBundle.from_dict(bad), world.signer.verifier)
