"""Stored Merkle nodes a store holder wrote by hand (ADR 0011): a forged node far beyond the
log, a node deleted from the middle, an index that is no index, a nodes file cut short.

``merkle_node_count`` sizes what a checkpoint stores next. A count taken from ``MAX(idx)``
or a file's length believed a single forged row: with a node at index 2**40 nothing was
ever stored again (every proof then read the leaves), a negative index blamed the *log*
for a gap at a negative position. Each is now a :class:`ProofError` that says which level
and which node, and ``checkpoint --full`` stores the nodes again.
"""

from __future__ import annotations

import os
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from tracebound.errors import ProofError
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.integrity.keys import NoteSigner
from tracebound.ledger import Ledger, verify_bundle
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.jsonl import NODES_FILE, JsonlStore
from tracebound.store.nodes import store_nodes
from tracebound.store.port import LedgerStore
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.witness import FileWitness

ORIGIN = "tracebound.test/nodes"
SIGNER = NoteSigner("tb-test", bytes(range(32)))
FAR = 2**40
FAR_FILE = 2**35  # nodes in a sparse nodes file of 1 TiB (ext4 stops at 16 TiB)


def _ledger(store: LedgerStore, tmp_path: Path) -> Ledger:
    return Ledger(
        store,
        clock=FixedClock(),
        ids=SequentialIds(namespace=7),
        signer=SIGNER,
        verifier=SIGNER.verifier,
        witness=FileWitness(tmp_path / "outside" / "witness.note", origin=ORIGIN),
        origin=ORIGIN,
    )


def _fill(ledger: Ledger, n: int) -> None:
    for i in range(n):
        ledger.record(
            f"run-{i % 3}",
            [CostIncurred(tier="direct", amount_usd=Decimal(f"0.{i:04d}"), source=CostSource("s"))],
        )


@pytest.fixture
def sqlite_dir(tmp_path: Path) -> Path:
    """A signed SQLite ledger of 600 events: level 1 holds nodes 0 and 1."""
    store_dir = tmp_path / "store"
    with _ledger(SQLiteStore(store_dir), tmp_path) as ledger:
        _fill(ledger, 600)
        ledger.checkpoint()
    return store_dir


def _sql(store_dir: Path, statement: str, *params: object) -> None:
    conn = sqlite3.connect(store_dir / "ledger.db")
    try:
        with conn:
            conn.execute(statement, params)
    finally:
        conn.close()


def _level_1(store_dir: Path) -> list[int]:
    conn = sqlite3.connect(store_dir / "ledger.db")
    try:
        rows = conn.execute("SELECT idx FROM merkle_nodes WHERE level = 1 ORDER BY idx")
        return [i for (i,) in rows]
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("statement", "says"),
    [
        (f"INSERT INTO merkle_nodes VALUES (1, {FAR}, x'{'42' * 32}')", "node 2 of level 1"),
        ("DELETE FROM merkle_nodes WHERE level = 1 AND idx = 0", "node 0 of level 1"),
        (f"INSERT INTO merkle_nodes VALUES (1, -5, x'{'42' * 32}')", "index -5"),
        (f"INSERT INTO merkle_nodes VALUES (1, 'two', x'{'42' * 32}')", "'two'"),
        (f"INSERT INTO merkle_nodes VALUES (1, 2.5, x'{'42' * 32}')", "2.5"),
    ],
)
def test_sqlite_node_count_refuses_nodes_that_are_not_0_to_n(
    sqlite_dir: Path, statement: str, says: str
) -> None:
    _sql(sqlite_dir, statement)
    with SQLiteStore(sqlite_dir, create=False) as store:
        with pytest.raises(ProofError, match="level 1") as info:
            store.merkle_node_count(1)
        assert says in str(info.value)
        assert store.merkle_node_count(2) == 0  # the other levels are unaffected


def test_a_node_forged_far_beyond_the_log_stops_the_checkpoint_not_the_nodes(
    sqlite_dir: Path, tmp_path: Path
) -> None:
    """Before: the count was 2**40 + 1, so the checkpoint of 1,200 events stored none of
    nodes 2..3 and said nothing; every later proof read the leaves instead."""
    _sql(sqlite_dir, "INSERT INTO merkle_nodes VALUES (1, ?, ?)", FAR, b"\x42" * 32)
    with _ledger(SQLiteStore(sqlite_dir, create=False), tmp_path) as ledger:
        _fill(ledger, 600)
        with pytest.raises(ProofError, match=f"level 1.*{FAR}.*checkpoint --full"):
            ledger.checkpoint()
        assert ledger.store.checkpoints()[-1][0] == 600  # nothing new was signed
        run = ledger.checkpoint_run(full=True)  # drops the nodes and stores them again
        assert run.checkpoint.size == 1200
        assert verify_bundle(ledger.prove(1100), SIGNER.verifier).size == 1200
    assert _level_1(sqlite_dir) == [0, 1, 2, 3]


def test_a_negative_node_index_is_not_blamed_on_the_log(sqlite_dir: Path, tmp_path: Path) -> None:
    """Before: a lone node at index -2**40 made the checkpoint raise a *gap in the log* at
    position -281474976710399. Now the incremental checkpoint names the node, verifies the
    whole log instead and stores the nodes again."""
    _sql(sqlite_dir, "DELETE FROM merkle_nodes")
    _sql(sqlite_dir, "INSERT INTO merkle_nodes VALUES (1, ?, ?)", -FAR, b"\x42" * 32)
    with _ledger(SQLiteStore(sqlite_dir, create=False), tmp_path) as ledger:
        _fill(ledger, 10)
        run = ledger.checkpoint_run()
        assert not run.incremental
        assert f"level 1 has the index {-FAR}" in str(run.full_reason)
    assert _level_1(sqlite_dir) == [0, 1]


def test_nodes_beyond_the_log_are_refused(sqlite_dir: Path) -> None:
    """Nodes 0..9 without a gap, for a log of 600 events that has only 2: the count is
    consistent with itself but not with the log (level L holds at most size >> 8L)."""
    for idx in range(2, 10):
        _sql(sqlite_dir, "INSERT INTO merkle_nodes VALUES (1, ?, ?)", idx, b"\x42" * 32)
    with SQLiteStore(sqlite_dir, create=False) as store:
        assert store.merkle_node_count(1) == 10
        with pytest.raises(ProofError, match=r"level 1 .*10 .*600 events.* 2"):
            store_nodes(store, 600)


def test_a_node_deleted_from_the_middle_is_reported_by_prove(
    sqlite_dir: Path, tmp_path: Path
) -> None:
    """Before: a proof that needed the deleted node computed it from 256 leaves, silently,
    every time: the gap was never reported."""
    with _ledger(SQLiteStore(sqlite_dir, create=False), tmp_path) as ledger:
        _fill(ledger, 200)
        ledger.checkpoint()
    assert _level_1(sqlite_dir) == [0, 1, 2]
    _sql(sqlite_dir, "DELETE FROM merkle_nodes WHERE level = 1 AND idx = 1")
    with _ledger(SQLiteStore(sqlite_dir, create=False), tmp_path) as ledger:
        with pytest.raises(ProofError, match="stored Merkle nodes"):
            ledger.prove(700)  # its proof holds node 0 (positions 1..256) and node 1
        run = ledger.checkpoint_run()  # says why it verified the whole log, and heals
        assert not run.incremental and "node 1 of level 1" in str(run.full_reason)
        assert verify_bundle(ledger.prove(700), SIGNER.verifier).size == 800


@pytest.fixture
def jsonl_dir(tmp_path: Path) -> Path:
    store_dir = tmp_path / "jsonl"
    with _ledger(JsonlStore(store_dir), tmp_path) as ledger:
        _fill(ledger, 600)
        ledger.checkpoint()
    assert (store_dir / NODES_FILE.format(level=1)).stat().st_size == 64
    return store_dir


def test_a_jsonl_nodes_file_that_is_not_whole_nodes_is_reported(jsonl_dir: Path) -> None:
    """Before: 69 bytes counted as 2 nodes, the 5 extra bytes rounded away unsaid."""
    nodes = jsonl_dir / NODES_FILE.format(level=1)
    with nodes.open("ab") as f:
        f.write(b"\x42" * 5)
    with (
        JsonlStore(jsonl_dir, create=False) as store,
        pytest.raises(ProofError, match=r"nodes-1\.bin.* 69 bytes"),
    ):
        store.merkle_node_count(1)


def test_a_jsonl_nodes_file_grown_far_beyond_the_log_is_reported(
    jsonl_dir: Path, tmp_path: Path
) -> None:
    """A sparse file of 2**40 nodes (32 TiB that take no disk) for a log of 600 events."""
    nodes = jsonl_dir / NODES_FILE.format(level=1)
    os.truncate(nodes, 32 * FAR_FILE)
    with (
        JsonlStore(jsonl_dir, create=False) as store,
        pytest.raises(ProofError, match=f"level 1 .*{FAR_FILE}.*600 events"),
    ):
        store_nodes(store, 600)
    with _ledger(JsonlStore(jsonl_dir, create=False), tmp_path) as ledger:
        _fill(ledger, 600)
        with pytest.raises(ProofError, match="level 1"):
            ledger.checkpoint()
        assert ledger.checkpoint_run(full=True).checkpoint.size == 1200
    assert nodes.stat().st_size == 4 * 32
