"""Two `tracebound checkpoint` runs at once on one ledger and one witness (cron and a
person, or two writers that both sign): the one that reaches the witness second used to
hand it a consistency proof from the checkpoint it held *before* the other's update, and
failed with "equal tree sizes need an empty consistency proof" (or "rollback"), exit 1, as
if the log were damaged. The interleaving is forced, not timed: the second ledger signs
from inside the first one's call to the witness, just before the witness reads its file.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence

import pytest

from tests.integration.conftest import World, cost
from tracebound.errors import LedgerDamaged
from tracebound.integrity.keys import NoteVerifier
from tracebound.integrity.note import Checkpoint
from tracebound.ledger import Ledger
from tracebound.store.witness import FileWitness


class _Meanwhile(FileWitness):
    """A witness file that runs ``meanwhile`` once, before its first update is checked."""

    def __init__(self, witness: FileWitness, meanwhile: Callable[[], None]) -> None:
        super().__init__(witness.path, origin=witness.origin)
        self._meanwhile: Callable[[], None] | None = meanwhile

    def update(
        self, note_text: str, verifier: NoteVerifier, consistency_proof: Sequence[bytes]
    ) -> Checkpoint:
        if self._meanwhile is not None:
            run, self._meanwhile = self._meanwhile, None
            run()
        return super().update(note_text, verifier, consistency_proof)


def _racing(world: World, meanwhile: Callable[[Ledger], None]) -> Ledger:
    first = world.open()
    other = world.open()
    assert isinstance(first.witness, FileWitness)
    first.witness = _Meanwhile(first.witness, lambda: meanwhile(other))
    return first


def _signed(world: World, n: int) -> None:
    with world.open() as ledger:
        for i in range(n):
            ledger.record(f"run-{i % 2}", [cost(i)])
        ledger.checkpoint()


def test_two_checkpoints_of_the_same_size(world: World) -> None:
    _signed(world, 3)
    with world.open() as ledger:
        ledger.record("run-0", [cost(9)])

    def sign(other: Ledger) -> None:
        other.checkpoint()

    with _racing(world, sign) as first:
        assert first.checkpoint().size == 4  # the other signed size 4 first, same witness
        report = first.verify()
        assert report.ok, report.damage
        assert report.witness_size == 4


def test_a_longer_checkpoint_signed_meanwhile_covers_this_one(world: World) -> None:
    _signed(world, 3)
    with world.open() as ledger:
        ledger.record("run-0", [cost(9)])

    def sign_more(other: Ledger) -> None:
        other.record("run-1", [cost(10)])
        other.checkpoint()

    with _racing(world, sign_more) as first:
        assert first.checkpoint().size == 4
        report = first.verify()
        assert report.ok, report.damage
        assert report.witness_size == 5  # the witness kept the longer one


def _put_back_to_5_of_8(world: World) -> None:
    """Sign 5 events, copy the store, sign 3 more (the witness holds 8), then put the copy
    back: the store is rolled back behind its witness."""
    _signed(world, 5)
    snapshot = world.store_dir.with_name("snapshot")
    shutil.copytree(world.store_dir, snapshot)
    _signed(world, 3)  # 8 events, the witness holds 8
    shutil.rmtree(world.store_dir)
    shutil.copytree(snapshot, world.store_dir)


def test_a_store_behind_its_witness_is_still_refused(world: World) -> None:
    """Not a race: the witness held a longer checkpoint before this one started (the store
    was put back to an older copy), so the new checkpoint is refused as a rollback."""
    _put_back_to_5_of_8(world)
    with world.open() as ledger:
        ledger.record("run-0", [cost(99)])
        with pytest.raises(LedgerDamaged, match="rollback"):
            ledger.checkpoint()


@pytest.mark.parametrize("grown", [3, 5])  # as long as the witnessed log, and longer
def test_a_fork_past_the_witness_is_refused_before_anything_is_signed(
    world: World, grown: int
) -> None:
    """The store put back to an older copy and grown again to the witness's length or past
    it: the checkpoint must refuse before it signs. A signed note of the forked log saved
    in the store (and only then refused by the witness) would be a valid signature over a
    history the witness never saw, for anyone who checks proofs with the public key alone."""
    _put_back_to_5_of_8(world)
    with world.open() as ledger:
        for i in range(grown):
            ledger.record("run-9", [cost(100 + i)])  # 5 + grown >= 8 events, not the signed ones
        before = ledger.store.checkpoints()
        with pytest.raises(LedgerDamaged, match="fork") as info:
            ledger.checkpoint()
        assert info.value.kind == "fork"
        assert ledger.store.checkpoints() == before  # nothing signed over the fork
