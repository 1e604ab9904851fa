"""At-rest attacks on a SQLite store's file: the tamper suite with SQL as the attacker's tool.

The attacker holds the store directory (they can run any SQL on the file, copy it back,
rewrite every hash) but not the signing key or the witness file, which live elsewhere.
The attacks themselves are in ``tests/conformance/tamper_suite.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.tamper_suite import DirectorySnapshots, SqlAttacker, TamperSuite
from tests.integration.conftest import World


class SQLiteAttacker(DirectorySnapshots, SqlAttacker):
    """SQL straight on ``ledger.db``, and copies of the store directory."""

    param = "?"

    def __init__(self, store_dir: Path) -> None:
        self.store_dir = store_dir
        self.db = store_dir / "ledger.db"

    def sql(self, *statements: str, params: Sequence[Any] = ()) -> int:
        conn = sqlite3.connect(self.db)
        try:
            with conn:
                changed = 0
                for s in statements:
                    changed = conn.execute(s, params).rowcount
        finally:
            conn.close()
        return changed

    def sql_many(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        conn = sqlite3.connect(self.db)
        try:
            with conn:
                conn.executemany(statement, rows)
        finally:
            conn.close()

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.db)
        try:
            return conn.execute(query).fetchall()
        finally:
            conn.close()

    def edit_body(self, position: int, old: str, new: str) -> None:
        # SQL replace() stores TEXT where the store wrote a BLOB: verify must judge the bytes.
        query = "UPDATE events SET body = replace(body, ?, ?) WHERE position = ? AND instr(body, ?)"
        assert self.sql(query, params=(old, new, position, old)) == 1

    def renumber_after(self, position: int) -> None:
        self.sql(f"UPDATE events SET position = position - 1 WHERE position > {position}")


class TestSQLiteTamper(TamperSuite):
    @pytest.fixture
    def world(self, world: World) -> World:
        """The signed SQLite ledger of ``tests/integration/conftest.py``."""
        return world

    @pytest.fixture
    def attacker(self, world: World) -> SQLiteAttacker:
        return SQLiteAttacker(world.store_dir)


def test_cli_names_rollback_and_fork_after_a_rollback_grown_back(world: World) -> None:
    """`tracebound verify --json` and `checkpoint` on a store put back to an older copy
    and then appended to: `rollback` while it is shorter than the witness's checkpoint,
    `fork` once it is as long or longer (the witnessed tree is no prefix of it)."""
    import json
    import shutil

    from typer.testing import CliRunner

    from tests.integration.conftest import cost
    from tracebound.cli.app import app

    with world.open() as ledger:
        for i in range(10):
            ledger.record("run", [cost(i)])
        ledger.checkpoint()
    snapshot = world.store_dir.with_name("snapshot")
    shutil.copytree(world.store_dir, snapshot)
    with world.open() as ledger:
        for i in range(10, 20):
            ledger.record("run", [cost(i)])
        ledger.checkpoint()
    shutil.rmtree(world.store_dir)
    shutil.copytree(snapshot, world.store_dir)
    store = f"sqlite:///{world.db}"
    verifier = str(world.signer.verifier)
    where = ("--store", store, "--verifier-key", verifier, "--witness", str(world.witness_path))
    for size, kind, position in ((15, "rollback", 16), (20, "fork", 11), (25, "fork", 11)):
        with world.open() as ledger:
            while ledger.store.size() < size:
                ledger.record("run", [cost(500 + ledger.store.size())])
        result = CliRunner().invoke(app, ["verify", *where, "--json"])
        assert result.exit_code == 1, result.output
        damage = json.loads(result.stdout)["damage"]
        assert (damage["kind"], damage["position"]) == (kind, position), damage
        human = CliRunner().invoke(app, ["verify", *where])
        assert result.exit_code == 1
        assert f"DAMAGED: {kind} at position {position}" in " ".join(human.stdout.split())
