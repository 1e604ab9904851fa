"""Review of replay's span check and the stored Merkle node count (real SQLite files)."""

from __future__ import annotations

import json
import sqlite3
import warnings
from pathlib import Path

import pytest
from tests.unit.replay.replay_pipelines import make_runner
from tests.unit.test_replay_damaged_ledger import _interleaved, _replay, _sql, _verify_says
from typer.testing import CliRunner

import tracebound.replay.rebuild as rebuild
from tracebound.errors import DamageKind, LedgerDamaged
from tracebound.replay import replay_run
from tracebound.store.sqlite import SQLiteStore


def test_a_runs_first_events_deleted_up_to_another_runs_is_a_gap_where_verify_says(
    tmp_path: Path,
) -> None:
    """Run A's first part (1-6, from run_started to its gate) is deleted: A's first record
    left is at 13 (version 7), and the missing positions lie before the span replay
    derives from what is left. The gap is at 1, where `verify` names it, not at 13."""
    runs = _interleaved(tmp_path)
    _sql(tmp_path, ("DELETE FROM events WHERE position <= 6", ()))
    damage = _replay(tmp_path, runs["A"])
    said = _verify_says(tmp_path)
    assert (said.kind, said.position) == (DamageKind.GAP, 1)
    assert (damage.kind, damage.position) == (said.kind, said.position)


def test_a_run_whose_first_event_alone_is_deleted_far_from_its_second(tmp_path: Path) -> None:
    """Only run_started goes, with run B's events between it and the run's next record."""
    runs = _interleaved(tmp_path)
    _sql(
        tmp_path,
        ("DELETE FROM events WHERE position = 7", ()),  # B's run_started
        ("DELETE FROM events WHERE position = 8", ()),  # and B's next: B now starts at 9
    )
    damage = _replay(tmp_path, runs["B"])
    said = _verify_says(tmp_path)
    assert (damage.kind, damage.position) == (said.kind, said.position) == (DamageKind.GAP, 7)


@pytest.mark.parametrize("deleted", [1, 4, 5, 8, 9, 12, 17, 18, 21])
def test_span_pages_are_counted_across_page_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deleted: int, counting: str
) -> None:
    """Pages of 4 positions: a gap on either side of a page boundary is found and named."""
    runs = _interleaved(tmp_path)
    monkeypatch.setattr(rebuild, "_SPAN_PAGE", 4)
    _sql(tmp_path, ("DELETE FROM events WHERE position = ?", (deleted,)))
    damage = _replay(tmp_path, runs["A"])
    assert (damage.kind, damage.position) == (DamageKind.GAP, deleted)


def test_an_intact_log_replays_with_small_span_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counting: str
) -> None:
    """Counted, the whole log is found contiguous; paged, from each run's span to the end."""
    runs = _interleaved(tmp_path)
    monkeypatch.setattr(rebuild, "_SPAN_PAGE", 4)
    runner = make_runner(tmp_path)
    try:
        reports = {name: replay_run(runner.ledger, runner.blobs, r) for name, r in runs.items()}
    finally:
        runner.ledger.close()
    starts = {"A": 1, "B": 6, "C": 17} if counting == "paged" else dict.fromkeys("ABC", 1)
    assert {n: r.positions for n, r in reports.items()} == {n: (starts[n], 23) for n in starts}


def test_the_only_run_with_its_last_event_deleted_is_truncation_not_a_clean_replay(
    tmp_path: Path,
) -> None:
    runs = _interleaved(tmp_path)
    with sqlite3.connect(tmp_path / "store" / "ledger.db") as conn:
        conn.execute("DELETE FROM events WHERE position = 23")
    damage = _replay(tmp_path, runs["C"])
    assert (damage.kind, damage.position) == (DamageKind.TRUNCATION, 23)


@pytest.fixture(params=["counted", "paged"])
def counting(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How replay finds a missing position: the store counts its positions in SQL
    (``log_extent``), or, for a store that cannot, replay pages through the hashes from the
    run's span to the log's end (JSONL, any other backend)."""
    if request.param == "paged":
        monkeypatch.delattr(SQLiteStore, "log_extent")
    return str(request.param)


def _drop_checkpoint_and_witness(tmp_path: Path) -> None:
    """Nothing signed is left to say how long the log was."""
    _sql(tmp_path, ("DELETE FROM checkpoints", ()))
    (tmp_path / "witness" / "kit.note").unlink()


def test_a_runs_deleted_resume_away_from_its_first_part_is_found(
    tmp_path: Path, counting: str
) -> None:
    """Run A's approval and resume (13-17) go: what is left of A (1-6) chains from genesis
    and its span (1-7) is whole, so A would read as waiting at its gate. The positions
    after it are counted too: a GAP at 13, where `verify` names it."""
    runs = _interleaved(tmp_path)
    _sql(tmp_path, ("DELETE FROM events WHERE position BETWEEN 13 AND 17", ()))
    damage = _replay(tmp_path, runs["A"])
    said = _verify_says(tmp_path)
    assert (damage.kind, damage.position) == (said.kind, said.position) == (DamageKind.GAP, 13)
    assert "position 13 is missing" in damage.detail


def test_a_runs_deleted_tail_is_found_without_a_checkpoint_or_witness(
    tmp_path: Path, counting: str
) -> None:
    """The count needs nothing signed: a deleted tail with other runs after it shows as a
    gap even when the checkpoints and the witness are gone too."""
    runs = _interleaved(tmp_path)
    _sql(tmp_path, ("DELETE FROM events WHERE position BETWEEN 13 AND 17", ()))
    _drop_checkpoint_and_witness(tmp_path)
    damage = _replay(tmp_path, runs["A"])
    assert (damage.kind, damage.position) == (DamageKind.GAP, 13)


def test_a_gap_after_the_run_in_another_runs_events_is_found(tmp_path: Path, counting: str) -> None:
    """Run B ends at 12; one of run C's events (20) is deleted, far after B's span."""
    runs = _interleaved(tmp_path)
    _sql(tmp_path, ("DELETE FROM events WHERE position = 20", ()))
    damage = _replay(tmp_path, runs["B"])
    said = _verify_says(tmp_path)
    assert (damage.kind, damage.position) == (said.kind, said.position) == (DamageKind.GAP, 20)
    assert "after the run's span 6..13" in damage.detail


@pytest.mark.parametrize("replayed", ["A", "C"])
def test_the_last_events_of_the_log_deleted_are_truncation_against_the_checkpoint(
    tmp_path: Path, counting: str, replayed: str
) -> None:
    """Run C's last four events (20-23) are the log's last: no gap is left behind them, and
    only the signed checkpoint (of 23 events) says the log was longer. Run A, whose
    records are all there, is refused too: the log it is replayed from is damaged."""
    runs = _interleaved(tmp_path)
    _sql(tmp_path, ("DELETE FROM events WHERE position >= 20", ()))
    damage = _replay(tmp_path, runs[replayed])
    said = _verify_says(tmp_path)
    assert (damage.kind, damage.position) == (said.kind, said.position)
    assert (damage.kind, damage.position) == (DamageKind.TRUNCATION, 20)


def test_the_last_events_of_the_log_deleted_without_a_checkpoint_cannot_be_told(
    tmp_path: Path, counting: str
) -> None:
    """The limit, stated: with no checkpoint and no witness, a log cut at its end is a
    whole log that is shorter; run C reads as one still running. The report says that no
    signed length covers it (``covered`` 0), which the CLI prints."""
    from tracebound.cli.app import app

    runs = _interleaved(tmp_path)
    _sql(tmp_path, ("DELETE FROM events WHERE position >= 20", ()))
    _drop_checkpoint_and_witness(tmp_path)
    runner = make_runner(tmp_path)
    try:
        report = replay_run(runner.ledger, runner.blobs, runs["C"])
    finally:
        runner.ledger.close()
    assert (report.status, report.events, report.covered) == ("running", 2, 0)
    assert report.as_dict()["log"] == {"size": 19, "covered": 0}
    store, blobs = str(tmp_path / "store"), str(tmp_path / "blobs")
    env = {"HOME": str(tmp_path / "home")}
    args = ["replay", runs["C"], "--store", store, "--blobs", blobs]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    assert "no signed checkpoint covers positions 1..19" in " ".join(result.output.split())


def test_a_clean_ledger_replays_every_run_with_exit_0_and_no_warnings(
    tmp_path: Path, counting: str
) -> None:
    from tracebound.cli.app import app

    runs = _interleaved(tmp_path)
    store, blobs = str(tmp_path / "store"), str(tmp_path / "blobs")
    env = {"HOME": str(tmp_path / "home")}
    for name, run_id in runs.items():
        args = ["replay", run_id, "--store", store, "--blobs", blobs]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plain = CliRunner().invoke(app, args, env=env)
            as_json = CliRunner().invoke(app, [*args, "--json"], env=env)
        assert caught == [], name
        assert plain.exit_code == as_json.exit_code == 0, (name, plain.output)
        text = " ".join(plain.output.split())
        assert "chain ok" in text and "no signed checkpoint" not in text, name
        out = json.loads(as_json.stdout)
        assert out["ok"] is True and out["failures"] == [], name
        assert out["log"] == {"size": 23, "covered": 23}, name


def test_a_clean_replay_counts_the_log_and_reads_no_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cost: on an intact log the store's count is the whole check (one statement);
    no chain hash is read, however far the log goes on after the run."""
    runs = _interleaved(tmp_path)
    read: list[tuple[int, int]] = []
    real = SQLiteStore.read_hashes

    def spy(self: SQLiteStore, start: int, stop: int) -> list[bytes]:
        read.append((start, stop))
        return real(self, start, stop)

    monkeypatch.setattr(SQLiteStore, "read_hashes", spy)
    runner = make_runner(tmp_path)
    try:
        for run_id in runs.values():
            replay_run(runner.ledger, runner.blobs, run_id)
    finally:
        runner.ledger.close()
    assert read == []


def test_an_incremental_checkpoint_after_checkpoint_full_repaired_the_nodes(
    tmp_path: Path,
) -> None:
    """A node forged far beyond the log stops the incremental checkpoint; `--full`
    repairs the nodes, and the next checkpoint is incremental again."""
    from tests.unit.store.test_stored_nodes import _fill, _ledger

    from tracebound.errors import ProofError
    from tracebound.store.sqlite import SQLiteStore

    store_dir = tmp_path / "store"
    with _ledger(SQLiteStore(store_dir), tmp_path) as ledger:
        _fill(ledger, 600)
        ledger.checkpoint()
    with sqlite3.connect(store_dir / "ledger.db") as conn:
        conn.execute("INSERT INTO merkle_nodes VALUES (1, ?, ?)", (2**40, b"\x42" * 32))
    with _ledger(SQLiteStore(store_dir, create=False), tmp_path) as ledger:
        _fill(ledger, 300)
        with pytest.raises(ProofError):
            ledger.checkpoint()
        assert ledger.checkpoint_run(full=True).checkpoint.size == 900
        _fill(ledger, 300)
        run = ledger.checkpoint_run()
        assert run.incremental and run.checkpoint.size == 1200
        assert ledger.verify(workers=1).damage is None
    with sqlite3.connect(store_dir / "ledger.db") as conn:
        rows = conn.execute("SELECT idx FROM merkle_nodes WHERE level = 1 ORDER BY idx")
        assert [i for (i,) in rows] == [0, 1, 2, 3]


@pytest.mark.postgres
def test_postgres_counts_its_positions_and_replay_finds_a_deleted_tail(
    postgres_dsn: str,
) -> None:
    """The same count on PostgreSQL: run a's tail (7-8) is deleted, with run c after it."""
    import psycopg
    from tests.conformance.suite import note

    from tracebound.replay import read_run_records
    from tracebound.store.postgres import PostgresStore

    with PostgresStore(postgres_dsn, schema="replay") as store:
        assert store.log_extent() == (0, 0, 0)
        store.append("run/a", [note(1), note(2), note(3)])
        store.append("run/b", [note(4), note(5), note(6)])
        store.append("run/a", [note(7), note(8)])
        store.append("run/c", [note(9), note(10)])
        assert store.log_extent() == (10, 1, 10)
        assert [r.position for r, _ in read_run_records(store, "a")] == [1, 2, 3, 7, 8]
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM replay.events WHERE position IN (7, 8)")
        assert store.log_extent() == (8, 1, 10)
        with pytest.raises(LedgerDamaged) as info:
            read_run_records(store, "a")
    assert (info.value.kind, info.value.position) == (DamageKind.GAP, 7)
    assert "after the run's span 1..4" in info.value.detail


def test_jsonl_finds_a_runs_deleted_tail_without_a_count(tmp_path: Path) -> None:
    """JSONL has no count (a position is its line number, so none can be missing): lines
    cut out of the file leave batches whose frames no longer end where they say, which the
    store reports on every read (a torn tail at the first line that does not fit); replay
    also pages through the hashes from the run's span to the end of the log."""
    from tests.conformance.suite import note

    from tracebound.replay import read_run_records
    from tracebound.store.jsonl import JsonlStore

    with JsonlStore(tmp_path / "j") as store:
        assert not hasattr(store, "log_extent")
        store.append("run/a", [note(1), note(2), note(3)])
        store.append("run/b", [note(4), note(5), note(6)])
        store.append("run/a", [note(7), note(8)])
        store.append("run/c", [note(9), note(10)])
    log = tmp_path / "j" / "log.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:6] + lines[8:]))
    with JsonlStore(tmp_path / "j", create=False) as store, pytest.raises(LedgerDamaged) as info:
        read_run_records(store, "a")
    assert (info.value.kind, info.value.position) == (DamageKind.TORN_TAIL, 7)
