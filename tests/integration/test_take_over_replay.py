"""Replay and rerun of a taken-over run: both sets of steps shown, only what counts compared.

After ``resume --take-over`` the run stream holds the dead claimant's steps (between its
claim and the take-over) and the take-over's, under the same step ids
(``test_take_over_accounting``). Replay shows what happened: every record, each checked,
the abandoned ones marked with the take-over that abandoned them. A rerun answers "would
the pipeline do what the run did?": it is compared with the steps that count (those before
the first claim, then the take-over's), so a taken-over run that re-runs identically is
identical, and a real divergence is still found.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from tests.integration.pipeline_kit import Kit
from tests.integration.test_gate_owners_and_resume_claim import decided_run, runner_on
from tests.integration.test_take_over_accounting import (
    BEFORE_THE_CLAIM,
    THE_DEAD_CLAIMANTS,
    THE_TAKE_OVERS,
    Script,
    cli,
    stream_of,
    taken_over,
)
from tracebound.cli.app import app
from tracebound.events.catalog import BlameAssigned, RunResumed
from tracebound.events.takeover import abandoned_events
from tracebound.ledger import ORIGIN_KEY
from tracebound.pipeline.runtime import Pipeline
from tracebound.replay import RerunReport, replay_run, rerun_run


def rerun(kit: Kit, run_id: str, pipe: Pipeline) -> RerunReport:
    runner = runner_on(kit, 99)
    with runner.ledger:
        return rerun_run(
            runner.ledger,
            runner.blobs,
            run_id,
            pipeline=pipe,
            policy=runner.policy,
            redactor=runner.redactor,
            codeowners=runner.codeowners,
            workspace=kit.root,
        )


def ids(keys: list[Any]) -> list[tuple[str, str]]:
    return [(k.step_id, k.status) for k in keys]


def claims_of(kit: Kit, run_id: str) -> list[Any]:
    return [e for e in stream_of(kit, run_id) if isinstance(e.payload, RunResumed)]


# -- rerun: compared with the steps that count ---------------------------------------------


def test_a_taken_over_run_that_reruns_identically_reports_no_divergence(tmp_path: Path) -> None:
    kit = Kit(tmp_path)
    script = Script()
    pipe = script.pipeline()
    run_id, _ = taken_over(kit, script, pipe)
    # The script's flaw and death happened once: the rerun, like the take-over, is clean.
    report = rerun(kit, run_id, pipe)
    assert report.divergence is None, report.divergence
    assert ids(report.rerun) == BEFORE_THE_CLAIM + THE_TAKE_OVERS
    assert report.recorded == report.rerun  # the dead claimant's 5 steps are not compared
    assert report.abandoned == len(THE_DEAD_CLAIMANTS)
    assert report.as_dict()["abandoned"] == len(THE_DEAD_CLAIMANTS)
    assert report.recorded_status == report.rerun_status == "completed"


def test_two_take_overs_compare_the_last_one_only(tmp_path: Path) -> None:
    """The first take-over died too: what it recorded is abandoned by the second, as the
    dead claimant's is by the first; the rerun is compared with the second's alone."""
    kit = Kit(tmp_path)
    script = Script(deaths=2)
    pipe = script.pipeline()
    run_id, _ = taken_over(kit, script, pipe)
    report = rerun(kit, run_id, pipe)
    assert report.divergence is None, report.divergence
    assert ids(report.recorded) == ids(report.rerun) == BEFORE_THE_CLAIM + THE_TAKE_OVERS
    assert report.abandoned == 5 + 3


def test_a_real_divergence_of_a_taken_over_run_is_still_found(tmp_path: Path) -> None:
    """A fresh script flags the first draft again: the rerun repairs it, as the dead
    claimant did, but the run (the take-over) did not. The divergence is named against the
    take-over's steps, at the index in the compared sequence."""
    kit = Kit(tmp_path)
    script = Script()
    run_id, _ = taken_over(kit, script, script.pipeline())
    report = rerun(kit, run_id, Script(deaths=0).pipeline())
    divergence = report.divergence
    assert divergence is not None
    assert (divergence.index, divergence.field) == (len(BEFORE_THE_CLAIM) + 3, "step_id")
    assert (divergence.recorded, divergence.rerun) == ("publish", "draft~r1")


def test_a_resumed_run_without_a_take_over_compares_every_step(tmp_path: Path) -> None:
    kit = Kit(tmp_path)
    script = Script(deaths=0)
    pipe = script.pipeline()
    with kit.ledger() as ledger:
        ledger.store.set_meta(ORIGIN_KEY, ledger.origin)
    run_id = decided_run(kit, pipe, "approved")
    runner = runner_on(kit, 5)
    with runner.ledger:
        result = runner.resume(pipe, run_id)
    assert result.status == "completed"
    script.calls.clear()  # the rerun meets the same flaw in the first draft
    report = rerun(kit, run_id, pipe)
    assert report.divergence is None, report.divergence
    assert report.abandoned == 0
    assert ids(report.recorded) == [(s.step_id, s.status) for s in result.steps]
    assert [k.step_id for k in report.recorded][-3:] == ["draft~r1", "review~r1", "publish"]


# -- replay: every record, checked and marked ----------------------------------------------


def test_replay_marks_what_the_take_over_abandoned(tmp_path: Path) -> None:
    kit = Kit(tmp_path)
    script = Script()
    run_id, _ = taken_over(kit, script, script.pipeline())
    claims = claims_of(kit, run_id)
    take_over = {"position": claims[1].position, "taken_over_by": "@oncall"}
    events = stream_of(kit, run_id)
    gone = abandoned_events(events)
    out = cli(kit, "replay", run_id, "--blobs", str(kit.root / "blobs"))

    # Every step is listed, in stream order; the dead claimant's name the take-over.
    steps = out["steps"]
    assert [(s["step_id"], s["status"]) for s in steps] == (
        BEFORE_THE_CLAIM + THE_DEAD_CLAIMANTS + THE_TAKE_OVERS
    )
    marks = [s["abandoned_by"] for s in steps]
    assert marks == (
        [None] * len(BEFORE_THE_CLAIM)
        + [take_over] * len(THE_DEAD_CLAIMANTS)
        + [None] * len(THE_TAKE_OVERS)
    )
    assert all((s["position"] in gone) == (s["abandoned_by"] is not None) for s in steps)
    # Every blame too: here the dead claimant's only (it met the flaw; the take-over did not).
    blames = [e for e in events if isinstance(e.payload, BlameAssigned)]
    assert blames
    assert [(b["position"], b["failed"], b["abandoned_by"]) for b in out["blame"]] == [
        (b.position, b.payload.failed_step_id, take_over) for b in blames
    ]
    # What the run did: the lineage of the steps that count, no repair the take-over never
    # made; and the take-overs, as `tracebound runs` lists them.
    assert set(out["lineage"]) == {"plan", "execute", "draft", "review", "publish"}
    (listed,) = out["take_overs"]
    assert listed == cli(kit, "runs")["runs"][0]["take_overs"][0]
    assert (listed["position"], listed["abandoned_steps"]) == (claims[1].position, 5)
    assert out["status"] == "completed" and out["ok"] is True

    with runner_on(kit, 99).ledger as ledger:
        report = replay_run(ledger, runner_on(kit, 99).blobs, run_id)
    assert report.blame == []  # the summary of what the run did
    assert len(report.blames) == len(blames)
    assert [s.step_id for s in report.steps if s.abandoned_by is None] == [
        s for s, _ in BEFORE_THE_CLAIM + THE_TAKE_OVERS
    ]


def test_replay_still_checks_the_abandoned_records(tmp_path: Path) -> None:
    """Abandoned records happened: a damaged blob of one is reported like any other."""
    kit = Kit(tmp_path)
    script = Script()
    run_id, _ = taken_over(kit, script, script.pipeline())
    with runner_on(kit, 99).ledger as ledger:
        before = replay_run(ledger, runner_on(kit, 99).blobs, run_id)
    critic = next(s for s in before.steps if s.step_id == "review~r1")
    assert critic.abandoned_by is not None
    digest = critic.artifact_hash
    hexed = digest.removeprefix("sha256:")
    (kit.root / "blobs" / "sha256" / hexed[:2] / hexed[2:]).write_bytes(b"{}")
    with runner_on(kit, 99).ledger as ledger:
        report = replay_run(ledger, runner_on(kit, 99).blobs, run_id)
    damaged = [s for s in report.steps if s.artifact_hash == digest]
    assert {s.blob for s in damaged} == {"mismatch"}
    assert {s.abandoned_by is None for s in damaged} == {True, False}  # both sets checked
    assert len([f for f in report.failures if f.digest == digest]) == len(damaged)
    assert not report.ok


def test_the_human_replay_marks_the_abandoned_steps(tmp_path: Path) -> None:
    kit = Kit(tmp_path)
    script = Script()
    run_id, _ = taken_over(kit, script, script.pipeline())
    claims = claims_of(kit, run_id)
    out = CliRunner().invoke(
        app, ["replay", run_id, "--store", str(kit.store_dir), "--blobs", str(kit.root / "blobs")]
    )
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert f"abandoned by take-over at position {claims[1].position} (@oncall)" in text


def test_a_run_without_a_take_over_marks_nothing(tmp_path: Path) -> None:
    kit = Kit(tmp_path)
    with kit.ledger() as ledger:
        ledger.store.set_meta(ORIGIN_KEY, ledger.origin)
    run_id = decided_run(kit, Script().pipeline(), "approved")
    out = cli(kit, "replay", run_id, "--blobs", str(kit.root / "blobs"))
    assert [s["abandoned_by"] for s in out["steps"]] == [None, None]
    assert out["take_overs"] == []
    assert json.dumps(out["blame"]) == "[]"
    plain = CliRunner().invoke(
        app, ["replay", run_id, "--store", str(kit.store_dir), "--blobs", str(kit.root / "blobs")]
    )
    assert plain.exit_code == 0, plain.output
    assert "abandoned" not in plain.output
