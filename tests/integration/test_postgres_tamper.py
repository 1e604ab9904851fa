"""At-rest attacks on a PostgreSQL ledger: each one is reported with its kind and position.

The same attacks as ``test_tamper.py`` on SQLite. Here the attacker holds the database: any
SQL as the owner of the ledger's schema, including snapshots taken with ``CREATE TABLE AS``
and restored later. They do not hold the signing key or the witness file, which live outside
the database. ``Ledger`` sees the store only through the port, so the checks are the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from blake3 import blake3
from psycopg import sql as pgsql

from tests.integration.conftest import ORIGIN, cost
from tracebound.errors import DamageKind, LedgerDamaged, ProofError
from tracebound.events.catalog import MergeOutcome
from tracebound.integrity.keys import NoteSigner
from tracebound.integrity.note import Checkpoint, sign_checkpoint
from tracebound.ledger import InclusionBundle, Ledger, verify_bundle
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.postgres import PostgresStore
from tracebound.store.url import open_store
from tracebound.store.witness import FileWitness

pytestmark = pytest.mark.postgres

SCHEMA = "evidence"
TABLES = ("events", "checkpoints", "meta", "log_head")


@dataclass
class PgWorld:
    """Where a test ledger lives: the database (attackable) and the key and witness (not)."""

    dsn: str
    witness_path: Path
    signer: NoteSigner

    def open(self, *, with_signer: bool = True) -> Ledger:
        return Ledger(
            PostgresStore(self.dsn, schema=SCHEMA, create=False),
            clock=FixedClock(),
            ids=SequentialIds(namespace=7),
            signer=self.signer if with_signer else None,
            verifier=self.signer.verifier,
            witness=FileWitness(self.witness_path, origin=ORIGIN),
            origin=ORIGIN,
        )

    def sql(self, *statements: str, params: tuple[Any, ...] = ()) -> None:
        """Run statements as the attacker: one transaction, straight on the tables."""
        with psycopg.connect(self.dsn) as conn:
            conn.execute(pgsql.SQL("SET search_path TO {}").format(pgsql.Identifier(SCHEMA)))
            for s in statements:
                conn.execute(s.encode(), params or None)

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn) as conn:
            conn.execute(pgsql.SQL("SET search_path TO {}").format(pgsql.Identifier(SCHEMA)))
            return conn.execute(query.encode()).fetchall()


@pytest.fixture
def world(postgres_dsn: str, tmp_path: Path) -> PgWorld:
    PostgresStore(postgres_dsn, schema=SCHEMA).close()
    return PgWorld(
        postgres_dsn, tmp_path / "outside" / "witness.note", NoteSigner("tb-test", bytes(range(32)))
    )


@pytest.fixture
def filled(world: PgWorld) -> Callable[[int], PgWorld]:
    """Write ``n`` events over three streams and two workflows, then sign a checkpoint."""

    def fill(n: int) -> PgWorld:
        with world.open() as ledger:
            for i in range(n):
                payload = (
                    cost(i)
                    if i % 5
                    else MergeOutcome(
                        pr_url=f"https://example.test/pr/{i}", decision="merged", reviewer=None
                    )
                )
                ledger.record(f"run-{i % 3}", [payload], workflow_id=f"wf-{i % 2}")
            ledger.checkpoint()
        return world

    return fill


def damage_of(world: PgWorld) -> LedgerDamaged:
    with world.open() as ledger:
        report = ledger.verify(workers=1)
    assert report.damage is not None, report.as_dict()
    assert not report.ok
    return report.damage


def replace_in_body(position: int, old: str, new: str) -> str:
    return (
        "UPDATE events SET body = convert_to(replace(convert_from(body, 'UTF8'), "
        f"'{old}', '{new}'), 'UTF8') WHERE position = {position}"
    )


def test_intact_ledger_verifies(filled: Callable[[int], PgWorld]) -> None:
    world = filled(40)
    with world.open() as ledger:
        report = ledger.verify(workers=1)
    assert report.ok, report.as_dict()
    assert (report.size, report.checkpoint_size, report.witness_size) == (40, 40, 40)
    assert set(report.checks.values()) == {"ok"}


def test_edit_one_payload_is_tamper_at_that_position(filled: Callable[[int], PgWorld]) -> None:
    world = filled(30)
    world.sql(replace_in_body(18, "0.0017", "0.9017"))
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TAMPER, 18)


def test_edit_index_column_is_tamper(filled: Callable[[int], PgWorld]) -> None:
    world = filled(30)
    world.sql("UPDATE events SET workflow_id = 'wf-9' WHERE position = 7")
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TAMPER, 7)


def test_delete_last_events_is_truncation(filled: Callable[[int], PgWorld]) -> None:
    world = filled(30)
    world.sql("DELETE FROM events WHERE position > 26")
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TRUNCATION, 27)


def test_delete_middle_event_is_gap(filled: Callable[[int], PgWorld]) -> None:
    world = filled(30)
    world.sql("DELETE FROM events WHERE position = 12")
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.GAP, 12)


def test_delete_middle_event_and_renumber_is_reported(filled: Callable[[int], PgWorld]) -> None:
    world = filled(30)
    world.sql(
        "DELETE FROM events WHERE position = 12",
        "UPDATE events SET position = -position WHERE position > 12",
        "UPDATE events SET position = -position - 1 WHERE position < 0",
        "UPDATE log_head SET position = position - 1",
    )
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.REORDER, 12)


def test_swap_two_events_is_reorder(filled: Callable[[int], PgWorld]) -> None:
    world = filled(30)
    world.sql(
        "UPDATE events SET position = -1 WHERE position = 9",
        "UPDATE events SET position = 9 WHERE position = 21",
        "UPDATE events SET position = 21 WHERE position = -1",
    )
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.REORDER, 9)


def _rewrite_chain(world: PgWorld, position: int) -> None:
    """Change one payload and recompute every hash after it: a consistent forgery."""
    rows = world.rows("SELECT position, stream_id, prev_hash, body FROM events ORDER BY position")
    heads: dict[str, bytes] = {}
    updates = []
    for pos, sid, prev, old_body in rows:
        new_prev = heads.get(sid, prev)
        body = bytes(old_body)
        if pos == position:
            body = body.replace(b'"amount_usd":"0.', b'"amount_usd":"9.')
        body = body.replace(prev.hex().encode(), new_prev.hex().encode())
        new_hash = blake3(new_prev + body).digest()
        heads[sid] = new_hash
        updates.append((new_prev, new_hash, body, pos))
    with psycopg.connect(world.dsn) as conn, conn.cursor() as cur:
        cur.executemany(
            pgsql.SQL(
                "UPDATE {} SET prev_hash = %s, hash = %s, body = %s WHERE position = %s"
            ).format(pgsql.Identifier(SCHEMA, "events")),
            updates,
        )


def test_consistent_rewrite_without_key_fails_merkle(filled: Callable[[int], PgWorld]) -> None:
    world = filled(30)
    _rewrite_chain(world, 14)
    with world.open() as ledger:
        report = ledger.verify(workers=1)
    assert report.checks["chain"] == "ok"  # the forgery is internally consistent...
    assert report.damage is not None  # ...but not with what was signed
    assert report.damage.kind is DamageKind.TAMPER
    assert report.checks["merkle"] == "failed"


def test_rewrite_and_resign_with_own_key_is_forged_signature(
    filled: Callable[[int], PgWorld],
) -> None:
    world = filled(30)
    _rewrite_chain(world, 14)
    with world.open() as ledger:
        forged_root = bytes.fromhex(ledger.verify(workers=1).root)
    attacker = NoteSigner("tb-test", b"\x01" * 32)  # same name, different key
    note = sign_checkpoint(Checkpoint(origin=ORIGIN, size=30, root=forged_root), attacker)
    world.sql("DELETE FROM checkpoints")
    world.sql("INSERT INTO checkpoints (size, note) VALUES (30, %s)", params=(note,))
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.FORGED_SIGNATURE, 30)


def test_rewrite_and_drop_checkpoints_is_caught_by_witness(
    filled: Callable[[int], PgWorld],
) -> None:
    world = filled(30)
    _rewrite_chain(world, 14)
    world.sql("DELETE FROM checkpoints")
    d = damage_of(world)
    assert d.kind is DamageKind.ROLLBACK  # the database's checkpoints are behind the witness


def test_restore_older_snapshot_is_rollback(world: PgWorld) -> None:
    with world.open() as ledger:
        for i in range(10):
            ledger.record("run", [cost(i)])
        ledger.checkpoint()
    world.sql(*(f"CREATE TABLE public.snap_{t} AS TABLE {t}" for t in TABLES))
    with world.open() as ledger:
        for i in range(10, 25):
            ledger.record("run", [cost(i)])
        ledger.checkpoint()
    world.sql(
        *(f"DELETE FROM {t}" for t in TABLES),
        *(f"INSERT INTO {t} SELECT * FROM public.snap_{t}" for t in TABLES),
    )
    assert world.rows("SELECT max(position) FROM events") == [(10,)]
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.ROLLBACK, 11)


def test_events_after_last_checkpoint_are_chain_checked(
    filled: Callable[[int], PgWorld],
) -> None:
    world = filled(20)
    with world.open() as ledger:
        ledger.record("run-x", [cost(99)])
        report = ledger.verify(workers=1)
        assert report.ok and report.uncovered == 1
    world.sql(replace_in_body(21, "0.0099", "0.0098"))
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TAMPER, 21)


def test_checkpoint_refuses_to_sign_damage(filled: Callable[[int], PgWorld]) -> None:
    world = filled(10)
    world.sql(replace_in_body(4, "0.0003", "0.0004"))
    with world.open() as ledger, pytest.raises(LedgerDamaged) as info:
        ledger.checkpoint()
    assert info.value.position == 4


def test_parallel_verify_reports_same_as_serial(
    filled: Callable[[int], PgWorld], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker processes reopen the store from its URL (``open_store(store.url)``)."""
    import tracebound.ledger as ledger_mod

    monkeypatch.setattr(ledger_mod, "CHUNK", 8)  # many chunks from a small log
    world = filled(45)
    with world.open() as ledger:
        assert ledger.store.url.startswith("postgresql://")
        with open_store(ledger.store.url) as again:  # type: ignore[attr-defined]
            assert again.size() == 45
        serial, parallel = ledger.verify(workers=1), ledger.verify(workers=2)
    assert serial.ok and parallel.ok
    assert serial.root == parallel.root
    world.sql("DELETE FROM events WHERE position = 33")
    with world.open() as ledger:
        a, b = ledger.verify(workers=1), ledger.verify(workers=2)
    assert a.damage is not None and b.damage is not None
    assert (a.damage.kind, a.damage.position) == (b.damage.kind, b.damage.position)
    assert (a.damage.kind, a.damage.position) == (DamageKind.GAP, 33)


def test_inclusion_proof_round_trip(filled: Callable[[int], PgWorld]) -> None:
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
