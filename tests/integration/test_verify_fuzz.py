"""Property: any single mutation of a signed ledger's file is reported at its position.

Hypothesis picks a mutation (bit flip in a hashed column, an index column rewritten, a row
deleted, two rows swapped, the tail cut) and a position. `verify` must never raise, must
never say OK, and must name the mutated position as the first bad one.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.conftest import ORIGIN, World, cost
from tracebound.errors import DamageKind
from tracebound.integrity.keys import NoteSigner
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.witness import FileWitness

N = 24
SIGNER = NoteSigner("tb-test", bytes(range(32)))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("pristine")
    world = World(base / "store", base / "outside" / "witness.note", SIGNER)
    SQLiteStore(world.store_dir).close()
    with world.open() as ledger:
        for i in range(N):
            ledger.record(f"run-{i % 3}", [cost(i)], workflow_id=f"wf-{i % 2}")
        ledger.checkpoint()
    return world


mutations = st.one_of(
    st.tuples(st.just("flip"), st.sampled_from(["body", "hash", "prev_hash"]),
              st.integers(1, N), st.integers(0, 10_000), st.integers(0, 7)),
    st.tuples(st.just("column"), st.sampled_from(["stream_id", "stream_version", "workflow_id",
                                                  "timestamp", "schema_version"]),
              st.integers(1, N)),
    st.tuples(st.just("delete"), st.integers(1, N)),
    st.tuples(st.just("swap"), st.integers(1, N - 1), st.integers(1, N - 1)),
    st.tuples(st.just("truncate"), st.integers(1, N)),
)  # fmt: skip


def _apply(db: Path, mutation: tuple[Any, ...]) -> int:
    """Mutate the file; return the position the damage must be reported at."""
    conn = sqlite3.connect(db)
    kind = mutation[0]
    with conn:
        if kind == "flip":
            _, column, pos, offset, bit = mutation
            (value,) = conn.execute(
                f"SELECT {column} FROM events WHERE position = ?", (pos,)
            ).fetchone()
            data = bytearray(value)
            data[int(offset) % len(data)] ^= 1 << int(bit)
            conn.execute(f"UPDATE events SET {column} = ? WHERE position = ?", (bytes(data), pos))
            target = int(pos)
        elif kind == "column":
            _, column, pos = mutation
            new = {"stream_id": "'run-9'", "stream_version": "stream_version + 1000",
                   "workflow_id": "'wf-x'", "timestamp": "'2030-01-01T00:00:00.000000Z'",
                   "schema_version": "schema_version + 1"}[str(column)]  # fmt: skip
            conn.execute(f"UPDATE events SET {column} = {new} WHERE position = ?", (pos,))
            target = int(pos)
        elif kind == "delete":
            conn.execute("DELETE FROM events WHERE position = ?", (mutation[1],))
            target = int(mutation[1])
        elif kind == "swap":
            a = int(mutation[1])
            b = a + 1 + int(mutation[2]) % (N - a)
            conn.execute("UPDATE events SET position = -1 WHERE position = ?", (a,))
            conn.execute("UPDATE events SET position = ? WHERE position = ?", (a, b))
            conn.execute("UPDATE events SET position = ? WHERE position = -1", (b,))
            target = a
        else:
            conn.execute("DELETE FROM events WHERE position >= ?", (mutation[1],))
            target = int(mutation[1])
    conn.close()
    return target


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(mutation=mutations)
def test_every_mutation_is_reported_at_its_position(
    pristine: World, tmp_path: Path, mutation: tuple[object, ...]
) -> None:
    work = Path(tempfile.mkdtemp(dir=tmp_path)) / "store"
    shutil.copytree(pristine.store_dir, work)
    target = _apply(work / "ledger.db", mutation)
    ledger = Ledger(
        SQLiteStore(work, create=False),
        clock=FixedClock(),
        ids=SequentialIds(),
        verifier=SIGNER.verifier,
        witness=FileWitness(pristine.witness_path, origin=ORIGIN),
        origin=ORIGIN,
    )
    with ledger:
        report = ledger.verify(workers=1)
    assert not report.ok
    assert report.damage is not None, (mutation, report.as_dict())
    assert report.damage.position == target, (mutation, report.as_dict())
    if mutation[0] == "truncate":
        assert report.damage.kind is DamageKind.TRUNCATION
    if mutation[0] == "delete" and target < N:
        assert report.damage.kind is DamageKind.GAP
