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


# -- a gap in the middle of the log ----------------------------------------------------------
#
# Three runs, the first gated and resumed after the second, so the log reads
#   1-6 run A (to its gate) | 7-12 run B | 13-17 run A (approved, resumed) | 18-23 run C
# and run A's records are not consecutive positions. Each test deletes rows from the
# SQLite file and expects replay to name the same kind and position as `verify` does.


def _interleaved(tmp_path: Path) -> dict[str, str]:
    from tests.unit.replay.replay_pipelines import gated

    from tracebound.ids import RunId, StepId
    from tracebound.pipeline.runner import approve

    runner = make_runner(tmp_path)
    a = runner.run(gated, {"ticket": "A"}).run_id
    b = runner.run(deterministic, {"ticket": "B"}).run_id
    approve(runner.ledger, RunId(a), StepId("execute"), "alice", codeowners=runner.codeowners)
    runner.resume(gated, a)
    c = runner.run(deterministic, {"ticket": "C"}).run_id
    runner.ledger.checkpoint()
    runner.ledger.close()
    with sqlite3.connect(tmp_path / "store" / "ledger.db") as conn:
        layout = conn.execute("SELECT stream_id FROM events ORDER BY position").fetchall()
    streams = [f"run/{r}" for r in (a, b, c)]
    assert [streams.index(s) for (s,) in layout] == [0] * 6 + [1] * 6 + [0] * 5 + [2] * 6
    return {"A": a, "B": b, "C": c}


def _verify_says(tmp_path: Path) -> LedgerDamaged:
    runner = make_runner(tmp_path)
    try:
        report = runner.ledger.verify(workers=1)
    finally:
        runner.ledger.close()
    assert report.damage is not None
    return report.damage


@pytest.mark.parametrize(
    ("deleted", "replayed", "why"),
    [
        (3, "A", "a middle event of the run's own stream"),
        (9, "A", "another run's event between the run's own"),
        (13, "A", "the run's own event right after another run's"),
        (7, "B", "the run's first event (run_started), in the middle of the log"),
        (17, "A", "the run's last event, with other events after it"),
        (12, "B", "the run's last event, right before another run's"),
    ],
)
def test_a_deleted_event_in_the_middle_of_the_log_is_a_gap_where_verify_says(
    tmp_path: Path, deleted: int, replayed: str, why: str
) -> None:
    runs = _interleaved(tmp_path)
    _sql(tmp_path, ("DELETE FROM events WHERE position = ?", (deleted,)))
    damage = _replay(tmp_path, runs[replayed])
    assert (damage.kind, damage.position) == (DamageKind.GAP, deleted), why
    said = _verify_says(tmp_path)
    assert (damage.kind, damage.position) == (said.kind, said.position)
    assert f"position {deleted} is missing" in damage.detail


def test_of_two_gaps_the_first_in_the_log_is_named(tmp_path: Path) -> None:
    runs = _interleaved(tmp_path)
    _sql(tmp_path, ("DELETE FROM events WHERE position IN (9, 15)", ()))
    damage = _replay(tmp_path, runs["A"])
    assert (damage.kind, damage.position) == (DamageKind.GAP, 9)


def test_renumbered_events_after_a_deleted_one_are_reorder_where_verify_says(
    tmp_path: Path,
) -> None:
    runs = _interleaved(tmp_path)
    _sql(
        tmp_path,
        ("DELETE FROM checkpoints", ()),  # so that the length is not what gives it away
        ("DELETE FROM events WHERE position = 3", ()),
        ("UPDATE events SET position = position - 1 WHERE position > 3", ()),
    )
    (tmp_path / "witness" / "kit.note").unlink()
    damage = _replay(tmp_path, runs["A"])
    said = _verify_says(tmp_path)
    assert (said.kind, said.position) == (DamageKind.REORDER, 3)
    assert (damage.kind, damage.position) == (said.kind, said.position)


def test_damage_inside_the_log_is_named_before_its_length(tmp_path: Path) -> None:
    """`verify` reports the first bad position; a log that is also short comes after it."""
    runs = _interleaved(tmp_path)
    _sql(tmp_path, ("DELETE FROM events WHERE position IN (9, 22, 23)", ()))
    damage = _replay(tmp_path, runs["A"])
    said = _verify_says(tmp_path)
    assert (said.kind, said.position) == (DamageKind.GAP, 9)
    assert (damage.kind, damage.position) == (said.kind, said.position)


def test_a_gap_before_the_runs_span_is_found_by_the_stores_count(tmp_path: Path) -> None:
    """The store counts the log's positions (SQLite: one statement): a gap anywhere is
    found, here before run C's span, and named where `verify` names it, saying that it
    lies outside the run (docs/pipeline.md)."""
    runs = _interleaved(tmp_path)
    _sql(tmp_path, ("DELETE FROM events WHERE position = 3", ()))
    damage = _replay(tmp_path, runs["C"])
    said = _verify_says(tmp_path)
    assert (damage.kind, damage.position) == (said.kind, said.position) == (DamageKind.GAP, 3)
    assert "before the run's span 17..23" in damage.detail
    assert "tracebound verify" in damage.detail


def test_a_gap_before_the_runs_span_is_left_to_verify_by_a_store_that_cannot_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the store's count (JSONL), the hashes are read from the run's span to the
    end of the log; what lies before the span is `tracebound verify`'s, and the report
    says which positions were found contiguous."""
    from tracebound.store.sqlite import SQLiteStore

    runs = _interleaved(tmp_path)
    _sql(tmp_path, ("DELETE FROM events WHERE position = 3", ()))
    monkeypatch.delattr(SQLiteStore, "log_extent")
    runner = make_runner(tmp_path)
    try:
        report = replay_run(runner.ledger, runner.blobs, runs["C"])
    finally:
        runner.ledger.close()
    assert report.positions == (17, 23)
    assert report.as_dict()["positions"] == {"from": 17, "to": 23}


def test_the_cli_names_a_gap_in_the_middle_of_the_log(tmp_path: Path) -> None:
    from tracebound.cli.app import app

    runs = _interleaved(tmp_path)
    _sql(tmp_path, ("DELETE FROM events WHERE position = 9", ()))
    store, blobs = str(tmp_path / "store"), str(tmp_path / "blobs")
    args = ["replay", runs["A"], "--store", store, "--blobs", blobs]
    env = {"HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(app, [*args, "--json"], env=env)
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "LedgerDamaged"
    assert error["message"].startswith("gap at position 9: position 9 is missing")
    plain = CliRunner().invoke(app, args, env=env)
    assert plain.exit_code == 1 and "Traceback" not in plain.output
    assert "chain ok" not in plain.output and "gap at position 9" in plain.output


def test_the_cli_says_which_positions_replay_checked(tmp_path: Path) -> None:
    from tracebound.cli.app import app

    runs = _interleaved(tmp_path)
    store, blobs = str(tmp_path / "store"), str(tmp_path / "blobs")
    args = ["replay", runs["A"], "--store", store, "--blobs", blobs]
    env = {"HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(app, [*args, "--json"], env=env)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["ok"] is True and out["chain"] == "ok"
    # Run A is at 1..17, but the store counted all of the log's positions.
    assert out["positions"] == {"from": 1, "to": 23}
    assert out["log"] == {"size": 23, "covered": 23}
