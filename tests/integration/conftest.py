"""Fixtures that build a real signed ledger: SQLite file, Ed25519 key, witness file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from tracebound.events.catalog import CostIncurred, CostSource, MergeOutcome
from tracebound.integrity.keys import NoteSigner
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.witness import FileWitness

ORIGIN = "tracebound.test/ledger"


@dataclass
class World:
    """Where a test ledger lives: the store (attackable) and the key and witness (not)."""

    store_dir: Path
    witness_path: Path
    signer: NoteSigner

    def open(self, *, with_signer: bool = True) -> Ledger:
        return Ledger(
            SQLiteStore(self.store_dir, create=False),
            clock=FixedClock(),
            ids=SequentialIds(namespace=7),
            signer=self.signer if with_signer else None,
            verifier=self.signer.verifier,
            witness=FileWitness(self.witness_path, origin=ORIGIN, store_dir=self.store_dir),
            origin=ORIGIN,
        )

    @property
    def db(self) -> Path:
        return self.store_dir / "ledger.db"


def cost(i: int) -> CostIncurred:
    return CostIncurred(
        tier="direct", amount_usd=Decimal(f"0.{i:04d}"), source=CostSource("openai")
    )


@pytest.fixture
def world(tmp_path: Path) -> World:
    store_dir = tmp_path / "store"
    SQLiteStore(store_dir).close()
    return World(
        store_dir, tmp_path / "outside" / "witness.note", NoteSigner("tb-test", bytes(range(32)))
    )


def fill_ledger(ledger: Ledger, n: int) -> None:
    """Write ``n`` events over three streams and two workflows, then sign a checkpoint.

    Every fifth event is a merge outcome, the rest are costs: position ``p`` (for ``p % 5``
    not 1) holds the amount ``0.{p-1:04d}``, which the attack tests edit.
    """
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


@pytest.fixture
def filled(world: World) -> Callable[[int], World]:
    """A :func:`fill_ledger` of ``n`` events in the test's SQLite ledger."""

    def fill(n: int) -> World:
        with world.open() as ledger:
            fill_ledger(ledger, n)
        return world

    return fill
