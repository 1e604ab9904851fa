"""replay_run rebuilds a run from the ledger and its blobs, and trusts neither."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from tests.unit.replay.replay_pipelines import deterministic, make_runner, repaired

from tracebound.canonical import canonical_bytes
from tracebound.errors import ConfigError, DamageKind, LedgerDamaged
from tracebound.events.catalog import CostEstimate, RunStarted, StepRecorded
from tracebound.ids import RunId, Sha256Digest, StepId
from tracebound.pipeline.runner import run_stream
from tracebound.replay import replay_run


def test_a_repaired_run_is_rebuilt_step_by_step(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    result = runner.run(repaired, {"ticket": "T-1"})
    report = replay_run(runner.ledger, runner.blobs, result.run_id)

    assert report.ok and report.failures == []
    assert (report.pipeline, report.status, report.pipeline_ref) == (
        "repaired",
        "completed",
        repaired.ref,
    )
    assert [(s.step_id, s.status, s.blob) for s in report.steps] == [
        ("plan", "success", "ok"),
        ("execute", "error", "ok"),
        ("execute~r1", "success", "ok"),
        ("review", "success", "ok"),
    ]
    assert report.lineage == {
        "plan": None,
        "execute": "plan",
        "execute~r1": "plan",
        "review": "execute~r1",
    }
    assert report.blame == [("execute", "execute")]
    assert report.inputs == {"ticket": "T-1"}
    by_id = {s.step_id: s for s in report.steps}
    assert by_id["execute"].error == "RuntimeError: injected executor error"
    review = by_id["review"].artifact
    assert review is not None and review.outputs.summary == "reviewed execute"
    # The report's digests are the ones the runner produced.
    assert [s.artifact_hash for s in report.steps] == [o.artifact_hash for o in result.steps]
    assert report.as_dict()["steps"][0]["summary"] == "plan for "


def _blob_file(tmp_path: Path, digest: str) -> Path:
    hexed = digest.removeprefix("sha256:")
    return tmp_path / "blobs" / "sha256" / hexed[:2] / hexed[2:]


def test_altered_and_missing_blobs_are_reported_with_step_and_kind(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    result = runner.run(deterministic, {"ticket": "T-2"})
    plan, execute, _ = result.steps
    assert plan.artifact_hash and execute.artifact_hash
    altered = _blob_file(tmp_path, plan.artifact_hash)
    altered.write_bytes(altered.read_bytes().replace(b"plan for", b"PLAN FOR"))
    _blob_file(tmp_path, execute.artifact_hash).unlink()

    report = replay_run(runner.ledger, runner.blobs, result.run_id)
    assert not report.ok
    assert [(f.step_id, f.what, f.kind) for f in report.failures] == [
        ("plan", "artifact", "mismatch"),
        ("execute", "artifact", "missing"),
    ]
    assert [s.blob for s in report.steps] == ["mismatch", "missing", "ok"]


def test_a_blob_that_no_longer_meets_the_contract_is_reported(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    ledger, blobs = runner.ledger, runner.blobs
    inputs = blobs.put(canonical_bytes({}))
    bogus = blobs.put(canonical_bytes({"role": "Planner", "goal": "no envelope"}))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ledger.record(
        run_stream("hand-made"),
        [
            RunStarted(run_id=RunId("hand-made"), pipeline="p", pipeline_type="t",
                       critical=False, inputs_digest=inputs.digest, inputs_pointer=inputs.pointer),
            StepRecorded(run_id=RunId("hand-made"), step_id=StepId("plan"), parent_step_id=None,
                         role="Planner", timestamp_start=now, timestamp_end=now, duration_ms=0,
                         artifact_hash=Sha256Digest(bogus.digest), status="success",
                         cost_est=CostEstimate(prompt_tokens=0, compute_usd_est=Decimal(0)),
                         latency_ms=0, storage="db"),
        ],
        workflow_id="hand-made",
    )  # fmt: skip
    report = replay_run(ledger, blobs, "hand-made")
    (failure,) = report.failures
    assert (failure.step_id, failure.kind) == ("plan", "contract")
    assert "handoff_envelope" in failure.detail or "required" in failure.detail
    assert report.status == "running"  # no run_finished was ever recorded


def test_a_damaged_run_stream_raises(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    result = runner.run(deterministic, {"ticket": "T-3"})
    runner.ledger.close()
    db = tmp_path / "store" / "ledger.db"
    with sqlite3.connect(db) as conn:
        (position, body) = conn.execute(
            "SELECT position, CAST(body AS BLOB) FROM events WHERE event_type = 'step_recorded' "
            "ORDER BY position LIMIT 1"
        ).fetchone()
        conn.execute(
            "UPDATE events SET body = ? WHERE position = ?",
            (bytes(body).replace(b'"success"', b'"skipped"'), position),
        )
    runner = make_runner(tmp_path)
    with pytest.raises(LedgerDamaged) as info:
        replay_run(runner.ledger, runner.blobs, result.run_id)
    assert info.value.kind is DamageKind.TAMPER and info.value.position == position


def test_an_unknown_run_is_a_config_error(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    with pytest.raises(ConfigError, match="no run"):
        replay_run(runner.ledger, runner.blobs, "nope")
