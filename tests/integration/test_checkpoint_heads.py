"""Incremental checkpoints against an attacker who edits the SQLite file between (and
during) checkpoints: what the checkpoint refuses to sign, and the one thing it cannot see.

The backend-independent attacks are in the tamper suite; these need SQL the suite's
attacker does not speak (dropping a constraint, planting rows, bad node values).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from blake3 import blake3

from tests.integration.conftest import World, cost
from tests.integration.test_tamper import SQLiteAttacker
from tracebound.errors import DamageKind, LedgerDamaged, ProofError
from tracebound.integrity import nodes as nodes_mod
from tracebound.ledger import verify_bundle


@pytest.fixture(autouse=True)
def small_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes of 4 leaves, so a ten-event log keeps some and its heads lie under them."""
    monkeypatch.setattr(nodes_mod, "LEVEL_BITS", 2)
    monkeypatch.setattr(nodes_mod, "WIDTH", 4)


def _fill(world: World, streams: list[str]) -> SQLiteAttacker:
    """One event per stream id given, in that order; then a signed checkpoint."""
    with world.open() as ledger:
        for i, stream in enumerate(streams):
            ledger.record(stream, [cost(i)])
        ledger.checkpoint()
    return SQLiteAttacker(world.store_dir)


# run-z v1 and v2 at positions 1 and 2, then eight events of other streams.
_TEN = ["run-z", "run-z", *(f"run-{i % 2}" for i in range(8))]


def _drop_unique(attacker: SQLiteAttacker) -> None:
    """The attacker holds the file: without the constraint, a stream may hold a version twice."""
    ((schema,),) = attacker.rows("SELECT sql FROM sqlite_master WHERE name = 'events'")
    loose = schema.replace(",\n    UNIQUE (stream_id, stream_version)", "")
    assert loose != schema
    attacker.sql("CREATE TABLE saved AS SELECT * FROM events", "DROP TABLE events", loose)
    attacker.sql("INSERT INTO events SELECT * FROM saved", "DROP TABLE saved")


def _fork(attacker: SQLiteAttacker, *, copy_of: int, at: int) -> None:
    """Append, at position ``at``, a second event with the version of the one at ``copy_of``
    (linked to the same predecessor, hashed correctly: only the key is missing)."""
    ((_, sid, ver, et, wf, ts, sv, prev, _, body),) = attacker.rows(
        f"SELECT * FROM events WHERE position = {copy_of}"
    )
    doc: dict[str, Any] = json.loads(body)
    doc["position"] = at
    doc["payload"]["amount_usd"] = "9.9999"
    doc["event_id"] = "00000000-0000-0007-0000-0000000fffff"
    forged = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    attacker.sql(
        "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        params=(at, sid, ver, et, wf, ts, sv, prev, blake3(prev + forged).digest(), forged),
    )


@pytest.mark.parametrize("version", [1, 2])
def test_a_fork_after_the_signed_prefix_is_not_signed(world: World, version: int) -> None:
    """A second run-z version 2 after the signed log links to a genuine version 1, so a
    check of "the event before it" passes; a second version 1 links to genesis, as a new
    stream would. The checkpoint links new events to the stream's newest signed event
    of versions v - 1 and v, so neither fork links."""
    attacker = _fill(world, _TEN)
    _drop_unique(attacker)
    _fork(attacker, copy_of=version, at=11)
    with world.open() as ledger, pytest.raises(LedgerDamaged) as info:
        ledger.checkpoint()
    assert (info.value.kind, info.value.position) == (DamageKind.REORDER, 11)
    with world.open() as ledger:
        assert ledger.store.checkpoints()[-1][0] == 10


def test_a_head_hidden_while_the_checkpoint_runs_is_the_documented_limit(world: World) -> None:
    """ADR 0011: a checkpoint does not commit each stream's newest version, so an
    attacker who removes run-z v2 while an incremental checkpoint runs gets the fork
    signed. `verify` still names it, and `checkpoint --full` refuses it. This pins the
    limit the ADR states; a stream-heads commitment would turn it into a refusal."""
    # run-z v1 at 1, v2 at 12: under a stored node that neither the frontier check nor
    # the proof of v1 reads, so nothing the checkpoint reads misses it.
    attacker = _fill(world, ["run-z", *(f"run-{i % 2}" for i in range(10)), "run-z"])
    _drop_unique(attacker)
    _fork(attacker, copy_of=12, at=13)
    (hidden,) = attacker.rows("SELECT * FROM events WHERE position = 12")
    attacker.sql("DELETE FROM events WHERE position = 12")
    with world.open() as ledger:
        run = ledger.checkpoint_run()
    assert run.incremental and run.checkpoint.size == 13
    attacker.sql_many("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [hidden])
    with world.open() as ledger:
        damage = ledger.verify(workers=1).damage
        assert damage is not None
        assert (damage.kind, damage.position) == (DamageKind.REORDER, 13)
        with pytest.raises(LedgerDamaged):
            ledger.checkpoint(full=True)


@pytest.mark.parametrize("value", ["x'0102'", "zeroblob(64)", "'abc'", "7"])
def test_a_stored_node_of_the_wrong_size_or_type_is_typed_damage(world: World, value: str) -> None:
    """Before, a full row with one short node reached the C kernel: an untyped ValueError
    from `prove` and every incremental checkpoint."""
    attacker = _fill(world, _TEN)
    assert attacker.sql(f"UPDATE merkle_nodes SET hash = {value} WHERE level = 1 AND idx = 0")
    with world.open() as ledger:
        with pytest.raises(ProofError, match="stored Merkle nodes disagree"):
            ledger.prove(9)
        run = ledger.checkpoint_run()
        assert not run.incremental and run.full_reason is not None
        assert "not 32 bytes" in run.full_reason
        assert verify_bundle(ledger.prove(9), world.signer.verifier).size == 10


@pytest.mark.parametrize("column", ["hash", "body"])
def test_a_null_column_is_damage_not_a_type_error(world: World, column: str) -> None:
    """With NOT NULL dropped, a NULL hash among the leaves the frontier check reads made
    checkpoint raise a TypeError, and a NULL body did the same in prove."""
    attacker = _fill(world, _TEN)
    ((schema,),) = attacker.rows("SELECT sql FROM sqlite_master WHERE name = 'events'")
    loose = schema.replace(f"{column:<14} BLOB    NOT NULL", f"{column:<14} BLOB")
    assert loose != schema
    attacker.sql("CREATE TABLE saved AS SELECT * FROM events", "DROP TABLE events", loose)
    attacker.sql("INSERT INTO events SELECT * FROM saved", "DROP TABLE saved")
    attacker.sql(f"UPDATE events SET {column} = NULL WHERE position = 9")  # not under a node
    with world.open() as ledger:
        with pytest.raises(LedgerDamaged) as proving:
            ledger.prove(9)
        assert proving.value.position == 9
        if column == "hash":
            with pytest.raises(LedgerDamaged) as signing:
                ledger.checkpoint()
            assert signing.value.position == 9


def test_a_row_moved_to_a_huge_position_is_a_gap_not_a_hang(world: World) -> None:
    """`size()` is the highest position: 2**62 made verify and checkpoint build a list of
    chunk spans up to it (memory without end) before reading anything."""
    attacker = _fill(world, _TEN)
    attacker.sql(f"UPDATE events SET position = {2**62} WHERE position = 10")
    with world.open() as ledger:
        damage = ledger.verify(workers=1).damage
        assert damage is not None and (damage.kind, damage.position) == (DamageKind.GAP, 10)
        again = ledger.verify(workers=2).damage
        assert again is not None and (again.kind, again.position) == (DamageKind.GAP, 10)
        with pytest.raises(LedgerDamaged) as info:
            ledger.checkpoint()
    assert (info.value.kind, info.value.position) == (DamageKind.GAP, 10)
