"""One at-rest attack suite for every ledger backend (CONVENTIONS #4).

The attacker holds the store (its files or its database): they can edit, delete, reorder
and rewrite records, recompute every hash, replace the checkpoints or put an older copy
back. They hold neither the signing key nor the witness file, which live elsewhere. Every
attack must be reported with its kind and the first position it touched.

A backend's test module subclasses :class:`TamperSuite` and provides two fixtures:

* ``world``: a :class:`LedgerWorld` that opens a signed ``Ledger`` on an empty store;
* ``attacker``: an :class:`Attacker` that damages that store with the backend's raw means
  (SQL on the file or database, bytes of the log file), never through tracebound's API.

Attacks that only one backend can make (a torn line, a reformatted line) stay in that
backend's module, next to its subclass.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import orjson
import pytest
from blake3 import blake3

from tests.integration.conftest import ORIGIN, cost, fill_ledger
from tracebound.errors import DamageKind, LedgerDamaged, ProofError
from tracebound.integrity import nodes as nodes_mod
from tracebound.integrity.keys import NoteSigner
from tracebound.integrity.merkle import verify_consistency
from tracebound.integrity.note import Checkpoint, sign_checkpoint
from tracebound.ledger import InclusionBundle, Ledger, verify_bundle
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.nodes import store_nodes
from tracebound.store.port import LedgerStore, MerkleNodeStore, RecordFilter, read_matching
from tracebound.store.witness import FileWitness

# A well-formed hash that no record in these tests has.
FORGED_HASH = "5a" * 32


class LedgerWorld(Protocol):
    """Where a test ledger lives: the store (attackable) and the key and witness (not)."""

    signer: NoteSigner

    def open(self) -> Ledger: ...


@dataclass
class SignedWorld:
    """A :class:`LedgerWorld` on any store: how to open it, the key and the witness file."""

    open_store: Callable[[], LedgerStore]
    witness_path: Path
    signer: NoteSigner
    store_dir: Path | None = None  # given, the witness refuses to live inside it

    def open(self) -> Ledger:
        return Ledger(
            self.open_store(),
            clock=FixedClock(),
            ids=SequentialIds(namespace=7),
            signer=self.signer,
            verifier=self.signer.verifier,
            witness=FileWitness(self.witness_path, origin=ORIGIN, store_dir=self.store_dir),
            origin=ORIGIN,
        )


class Attacker(Protocol):
    """What someone holding the store can do to it. Positions are 1-based log positions."""

    def edit_body(self, position: int, old: str, new: str) -> None:
        """Replace ``old`` (which must be there) by ``new`` in the record's hashed bytes."""

    def edit_column(self, position: int, column: str, value: str) -> None:
        """Set a field stored with the record; ``"hash"`` takes hex and is the stored hash."""

    def delete(self, position: int, *, renumber: bool = False) -> None:
        """Remove one record; with ``renumber``, move every later record down one place."""

    def delete_from(self, position: int) -> None:
        """Remove the record at ``position`` and every one after it."""

    def swap(self, a: int, b: int) -> None:
        """Exchange the places of two records."""

    def rewrite_chain(self, position: int, *, through: int | None = None) -> None:
        """Change the amount at ``position`` and recompute every hash (up to position
        ``through`` only, if given): see :func:`forge_chain`."""

    def replace_checkpoints(self, notes: Sequence[tuple[int, str]]) -> None:
        """Replace the stored checkpoints by ``(size, signed note)`` pairs; none drops them."""

    def snapshot(self) -> Any:
        """Copy the whole store aside."""

    def restore(self, snapshot: Any) -> None:
        """Put a copy made by :meth:`snapshot` back in place of the store."""

    def last_position(self) -> int:
        """The highest position the store holds, read raw."""


def forge_chain(
    rows: Iterable[tuple[int, str, bytes, bytes]], position: int, *, through: int | None = None
) -> list[tuple[int, bytes, bytes, bytes]]:
    """A consistent forgery: change one amount, then recompute every hash after it.

    Args:
        rows: ``(position, stream_id, prev_hash, body)`` of every record, in log order.
        position: The record whose ``amount_usd`` becomes ``9.…``.
        through: The last position rewritten; records after it keep their stored bytes
            and hashes (so they still link to the hashes the forgery replaced).

    Returns:
        ``(position, prev_hash, hash, body)`` for every record, as the attacker writes them
        back. Each record's body names its ``prev_hash``, so that is rewritten too.
    """
    heads: dict[str, bytes] = {}
    forged = []
    for pos, stream_id, prev, old_body in rows:
        if through is not None and pos > through:
            forged.append((pos, prev, blake3(prev + old_body).digest(), old_body))
            continue
        new_prev = heads.get(stream_id, prev)
        body = old_body
        if pos == position:
            assert b'"amount_usd":"0.' in body
            body = body.replace(b'"amount_usd":"0.', b'"amount_usd":"9.')
        body = body.replace(prev.hex().encode(), new_prev.hex().encode())
        digest = blake3(new_prev + body).digest()
        heads[stream_id] = digest
        forged.append((pos, new_prev, digest, body))
    return forged


class DirectorySnapshots:
    """Snapshots for a store that is a directory of files: copy it aside and back."""

    store_dir: Path
    _snapshots = 0

    def snapshot(self) -> Path:
        self._snapshots += 1
        copy = self.store_dir.with_name(f"snapshot-{self._snapshots}")
        shutil.copytree(self.store_dir, copy)
        return copy

    def restore(self, snapshot: Path) -> None:
        shutil.rmtree(self.store_dir)
        shutil.copytree(snapshot, self.store_dir)


class SqlAttacker:
    """The attacks that are the same SQL on every SQL backend: same tables, same columns.

    A subclass runs the statements with its own driver (``sql``, ``rows``, ``sql_many``,
    writing placeholders as ``param``) and adds what differs: ``edit_body``, how to
    renumber after a deleted row, and snapshots.
    """

    param: ClassVar[str]  # the driver's placeholder: "?" or "%s"
    _BYTES_COLUMNS: ClassVar[tuple[str, ...]] = ("hash", "prev_hash")

    def sql(self, *statements: str, params: Sequence[Any] = ()) -> int:
        """Run statements in one transaction; the rows the last one changed."""
        raise NotImplementedError

    def sql_many(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def renumber_after(self, position: int) -> None:
        """Move every row after ``position`` down one place."""
        raise NotImplementedError

    def edit_column(self, position: int, column: str, value: str) -> None:
        stored = bytes.fromhex(value) if column in self._BYTES_COLUMNS else value
        query = f'UPDATE events SET "{column}" = {self.param} WHERE position = {self.param}'
        assert self.sql(query, params=(stored, position)) == 1

    def delete(self, position: int, *, renumber: bool = False) -> None:
        assert self.sql(f"DELETE FROM events WHERE position = {position}") == 1
        if renumber:
            self.renumber_after(position)

    def delete_from(self, position: int) -> None:
        assert self.sql(f"DELETE FROM events WHERE position >= {position}") > 0

    def swap(self, a: int, b: int) -> None:
        self.sql(
            f"UPDATE events SET position = -1 WHERE position = {a}",
            f"UPDATE events SET position = {a} WHERE position = {b}",
            f"UPDATE events SET position = {b} WHERE position = -1",
        )

    def rewrite_chain(self, position: int, *, through: int | None = None) -> None:
        rows = self.rows(
            "SELECT position, stream_id, prev_hash, body FROM events ORDER BY position"
        )
        forged = forge_chain(
            [(pos, sid, bytes(prev), bytes(body)) for pos, sid, prev, body in rows],
            position,
            through=through,
        )
        p = self.param
        self.sql_many(
            f"UPDATE events SET prev_hash = {p}, hash = {p}, body = {p} WHERE position = {p}",
            [(prev, digest, body, pos) for pos, prev, digest, body in forged],
        )

    def replace_checkpoints(self, notes: Sequence[tuple[int, str]]) -> None:
        insert = f"INSERT INTO checkpoints (size, note) VALUES ({self.param}, {self.param})"
        self.sql("DELETE FROM checkpoints")
        for size, note in notes:
            self.sql(insert, params=(size, note))

    def last_position(self) -> int:
        ((last,),) = self.rows("SELECT max(position) FROM events")
        return int(last)


def damage_of(world: LedgerWorld) -> LedgerDamaged:
    with world.open() as ledger:
        report = ledger.verify(workers=1)
    assert report.damage is not None, report.as_dict()
    assert not report.ok
    return report.damage


class TamperSuite:
    """The attacks every backend must detect, each with its kind and position."""

    # What verify reports when one record in the middle is deleted. Where positions are a
    # stored column (SQLite, PostgreSQL) the position is simply missing: GAP. Where a
    # record's position is its place in the file (JSONL line numbers), every later record
    # moves up one place and is found where it was not written: REORDER.
    middle_delete_kind: ClassVar[DamageKind] = DamageKind.GAP

    @pytest.fixture
    def world(self) -> LedgerWorld:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def attacker(self) -> Attacker:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def filled(self, world: LedgerWorld) -> Callable[[int], LedgerWorld]:
        """``n`` events over three streams and two workflows, then a signed checkpoint."""

        def fill(n: int) -> LedgerWorld:
            with world.open() as ledger:
                fill_ledger(ledger, n)
            return world

        return fill

    # -- an intact ledger ----------------------------------------------------------------

    def test_intact_ledger_verifies(self, filled: Callable[[int], LedgerWorld]) -> None:
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

    # -- edits -----------------------------------------------------------------------------

    def test_edit_one_payload_is_tamper_at_that_position(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(30)
        attacker.edit_body(18, '"amount_usd":"0.0017"', '"amount_usd":"0.9017"')
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.TAMPER, 18)

    def test_an_edited_position_in_the_bytes_is_tamper_not_reorder(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        # A bit flipped in the position's digit makes the bytes say another position, but
        # they no longer hash to the stored hash: altered in place, not a record moved
        # there whole (found by test_tamper_stateful: 1 -> 0 was reported as reorder).
        world = filled(30)
        attacker.edit_body(11, '"position":11,', '"position":10,')
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.TAMPER, 11)

    def test_edit_index_column_is_tamper(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(30)
        attacker.edit_column(7, "workflow_id", "wf-9")
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.TAMPER, 7)

    def test_edit_the_event_type_column_is_tamper(
        self,
        filled: Callable[[int], LedgerWorld],
        attacker: Attacker,
    ) -> None:
        """``event_type`` is stored beside the hashed body on the SQL backends and read
        from there: the projections' SQLite reader decides by it whether to read a
        record's body at all (a ``cost_incurred`` relabelled ``rag_hit`` leaves the cost
        views), and the audit trail shows it. It must be checked like the other index
        columns. (On JSONL the field is inside the hashed record.)"""
        world = filled(30)
        attacker.edit_column(7, "event_type", "rag_hit")
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.TAMPER, 7)

    def test_an_edited_column_hides_no_event_from_a_listing_of_what_the_bodies_say(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        """``tracebound log --workflow/--type`` lists the records whose hashed body says so
        (it shows the body). The store filters by its columns, which an attacker can edit
        without touching the body (``verify`` reports it, a listing must not lose the event
        meanwhile): the body is searched as well. On the SQL backends positions 7 and 11
        keep their bodies (wf-0, a merge outcome at 11); on JSONL the edit is the body."""
        world = filled(30)
        attacker.edit_column(7, "workflow_id", "wf-9")
        attacker.edit_column(11, "event_type", "rag_hit")
        with world.open() as ledger:
            store = ledger.store
            bodies = [(r.position, orjson.loads(r.body)) for r in store.read_raw()]
            for says, value, where in (
                ("workflow_id", "wf-0", RecordFilter(workflows=frozenset({"wf-0"}), in_body=True)),
                (
                    "event_type",
                    "merge_outcome",
                    RecordFilter(kinds=frozenset({"merge_outcome"}), in_body=True),
                ),
            ):
                want = [p for p, body in bodies if body[says] == value]
                got = {r.position for r in read_matching(store, where)}
                assert set(want) <= got, (says, sorted(set(want) - got))

    def test_edit_the_stored_hash_is_tamper(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(30)
        attacker.edit_column(7, "hash", FORGED_HASH)
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.TAMPER, 7)

    # -- deletions and moves -------------------------------------------------------------

    def test_delete_last_events_is_truncation(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(30)
        attacker.delete_from(27)
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.TRUNCATION, 27)

    def test_delete_middle_event_is_gap_or_reorder(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(30)
        attacker.delete(12)
        d = damage_of(world)
        assert (d.kind, d.position) == (self.middle_delete_kind, 12)
        detail = {
            DamageKind.GAP: "position 12 is missing",
            DamageKind.REORDER: "written at position 13",
        }
        assert detail[d.kind] in d.detail

    def test_delete_middle_event_and_renumber_is_reported(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(30)
        attacker.delete(12, renumber=True)
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.REORDER, 12)
        assert "written at position 13" in d.detail

    def test_swap_two_events_is_reorder(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(30)
        attacker.swap(9, 21)
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.REORDER, 9)
        assert "written at position 21" in d.detail

    # -- consistent forgeries --------------------------------------------------------------

    def test_consistent_rewrite_without_key_fails_merkle(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(30)
        attacker.rewrite_chain(14)
        with world.open() as ledger:
            report = ledger.verify(workers=1)
        assert report.checks["chain"] == "ok"  # the forgery is internally consistent...
        assert report.damage is not None  # ...but not with what was signed
        assert report.damage.kind is DamageKind.TAMPER
        assert report.checks["merkle"] == "failed"

    def test_rewrite_and_resign_with_own_key_is_forged_signature(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(30)
        attacker.rewrite_chain(14)
        with world.open() as ledger:
            forged_root = bytes.fromhex(ledger.verify(workers=1).root)
        own_key = NoteSigner("tb-test", b"\x01" * 32)  # same name, different key
        note = sign_checkpoint(Checkpoint(origin=ORIGIN, size=30, root=forged_root), own_key)
        attacker.replace_checkpoints([(30, note)])
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.FORGED_SIGNATURE, 30)

    def test_rewrite_resigned_with_the_leaked_key_is_caught_by_the_witness(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        """The attacker holds the signing key too (it leaked): the rewritten log carries a
        checkpoint that verifies. Only the witness, kept outside the store, still holds the
        root that was signed before, and the log is not an extension of it."""
        world = filled(30)
        with world.open() as ledger:
            witnessed = ledger.witness.latest(world.signer.verifier)  # type: ignore[union-attr]
        attacker.rewrite_chain(14)
        with world.open() as ledger:
            forged_root = bytes.fromhex(ledger.verify(workers=1).root)
        note = sign_checkpoint(Checkpoint(origin=ORIGIN, size=30, root=forged_root), world.signer)
        attacker.replace_checkpoints([(30, note)])
        with world.open() as ledger:
            report = ledger.verify(workers=1)
        assert report.checks["signature"] == "ok"  # the forgery is validly signed...
        assert report.checks["witness"] == "failed"  # ...but not what the witness saw
        d = report.damage
        assert d is not None and (d.kind, d.position) == (DamageKind.FORK, 1)
        assert "witness" in d.detail and "signing key" in d.detail
        with world.open() as ledger, pytest.raises(LedgerDamaged) as info:
            ledger.checkpoint()
        assert info.value.kind is DamageKind.FORK
        with world.open() as ledger:  # the witness keeps the honest checkpoint
            assert ledger.witness.latest(world.signer.verifier) == witnessed  # type: ignore[union-attr]

    def test_rewrite_and_drop_checkpoints_is_caught_by_witness(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(30)
        attacker.rewrite_chain(14)
        attacker.replace_checkpoints([])
        d = damage_of(world)
        # Same size as the witness's checkpoint, another root: the witnessed log was not
        # rolled back to, it was replaced (no signed checkpoint left to narrow it down).
        assert (d.kind, d.position) == (DamageKind.FORK, 1)
        assert "positions 1..30" in d.detail

    def test_copy_back_older_snapshot_is_rollback(
        self, world: LedgerWorld, attacker: Attacker
    ) -> None:
        with world.open() as ledger:
            for i in range(10):
                ledger.record("run", [cost(i)])
            ledger.checkpoint()
        snapshot = attacker.snapshot()
        with world.open() as ledger:
            for i in range(10, 25):
                ledger.record("run", [cost(i)])
            ledger.checkpoint()
        attacker.restore(snapshot)
        assert attacker.last_position() == 10
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.ROLLBACK, 11)
        with world.open() as ledger:  # 10 events behind the witness: none "not yet signed"
            assert ledger.verify(workers=1).uncovered == 0

    def test_a_rollback_grown_back_past_the_witness_is_a_fork(
        self, world: LedgerWorld, attacker: Attacker
    ) -> None:
        """An older copy put back, then other events appended: shorter than the witness's
        checkpoint it is a rollback; as long or longer it is a fork (the witnessed tree is
        not a prefix of the log), at the first position after the last matching checkpoint.
        ``checkpoint`` refuses to sign it, and the witness keeps what it held."""
        with world.open() as ledger:
            for i in range(10):
                ledger.record("run", [cost(i)])
            ledger.checkpoint()
        snapshot = attacker.snapshot()
        with world.open() as ledger:
            for i in range(10, 20):
                ledger.record("run", [cost(i)])
            ledger.checkpoint()
            witnessed = ledger.witness.latest(world.signer.verifier)  # type: ignore[union-attr]
        attacker.restore(snapshot)
        for size, kind in ((15, DamageKind.ROLLBACK), (20, DamageKind.FORK), (23, DamageKind.FORK)):
            with world.open() as ledger:
                while ledger.store.size() < size:
                    ledger.record("run", [cost(500 + ledger.store.size())])
            d = damage_of(world)
            assert (d.kind, d.position) == (kind, 16 if kind is DamageKind.ROLLBACK else 11), d
            with world.open() as ledger, pytest.raises(LedgerDamaged) as info:
                ledger.checkpoint()
            assert (info.value.kind, info.value.position) == (d.kind, d.position)
        with world.open() as ledger:
            assert ledger.witness.latest(world.signer.verifier) == witnessed  # type: ignore[union-attr]
            assert ledger.store.checkpoints()[-1][0] == 10

    # -- what verify and checkpoint cover ------------------------------------------------

    def test_events_after_last_checkpoint_are_chain_checked(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(20)
        with world.open() as ledger:
            ledger.record("run-x", [cost(99)])
            report = ledger.verify(workers=1)
            assert report.ok and report.uncovered == 1
        attacker.edit_body(21, '"0.0099"', '"0.0098"')
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.TAMPER, 21)

    def test_an_uncovered_event_rewritten_alone_breaks_its_streams_next_link(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        """After the newest checkpoint only the chains vouch for the log: an event edited
        and re-hashed consistently (no Merkle root covers it) is caught by the next event
        of its stream, which still links to the hash it replaced."""
        world = filled(20)
        with world.open() as ledger:
            ledger.record("run-x", [cost(97)])
            ledger.record("run-y", [cost(98)])
            ledger.record("run-x", [cost(99)])
            assert ledger.verify(workers=1).uncovered == 3
        attacker.rewrite_chain(21, through=21)
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.TAMPER, 23)
        assert "does not link to version 1" in d.detail

    def test_checkpoint_refuses_to_sign_damage(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(10)
        attacker.edit_body(4, '"0.0003"', '"0.0004"')
        with world.open() as ledger, pytest.raises(LedgerDamaged) as info:
            ledger.checkpoint(full=True)
        assert info.value.position == 4

    def test_incremental_checkpoint_refuses_damage_after_the_signed_prefix(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(10)
        with world.open() as ledger:
            ledger.record("run-x", [cost(99), cost(98)])
        attacker.edit_body(11, '"0.0099"', '"0.0098"')
        with world.open() as ledger, pytest.raises(LedgerDamaged) as info:
            ledger.checkpoint()
        assert (info.value.kind, info.value.position) == (DamageKind.TAMPER, 11)

    def test_incremental_checkpoint_never_vouches_for_damage_in_the_signed_prefix(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        """Incremental checkpoints read only the new events: damage in the signed prefix
        is left to `verify`, and the new root is built from the signed frontier, so the
        damaged bytes are not what it signs."""
        world = filled(10)
        with world.open() as ledger:
            ledger.record("run-x", [cost(99)])
            intact = ledger.verify(workers=1)
        assert intact.ok and intact.size == 11
        attacker.edit_body(4, '"0.0003"', '"0.0004"')
        with world.open() as ledger:
            run = ledger.checkpoint_run()
            assert run.incremental and run.verified_from == 11
            # It signed the intact log's root, not one over the tampered bytes...
            assert run.checkpoint.root.hex() == intact.root
            report = ledger.verify(workers=1)
        # ... and verify still names the damage.
        assert report.damage is not None
        assert (report.damage.kind, report.damage.position) == (DamageKind.TAMPER, 4)

    # -- incremental checkpoints and stored Merkle nodes ---------------------------------

    @pytest.fixture
    def small_trees(self, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
        """Chunks of 8 and nodes of 4 leaves, so small logs have many of each; returns the
        spans verify reads, as they are read."""
        import tracebound.ledger as ledger_mod

        monkeypatch.setattr(ledger_mod, "CHUNK", 8)
        monkeypatch.setattr(nodes_mod, "LEVEL_BITS", 2)
        monkeypatch.setattr(nodes_mod, "WIDTH", 4)
        spans: list[tuple[int, int]] = []
        real = ledger_mod._verify_span

        def spy(store: LedgerStore, start: int, stop: int, sizes: Sequence[int]) -> Any:
            spans.append((start, stop))
            return real(store, start, stop, sizes)

        monkeypatch.setattr(ledger_mod, "_verify_span", spy)
        return spans

    def test_incremental_checkpoints_sign_what_a_full_one_would(
        self, filled: Callable[[int], LedgerWorld], small_trees: list[tuple[int, int]]
    ) -> None:
        world = filled(10)
        signed = 10
        for batch in (1, 5, 17, 3, 40):
            with world.open() as ledger:
                for i in range(batch):
                    ledger.record(f"run-{i % 4}", [cost(100 + i)])
                small_trees.clear()
                run = ledger.checkpoint_run()
                assert run.incremental and run.verified_from == signed + 1
                # Only the new events were read, each once (the 40 are read partly by
                # helper processes, which this spy does not see).
                spans = sorted(small_trees)
                assert all(signed < a <= b <= signed + batch for a, b in spans)
                if batch < 40:
                    assert (spans[0][0], spans[-1][1]) == (signed + 1, signed + batch)
                    assert all(a == b + 1 for (a, _), (_, b) in zip(spans[1:], spans, strict=False))
                report = ledger.verify(workers=1)
                assert report.ok, report.as_dict()
                assert run.checkpoint.root.hex() == report.root
                signed += batch
                for position in (1, signed // 2, signed):
                    assert verify_bundle(ledger.prove(position), world.signer.verifier)
        with world.open() as ledger:
            assert ledger.checkpoint(full=True).root.hex() == report.root

    def test_incremental_checkpoint_refuses_new_events_linked_to_a_forged_head(
        self,
        filled: Callable[[int], LedgerWorld],
        attacker: Attacker,
        small_trees: list[tuple[int, int]],
    ) -> None:
        """The attacker changes the stored hash of run-1's newest signed event (position
        8, under a stored node, so the frontier check does not read it); the application
        appends to run-1. Linking to the stored hash would sign a log `verify` rejects:
        the checkpoint proves the head under the signed root, finds it is not the one
        signed, verifies the whole log and names the damage."""
        world = filled(10)
        attacker.edit_column(8, "hash", "5a" * 32)
        with world.open() as ledger:
            ledger.record("run-1", [cost(99)])
            with pytest.raises(LedgerDamaged) as info:
                ledger.checkpoint()
            assert ledger.store.checkpoints()[-1][0] == 10  # nothing new was signed
        assert (info.value.kind, info.value.position) == (DamageKind.TAMPER, 8)

    def test_incremental_checkpoint_names_a_garbled_head_in_the_signed_prefix(
        self,
        filled: Callable[[int], LedgerWorld],
        attacker: Attacker,
        small_trees: list[tuple[int, int]],
    ) -> None:
        """A stream head the new events link to that cannot even be parsed is damage at
        its position, not an error without one."""
        world = filled(10)
        attacker.edit_body(8, '"0.0007"', '"0.0007')
        with world.open() as ledger:
            ledger.record("run-1", [cost(99)])
            with pytest.raises(LedgerDamaged) as info:
                ledger.checkpoint()
        assert (info.value.kind, info.value.position) == (DamageKind.MALFORMED, 8)

    def test_tampered_merkle_nodes_never_pass(self, filled: Callable[[int], LedgerWorld]) -> None:
        """The stored nodes are in the attacker's hands too: a proof made from a wrong one
        is refused, and a checkpoint verifies the whole log and stores them again."""
        world = filled(300)
        with world.open() as ledger:
            store = ledger.store
            assert isinstance(store, MerkleNodeStore)
            assert store.merkle_node_count(1) == 300 // 256  # stored by the checkpoint
            store.drop_merkle_nodes()
            store.add_merkle_nodes(1, 0, [b"\x42" * 32])
            with pytest.raises(ProofError, match="stored Merkle nodes disagree"):
                ledger.prove(280)  # its proof holds the root of positions 1..256
            run = ledger.checkpoint_run()
            assert not run.incremental
            assert run.full_reason is not None and "Merkle nodes" in run.full_reason
            assert verify_bundle(ledger.prove(280), world.signer.verifier).size == 300
            assert ledger.checkpoint_run().incremental  # the nodes agree again

    def test_stored_nodes_forged_beyond_or_deleted_between_are_named(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        """``merkle_node_count`` was ``MAX(idx) + 1``: one forged row at 2**40 and no node
        of that level was ever stored again, unsaid. Now a checkpoint names the level and
        the missing node, and ``--full`` stores them again. (JSONL's nodes files:
        ``tests/unit/store/test_stored_nodes.py``.)"""
        if not isinstance(attacker, SqlAttacker):
            pytest.skip("SQL stores; the JSONL nodes files are tested in tests/unit/store")
        world = filled(600)
        forged = (1, 2**40, b"\x42" * 32)
        p = attacker.param
        attacker.sql_many(f"INSERT INTO merkle_nodes (level, idx, hash) VALUES ({p}, {p}, {p})",
                          [forged])  # fmt: skip
        with world.open() as ledger:
            for i in range(600):
                ledger.record("run-x", [cost(1000 + i)])
            with pytest.raises(ProofError, match=f"node 2 of level 1 .* index {2**40}"):
                ledger.checkpoint()
            assert ledger.checkpoint_run(full=True).checkpoint.size == 1200
        assert attacker.rows("SELECT idx FROM merkle_nodes WHERE level = 1 ORDER BY idx") == [
            (0,),
            (1,),
            (2,),
            (3,),
        ]
        assert attacker.sql("DELETE FROM merkle_nodes WHERE level = 1 AND idx = 1") == 1
        with world.open() as ledger:
            with pytest.raises(ProofError, match="stored Merkle nodes disagree"):
                ledger.prove(700)  # needs node 1 (positions 257..512)
            run = ledger.checkpoint_run()
            assert not run.incremental and "node 1 of level 1" in str(run.full_reason)
            assert verify_bundle(ledger.prove(700), world.signer.verifier).size == 1200

    def test_a_wrong_stored_node_never_reaches_the_witness(
        self, filled: Callable[[int], LedgerWorld], small_trees: list[tuple[int, int]]
    ) -> None:
        """A node no frontier check covers (inside a stored higher node) is wrong: the
        consistency proof handed to the witness is made from the leaves instead."""
        world = filled(10)
        with world.open() as ledger:
            held = ledger.witness.latest(world.signer.verifier)  # type: ignore[union-attr]
            assert held is not None and held.size == 10
            ledger.record("run-x", [cost(100 + i) for i in range(10)])
            root = bytes.fromhex(ledger.verify(workers=1).root)
            store = ledger.store
            assert isinstance(store, MerkleNodeStore)
            store_nodes(store, 20)
            row = store.merkle_nodes(1, 0, 5)
            store.drop_merkle_nodes()
            store.add_merkle_nodes(1, 0, [*row[:3], b"\x42" * 32, row[4]])  # leaves 12..15
            wrong = ledger.consistency_proof(10, 20)
            with pytest.raises(ProofError):
                verify_consistency(10, 20, held.root, root, wrong)
            proof = ledger._witness_proof(held, 20, root)
            verify_consistency(10, 20, held.root, root, proof)
            run = ledger.checkpoint_run()
            assert run.checkpoint.root == root
        with world.open() as ledger:
            witnessed = ledger.witness.latest(world.signer.verifier)  # type: ignore[union-attr]
        assert witnessed is not None and witnessed.size == 20

    def test_checkpoint_reports_a_log_cut_below_its_signed_size(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(10)
        attacker.delete_from(8)
        with world.open() as ledger, pytest.raises(LedgerDamaged) as info:
            ledger.checkpoint()
        assert (info.value.kind, info.value.position) == (DamageKind.TRUNCATION, 8)

    def test_checkpoint_reports_a_store_rolled_back_behind_the_witness(
        self, filled: Callable[[int], LedgerWorld], attacker: Attacker
    ) -> None:
        world = filled(10)
        snapshot = attacker.snapshot()
        with world.open() as ledger:
            ledger.record("run-x", [cost(50)])
            ledger.checkpoint()
        attacker.restore(snapshot)
        with world.open() as ledger, pytest.raises(LedgerDamaged) as info:
            ledger.checkpoint()
        assert (info.value.kind, info.value.position) == (DamageKind.ROLLBACK, 11)

    def test_parallel_verify_reports_same_as_serial(
        self,
        filled: Callable[[int], LedgerWorld],
        attacker: Attacker,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        import tracebound.ledger as ledger_mod

        monkeypatch.setattr(ledger_mod, "CHUNK", 8)  # many chunks from a small log
        world = filled(45)
        with world.open() as ledger:
            serial, parallel = ledger.verify(workers=1), ledger.verify(workers=2)
        assert serial.ok and parallel.ok
        assert serial.root == parallel.root
        intact = attacker.snapshot()
        attacks: list[tuple[Callable[[], None], DamageKind]] = [
            (lambda: attacker.edit_column(33, "workflow_id", "wf-9"), DamageKind.TAMPER),
            (lambda: attacker.delete(33), self.middle_delete_kind),
        ]
        for attack, kind in attacks:
            attacker.restore(intact)
            attack()
            with world.open() as ledger:
                a, b = ledger.verify(workers=1), ledger.verify(workers=2)
            assert a.damage is not None and b.damage is not None
            assert (a.damage.kind, a.damage.position) == (b.damage.kind, b.damage.position)
            assert (a.damage.kind, a.damage.position) == (kind, 33)

    def test_inclusion_proof_round_trip(self, filled: Callable[[int], LedgerWorld]) -> None:
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
