"""What a take-over leaves behind is seen, marked, and not counted twice.

A run paused at a gate is claimed (``run_resumed``) by a process that records steps, a
failure, its blame and a successful repair, and dies. A human takes it over
(``resume --take-over --as @oncall``): the run is rebuilt as it stood at the claim and its
steps after the gate are recorded again, under the same step ids. The run's stream then
holds both sets. Every reader of it must agree on the audit story:

* what happened: both sets stay visible, the dead claimant's marked as abandoned by the
  take-over (its name and the position of its claim);
* what counts: step outcomes, blame, repair and harm metrics and the run's status come from
  the take-over's records alone; costs the dead claimant really incurred stay counted.

The dead claimant is simulated as in ``test_gate_owners_and_resume_claim``: a step raises
``KeyboardInterrupt``, so the process records nothing more, as if it were killed.
"""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from typer.testing import CliRunner

from tests.integration.pipeline_kit import Kit, diff, tpc
from tests.integration.test_gate_owners_and_resume_claim import decided_run, payloads, runner_on
from tests.unit.export.test_otel import _points
from tracebound.cli.app import app
from tracebound.events.catalog import (
    BlameAssigned,
    RepairAttempted,
    RunFinished,
    RunResumed,
    SloAlertRaised,
    StepRecorded,
)
from tracebound.events.takeover import abandoned_events
from tracebound.export.evidence import build_evidence
from tracebound.export.otel import OtelRunHook, export_ledger_metrics
from tracebound.ids import RunId, StepId
from tracebound.ledger import ORIGIN_KEY
from tracebound.pipeline.metrics import compute_metrics, slo_violations
from tracebound.pipeline.runner import approve, run_stream
from tracebound.pipeline.runtime import Pipeline, StepContext
from tracebound.projections import fold
from tracebound.replay import replay_run

COST = Decimal("0.02")  # every tpc() artifact's cost_est.compute_usd_est


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    return Kit(tmp_path)


class Script:
    """Step functions that behave by call count: the Critic finds a harmful flaw in the
    first draft only, and ``publish`` kills its process the first ``deaths`` times."""

    def __init__(self, *, deaths: int = 1) -> None:
        self.calls: Counter[str] = Counter()
        self.applied: list[str] = []
        self.deaths = deaths

    def pipeline(self, *, deploy: bool = False) -> Pipeline:
        pipe = Pipeline("handover", pipeline_type="remediation", critical=True)
        pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
        pipe.executor(name="execute", apply=lambda ctx, a: self.applied.append(ctx.step_id))(
            lambda ctx: tpc("Executor", diffs=[diff("requirements.txt")])
        )
        pipe.executor(name="draft")(lambda ctx: tpc("Executor", actions=["write the note"]))
        pipe.critic(name="review")(self.review)
        pipe.executor(name="publish")(self.publish)
        if deploy:  # a second gate, after the step the dead claimant died in
            pipe.executor(name="deploy")(
                lambda ctx: tpc("Executor", diffs=[diff(".github/workflows/ci.yml")])
            )
        return pipe

    def review(self, ctx: StepContext) -> dict[str, Any]:
        self.calls["review"] += 1
        if self.calls["review"] == 1:  # harmful, blamed on draft: repaired by draft~r1
            ctx.report("the note breaks the changelog format", harmful=True)
        return tpc("Critic")

    def publish(self, ctx: StepContext) -> dict[str, Any]:
        self.calls["publish"] += 1
        if self.calls["publish"] <= self.deaths:
            raise KeyboardInterrupt  # the process is killed here: nothing more is recorded
        return tpc("Executor", actions=["publish the note"])


def _dies(kit: Kit, namespace: int, pipe: Pipeline, run_id: str, by: str | None) -> None:
    runner = runner_on(kit, namespace)
    with runner.ledger, pytest.raises(KeyboardInterrupt):
        runner.resume(pipe, run_id, take_over_by=by)


def taken_over(kit: Kit, script: Script, pipe: Pipeline) -> tuple[str, Any]:
    """The run id and the finishing take-over's result."""
    with kit.ledger() as ledger:  # the CLI opens a ledger by the origin `init` records
        ledger.store.set_meta(ORIGIN_KEY, ledger.origin)
    run_id = decided_run(kit, pipe, "approved")
    _dies(kit, 5, pipe, run_id, None)  # the first claimant
    for n in range(1, script.deaths):
        _dies(kit, 5 + n, pipe, run_id, f"@oncall{n}")  # a take-over that died too
    runner = runner_on(kit, 20)
    with runner.ledger:
        result = runner.resume(pipe, run_id, take_over_by="@oncall")
    return run_id, result


def stream_of(kit: Kit, run_id: str) -> list[Any]:
    with runner_on(kit, 99).ledger as ledger:
        return list(ledger.store.read_stream(run_stream(run_id)))


def cli(kit: Kit, *args: str) -> dict[str, Any]:
    out = CliRunner().invoke(app, [*args, "--json", "--store", str(kit.store_dir)])
    assert out.exit_code == 0, out.output
    data: dict[str, Any] = json.loads(out.stdout)
    return data


THE_DEAD_CLAIMANTS = [  # what the first claimant recorded after its claim
    ("execute", "success"), ("draft", "success"), ("review", "success"),
    ("draft~r1", "success"), ("review~r1", "success"),
]  # fmt: skip
THE_TAKE_OVERS = [("execute", "success"), ("draft", "success"), ("review", "success"),
                  ("publish", "success")]  # fmt: skip
BEFORE_THE_CLAIM = [("plan", "success"), ("execute", "gated")]


def test_every_reader_counts_the_take_over_and_marks_what_it_abandoned(kit: Kit) -> None:
    script = Script()
    pipe = script.pipeline()
    run_id, result = taken_over(kit, script, pipe)
    assert result.status == "completed"
    assert [(s.step_id, s.status) for s in result.steps] == BEFORE_THE_CLAIM + THE_TAKE_OVERS
    events = stream_of(kit, run_id)

    # What happened: both sets stay in the stream, the dead claimant's marked as abandoned
    # by the take-over, with its name and the position of its claim.
    steps = [(e.payload.step_id, e.payload.status) for e in events
             if isinstance(e.payload, StepRecorded)]  # fmt: skip
    assert steps == BEFORE_THE_CLAIM + THE_DEAD_CLAIMANTS + THE_TAKE_OVERS
    claims = [e for e in events if isinstance(e.payload, RunResumed)]
    assert [c.payload.taken_over_by for c in claims] == [None, "@oncall"]
    gone = abandoned_events(events)
    abandoned = [e for e in events if e.position in gone]
    assert {(t.position, t.taken_over_by) for t in gone.values()} == {
        (claims[1].position, "@oncall")
    }
    assert [(e.payload.step_id, e.payload.status) for e in abandoned
            if isinstance(e.payload, StepRecorded)] == THE_DEAD_CLAIMANTS  # fmt: skip
    assert {type(e.payload) for e in abandoned} >= {BlameAssigned, RepairAttempted}
    assert all(claims[0].position < e.position < claims[1].position for e in abandoned)

    # The fold: counts from the take-over, the abandoned ones beside them.
    state = fold(events)
    assert state.status == "succeeded"
    assert (state.steps, state.steps_gated, state.steps_failed) == (6, 1, 0)
    assert (state.blames, state.harmful_outputs, state.unresolved_blames) == (0, 0, 0)
    assert (state.repairs, state.repairs_succeeded) == (0, 0)
    assert (state.resumes, state.take_overs, state.taken_over_by) == (2, 1, "@oncall")
    assert (state.abandoned_events, state.abandoned_steps) == (len(abandoned), 5)
    assert state.slo_alerts == 0

    # Blame, repair and harm metrics: the take-over's outcomes; costs: every execution.
    with runner_on(kit, 99).ledger as ledger:
        log = list(ledger.store.read_log())
    m = compute_metrics(log)
    o = m.overall
    assert (o.outputs, o.failures, o.harmful, o.repaired, o.unresolved) == (5, 0, 0, 0, 0)
    # the take-over's 5 outputs, plus the dead claimant's draft, review, draft~r1 and
    # review~r1 (its execute record re-applied the approved artifact: no new execution)
    assert o.cost_est_usd == 9 * COST
    assert m.by_role["Critic"].failures == 0 and m.by_role["Executor"].harm_rate == 0
    assert slo_violations(m) == []
    assert not [e for e in log if isinstance(e.payload, SloAlertRaised)]
    assert [e.payload.status for e in events if isinstance(e.payload, RunFinished)] == [
        "gated", "completed",
    ]  # fmt: skip

    # The CLI: `runs` and `metrics` say the same.
    (row,) = cli(kit, "runs")["runs"]
    assert (row["status"], row["steps"]) == ("completed", 6)
    assert row["take_overs"] == [
        {"position": claims[1].position, "taken_over_by": "@oncall", "abandoned_steps": 5,
         "abandoned_events": len(abandoned)}
    ]  # fmt: skip
    metrics = cli(kit, "metrics")
    assert metrics["overall"]["failures"] == 0 and metrics["overall"]["harmful"] == 0
    assert metrics["violations"] == []

    # OpenTelemetry: a counter cannot un-count, so steps count every record (as a live hook
    # in each process did) and the abandoned ones are counted beside them.
    reader = InMemoryMetricReader()
    with runner_on(kit, 99).ledger as ledger:
        export_ledger_metrics(ledger.store, MeterProvider(metric_readers=[reader]))
    points = _points(reader)
    assert sum(points["tracebound.pipeline.steps"].values()) == len(steps)
    assert sum(points["tracebound.pipeline.abandoned_steps"].values()) == 5
    take_overs = {dict(k).get("tracebound.resume.take_over"): v
                  for k, v in points["tracebound.pipeline.resumes"].items()}  # fmt: skip
    assert take_overs == {False: 1, True: 1}
    # a hook without a store, fed the same events, tells what it saw: the same numbers
    live = InMemoryMetricReader()
    hook = OtelRunHook(MeterProvider(metric_readers=[live]))
    for e in log:
        hook(e)
    assert _points(live) == points

    # Evidence and replay: the whole stream, the run's status from its last finish.
    with runner_on(kit, 99).ledger as ledger:
        assert build_evidence(ledger, runner_on(kit, 99).blobs, run_id)["status"] == "completed"
        report = replay_run(ledger, runner_on(kit, 99).blobs, run_id)
    assert report.ok and report.status == "completed" and len(report.steps) == len(steps)


def test_a_second_take_over_abandons_the_first_take_overs_records_too(kit: Kit) -> None:
    """The first take-over died as well: the second is rebuilt at the first claim (not at
    the first take-over's), and each claim abandons what the one before it recorded."""
    script = Script(deaths=2)
    pipe = script.pipeline()
    run_id, result = taken_over(kit, script, pipe)
    assert result.status == "completed"
    assert [(s.step_id, s.status) for s in result.steps] == BEFORE_THE_CLAIM + THE_TAKE_OVERS
    assert script.applied == ["execute", "execute", "execute"]
    events = stream_of(kit, run_id)
    claims = [e for e in events if isinstance(e.payload, RunResumed)]
    assert [c.payload.taken_over_by for c in claims] == [None, "@oncall1", "@oncall"]
    gone = abandoned_events(events)
    by_claim = Counter(
        gone[e.position].taken_over_by for e in events
        if e.position in gone and isinstance(e.payload, StepRecorded)
    )  # fmt: skip
    # the first take-over recorded execute, draft and review (clean), then died in publish
    assert by_claim == {"@oncall1": 5, "@oncall": 3}
    state = fold(events)
    assert (state.steps, state.blames, state.repairs, state.take_overs) == (6, 0, 0, 2)
    assert (state.abandoned_steps, state.status) == (8, "succeeded")
    with runner_on(kit, 99).ledger as ledger:
        m = compute_metrics(ledger.store.read_log())
    assert (m.overall.outputs, m.overall.failures, m.overall.harmful) == (5, 0, 0)
    # 5 + the first claimant's 4 executions + the first take-over's draft and review
    assert m.overall.cost_est_usd == 11 * COST
    (row,) = cli(kit, "runs")["runs"]
    assert row["steps"] == 6
    assert [(t["taken_over_by"], t["abandoned_steps"]) for t in row["take_overs"]] == [
        ("@oncall1", 5), ("@oncall", 3),
    ]  # fmt: skip


def test_a_later_gate_resumes_on_the_take_overs_steps_only(kit: Kit) -> None:
    """After the take-over the run stops at a second gate (deploy). Resuming there rebuilds
    the run from the take-over's records: the dead claimant's stay out of it."""
    script = Script()
    pipe = script.pipeline(deploy=True)
    run_id, result = taken_over(kit, script, pipe)
    assert (result.status, result.gated_step) == ("gated", "deploy")
    runner = runner_on(kit, 30)
    with runner.ledger:
        approve(runner.ledger, RunId(run_id), StepId("deploy"), "@team-platform",
                codeowners=runner.codeowners)  # fmt: skip
        done = runner.resume(pipe, run_id)
        stream = payloads(runner, run_id)
    assert done.status == "completed"
    assert [(s.step_id, s.status) for s in done.steps] == [
        *BEFORE_THE_CLAIM, *THE_TAKE_OVERS, ("deploy", "gated"), ("deploy", "success"),
    ]  # fmt: skip
    assert [p.status for p in stream if isinstance(p, RunFinished)] == [
        "gated", "gated", "completed",
    ]  # fmt: skip
    state = fold(stream_of(kit, run_id))
    assert (state.steps, state.abandoned_steps, state.blames) == (8, 5, 0)
