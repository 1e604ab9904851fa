"""A model-based test of tamper detection: random damage piled up on a signed SQLite ledger.

Hypothesis takes a copy of a signed ledger (24 events over three streams, checkpoints at 8,
16 and 24, the witness at 24, outside the store) and applies one damage after another with
SQL on the file, as someone holding it could: flip a bit of a record's hashed body, delete a
row, swap two rows, cut off the tail, put back an older copy of the store. The model is the
store's rows as a map from position to (which record, which bits flipped), so damages that
cancel out (a swap done twice, a bit flipped back, the pristine copy put back) are known to
leave an intact ledger. After every step ``verify`` must name the first position that
differs from what was signed, with its kind.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from tests.integration.conftest import ORIGIN, World, fill_ledger
from tests.integration.test_tamper import SQLiteAttacker
from tracebound.errors import DamageKind
from tracebound.integrity.keys import NoteSigner
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.witness import FileWitness

N = 24
CHECKPOINTS = (8, 16, 24)
SIGNER = NoteSigner("tb-test", bytes(range(32)))


@dataclass(frozen=True)
class Row:
    """A row of the damaged store: the record first written at ``origin``, bits flipped."""

    origin: int
    flips: frozenset[tuple[int, int]] = frozenset()


def expected_damage(rows: dict[int, Row], stored_checkpoint: int) -> tuple[int, set[DamageKind]]:
    """The first position that differs from the signed log, and the kinds verify may call it.

    A record missing with none after it is cut off (truncation) when the store's own newest
    checkpoint still covers it, else the store was put back to before it (rollback). A record
    missing with some after it is a gap; a record that is another one is a reorder; a record
    with flipped bits is tamper (or malformed, should the flip break its JSON)."""
    for p in range(1, N + 1):
        row = rows.get(p)
        if row is None:
            if any(q > p for q in rows):
                return p, {DamageKind.GAP}
            kind = DamageKind.TRUNCATION if stored_checkpoint >= p else DamageKind.ROLLBACK
            return p, {kind}
        kinds = set()
        if row.origin != p:
            kinds.add(DamageKind.REORDER)
        if row.flips:
            kinds |= {DamageKind.TAMPER, DamageKind.MALFORMED}
        if kinds:
            return p, kinds
    return 0, set()


class TamperMachine(RuleBasedStateMachine):
    """Set by :func:`test_verify_names_the_first_damage`: the pristine ledger and its past."""

    pristine: ClassVar[World]
    snapshots: ClassVar[dict[int, Path]]  # the store as it was just after each checkpoint
    base: ClassVar[Path]

    def __init__(self) -> None:
        super().__init__()
        self.store_dir = Path(tempfile.mkdtemp(dir=self.base)) / "store"
        shutil.copytree(self.pristine.store_dir, self.store_dir)
        self.attacker = SQLiteAttacker(self.store_dir)
        self.rows = {p: Row(p) for p in range(1, N + 1)}
        self.stored_checkpoint = N

    @rule(position=st.integers(1, N), offset=st.integers(0, 10_000), bit=st.integers(0, 7))
    def flip_body_bit(self, position: int, offset: int, bit: int) -> None:
        found = self.attacker.rows(f"SELECT body FROM events WHERE position = {position}")
        row = self.rows.get(position)
        assert bool(found) == (row is not None)
        if row is None:
            return
        body = bytearray(found[0][0])
        at = offset % len(body)
        body[at] ^= 1 << bit
        self.attacker.sql(
            "UPDATE events SET body = ? WHERE position = ?", params=(bytes(body), position)
        )
        self.rows[position] = Row(row.origin, row.flips ^ {(at, bit)})

    @rule(position=st.integers(1, N))
    def delete(self, position: int) -> None:
        self.attacker.sql(f"DELETE FROM events WHERE position = {position}")
        self.rows.pop(position, None)

    @rule(a=st.integers(1, N), b=st.integers(1, N))
    def swap(self, a: int, b: int) -> None:
        if a == b:
            return
        self.attacker.swap(a, b)
        moved = {a: self.rows.pop(b, None), b: self.rows.pop(a, None)}
        self.rows.update({p: row for p, row in moved.items() if row is not None})

    @rule(position=st.integers(1, N))
    def truncate(self, position: int) -> None:
        self.attacker.sql(f"DELETE FROM events WHERE position >= {position}")
        self.rows = {p: row for p, row in self.rows.items() if p < position}

    @rule(size=st.sampled_from(CHECKPOINTS))
    def put_back_older_copy(self, size: int) -> None:
        """The store as it was after the checkpoint of ``size`` (at 24: the intact one)."""
        self.attacker.restore(self.snapshots[size])
        self.rows = {p: Row(p) for p in range(1, size + 1)}
        self.stored_checkpoint = size

    @invariant()
    def verify_names_the_first_damage(self) -> None:
        ledger = Ledger(
            SQLiteStore(self.store_dir, create=False),
            clock=FixedClock(),
            ids=SequentialIds(),
            verifier=SIGNER.verifier,
            witness=FileWitness(self.pristine.witness_path, origin=ORIGIN),
            origin=ORIGIN,
        )
        with ledger:
            report = ledger.verify(workers=1)
        position, kinds = expected_damage(self.rows, self.stored_checkpoint)
        if not kinds:
            assert report.ok, report.as_dict()
            return
        assert not report.ok
        damage = report.damage
        assert damage is not None, report.as_dict()
        assert (damage.position, damage.kind in kinds) == (position, True), (
            damage.as_dict(),
            kinds,
        )


@pytest.mark.slow
def test_verify_names_the_first_damage(tmp_path: Path) -> None:
    base = tmp_path / "pristine"
    world = World(base / "store", base / "outside" / "witness.note", SIGNER)
    SQLiteStore(world.store_dir).close()
    snapshots = {}
    done = 0
    for size in CHECKPOINTS:
        with world.open() as ledger:
            fill_ledger(ledger, size - done)  # its events, then a signed checkpoint
        done = size
        snapshots[size] = tmp_path / f"at-{size}"
        shutil.copytree(world.store_dir, snapshots[size])  # closed: the copy is whole
    machine = type(
        "TamperMachineRun",
        (TamperMachine,),
        {"pristine": world, "snapshots": snapshots, "base": tmp_path},
    )
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=60,
            stateful_step_count=15,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
