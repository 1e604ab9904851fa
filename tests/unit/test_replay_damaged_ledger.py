"""Replay on a damaged ledger: a truncated or rolled-back store, and record bytes that no
longer decode, are ledger damage (LedgerDamaged, exit 1) with the position, never a clean
replay of what is left nor a usage error."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.unit.replay.replay_pipelines import deterministic, make_runner
from typer.testing import CliRunner

from tracebound.errors import DamageKind, LedgerDamaged
from tracebound.replay import replay_run


def _recorded(tmp_path: Path) -> str:
    runner = make_runner(tmp_path)
    run_id = runner.run(deterministic, {"ticket": "T-9"}).run_id
    runner.ledger.checkpoint()  # signed, and handed to the witness
    runner.ledger.close()
    return run_id


def _sql(tmp_path: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    with sqlite3.connect(tmp_path / "store" / "ledger.db") as conn:
        for sql, args in statements:
            conn.execute(sql, args)


def _last_positions(tmp_path: Path, n: int) -> list[int]:
    with sqlite3.connect(tmp_path / "store" / "ledger.db") as conn:
        rows = conn.execute("SELECT position FROM events ORDER BY position DESC LIMIT ?", (n,))
        return sorted(p for (p,) in rows)


def _replay(tmp_path: Path, run_id: str) -> LedgerDamaged:
    runner = make_runner(tmp_path)
    try:
        with pytest.raises(LedgerDamaged) as info:
            replay_run(runner.ledger, runner.blobs, run_id)
        return info.value
    finally:
        runner.ledger.close()


def test_a_run_cut_short_after_its_checkpoint_is_truncation(tmp_path: Path) -> None:
    run_id = _recorded(tmp_path)
    cut = _last_positions(tmp_path, 2)
    _sql(tmp_path, ("DELETE FROM events WHERE position >= ?", (cut[0],)))
    damage = _replay(tmp_path, run_id)
    assert (damage.kind, damage.position) == (DamageKind.TRUNCATION, cut[0])


def test_a_store_rolled_back_behind_its_witness_is_rollback(tmp_path: Path) -> None:
    run_id = _recorded(tmp_path)
    cut = _last_positions(tmp_path, 2)
    _sql(
        tmp_path,
        ("DELETE FROM events WHERE position >= ?", (cut[0],)),
        ("DELETE FROM checkpoints", ()),  # the store's own record of the size goes too
    )
    damage = _replay(tmp_path, run_id)
    assert (damage.kind, damage.position) == (DamageKind.ROLLBACK, cut[0])


@pytest.mark.parametrize(
    "edit",
    [
        lambda body: body.replace(b'"success"', b'"succeeded"'),  # still JSON, not an event
        lambda body: b"\xff\xfe not even text",
    ],
)
def test_a_record_that_no_longer_decodes_is_damage_at_its_position(
    tmp_path: Path, edit: Callable[[bytes], bytes]
) -> None:
    run_id = _recorded(tmp_path)
    with sqlite3.connect(tmp_path / "store" / "ledger.db") as conn:
        position, body = conn.execute(
            "SELECT position, CAST(body AS BLOB) FROM events WHERE event_type = 'step_recorded' "
            "ORDER BY position LIMIT 1"
        ).fetchone()
    _sql(tmp_path, ("UPDATE events SET body = ? WHERE position = ?", (edit(bytes(body)), position)))
    damage = _replay(tmp_path, run_id)
    assert (damage.kind, damage.position) == (DamageKind.TAMPER, position)


def test_the_cli_exits_1_with_a_json_error_for_a_truncated_ledger(tmp_path: Path) -> None:
    from tracebound.cli.app import app

    run_id = _recorded(tmp_path)
    cut = _last_positions(tmp_path, 2)
    _sql(tmp_path, ("DELETE FROM events WHERE position >= ?", (cut[0],)))
    store, blobs = str(tmp_path / "store"), str(tmp_path / "blobs")
    args = ["replay", run_id, "--store", store, "--blobs", blobs]
    env = {"HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(app, [*args, "--json"], env=env)
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "LedgerDamaged" and "truncation" in error["message"]
    plain = CliRunner().invoke(app, args, env=env)
    assert plain.exit_code == 1 and "Traceback" not in plain.output
    assert "chain ok" not in plain.output
