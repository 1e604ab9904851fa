"""`tracebound metrics` against hand-computed numbers, on a small real SQLite ledger.

The definitions are the TPC + ARL record's (/work/shared/spec/003, "Blame / Repair / Harm
Metrics"): "harm_rate: harmful_outputs / total_outputs, where harmful outputs violate
constraints or introduce regressions", "SLO guardrails: alert if harm_rate > 0".
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from datetime import UTC, datetime
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tracebound.cli.app import app
from tracebound.events.catalog import (
    BlameAssigned,
    CostIncurred,
    CostSource,
    Role,
    RunFinished,
    RunStarted,
    StepRecorded,
)
from tracebound.events.envelope import Payload
from tracebound.events.record import decode_known
from tracebound.ids import RunId
from tracebound.ledger import Ledger
from tracebound.pipeline.metrics import METRICS_KINDS, compute_metrics, slo_violations
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.sqlite import SQLiteStore

T0 = datetime(2026, 5, 18, 12, tzinfo=UTC)
DIGEST = "sha256:" + "0" * 64


def _step(step_id: str, role: str, *, est: str = "0.02") -> StepRecorded:
    return StepRecorded.model_validate({
        "run_id": "r1", "step_id": step_id, "parent_step_id": None, "role": role,
        "timestamp_start": T0, "timestamp_end": T0, "duration_ms": 10, "artifact_hash": DIGEST,
        "status": "success", "cost_est": {"prompt_tokens": 1, "compute_usd_est": est},
        "latency_ms": 10, "storage": "db",
    })  # fmt: skip


def _harmful(reason: str) -> BlameAssigned:
    return BlameAssigned.model_validate({
        "run_id": "r1", "detected_by": "crit", "failed_step_id": "exec",
        "failed_role": "Executor", "origin_step_id": "exec", "origin_role": "Executor",
        "reason": reason, "harmful": True,
    })  # fmt: skip


def _ledger(path: Path, payloads: list[Payload]) -> Ledger:
    ledger = Ledger(SQLiteStore(path), clock=FixedClock(), ids=SequentialIds())
    ledger.record("run/r1", payloads, workflow_id="r1")
    return ledger


def _run(*steps: StepRecorded) -> list[Payload]:
    started = RunStarted.model_validate({
        "run_id": "r1", "pipeline": "p", "pipeline_type": "remediation", "critical": True,
        "inputs_digest": DIGEST, "inputs_pointer": "inputs",
    })  # fmt: skip
    return [started, *steps]


def test_two_findings_in_one_output_make_one_harmful_output(tmp_path: Path) -> None:
    # Three outputs; the Critic finds two constraint violations in the Executor's one
    # output. By hand: harmful outputs = 1, so harm_rate(Executor) = 1/1 = 1 and
    # harm_rate(overall) = 1/3; a rate of harmful *outputs* is never above 1.
    events = [
        *_run(_step("plan", "Planner"), _step("exec", "Executor"), _step("crit", "Critic")),
        _harmful("touched src/prod/x.py"),
        _harmful("changed 900 lines"),
    ]
    with _ledger(tmp_path, events) as ledger:
        m = compute_metrics(ledger.store.read_log())
    assert (m.by_role["Executor"].harmful, m.by_role["Executor"].harm_rate) == (1, Decimal(1))
    assert m.overall.harmful == 1
    assert m.overall.as_dict()["harm_rate"] == "0.333333"
    # The SLO alert states the same figure as the report, whatever the caller's context.
    with localcontext() as ctx:
        ctx.prec = 3
        (violation,) = slo_violations(m)
    assert (violation.metric, violation.value) == ("harm_rate", "0.333333")


def test_a_rate_over_no_outputs_is_null_not_zero(tmp_path: Path) -> None:
    # A run that recorded no output yet has no harm rate: 0/0 is not "no harm". As for
    # ROI's ratios (docs/projections.md), a zero denominator gives null, never 0.
    with _ledger(tmp_path, _run()) as ledger:
        m = compute_metrics(ledger.store.read_log())
    assert m.overall.outputs == 0
    assert m.overall.harm_rate is None
    assert m.overall.as_dict()["harm_rate"] is None


def test_cli_cost_estimate_per_step_is_a_plain_decimal(tmp_path: Path) -> None:
    # Three outputs estimated at 100 USD each: by hand 300 / 3 = 100 per step, written
    # "100" as `cost_usd` is (never "1E+2").
    store = str(tmp_path / ".tracebound")
    assert CliRunner().invoke(app, ["init", "--store", store]).exit_code == 0
    events = _run(_step("plan", "Planner", est="100"), _step("exec", "Executor", est="100"))
    events.append(_step("crit", "Critic", est="100"))
    with _ledger(tmp_path / ".tracebound", events):
        pass
    result = CliRunner().invoke(app, ["metrics", "--json", "--store", store])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["overall"]["cost_est_usd"] == "300"
    assert shown["overall"]["cost_est_per_step_usd"] == "100"
    assert shown["by_role"]["Critic"]["cost_est_per_step_usd"] == "100"


def _cost(amount: str, role: Role | None) -> CostIncurred:
    return CostIncurred(
        tier="direct", amount_usd=Decimal(amount), source=CostSource("s"), role=role
    )


def _costs_ledger(path: Path, per_key: int) -> Ledger:
    """Two runs of two pipelines, with costs charged to roles, to no role, to no run, and
    to a run before its ``run_started`` (a team's own cost call may come first)."""
    ledger = Ledger(SQLiteStore(path), clock=FixedClock(), ids=SequentialIds())
    ledger.record("run/r2", [_cost("0.5", "Planner")] * per_key, workflow_id="r2")
    ledger.record("run/r1", _run(), workflow_id="r1")
    r2 = _run()[0].model_copy(update={"run_id": "r2", "pipeline": "q", "pipeline_type": "t"})
    ledger.record("run/r2", [r2], workflow_id="r2")
    for _ in range(per_key):
        ledger.record("run/r1", [_cost("0.1", "Planner"), _cost("0.01", None)], workflow_id="r1")
        ledger.record("team/costs", [_cost("1", "Executor")])
    return ledger


def test_costs_are_summed_per_role_pipeline_and_run(tmp_path: Path) -> None:
    # By hand, 3 costs of each kind: Planner 3 x 0.1 (r1) + 3 x 0.5 (r2) = 1.8, no role
    # 0.03 ("unattributed"), Executor 3 x 1 with no run; pipeline p (r1) 0.33, q (r2) 1.5.
    with _costs_ledger(tmp_path / "l", 3) as ledger:
        shown = compute_metrics(ledger.store.read_log()).as_dict()
    by_role: Any = shown["by_role"]
    assert {r: g["cost_usd"] for r, g in by_role.items()} == {
        "Executor": "3", "Planner": "1.8", "unattributed": "0.03"}  # fmt: skip
    by_pipeline: Any = shown["by_pipeline"]
    assert {p: g["cost_usd"] for p, g in by_pipeline.items()} == {"p": "0.33", "q": "1.5"}
    by_type: Any = shown["by_pipeline_type"]
    assert by_type["t"]["cost_usd"] == "1.5"
    overall: Any = shown["overall"]
    assert overall["cost_usd"] == "4.83"


def test_memory_of_metrics_does_not_grow_with_cost_events(tmp_path: Path) -> None:
    # `tracebound metrics` kept every cost event until the end of its pass (309 MB at
    # 500,000 events): the costs are summed per run and role as they are read, so what
    # the fold holds on to is the same for 100 cost events per key as for 1,000.
    def peak(per_key: int) -> int:
        with _costs_ledger(tmp_path / f"l{per_key}", per_key) as ledger:
            raws = list(ledger.store.read_raw())  # what the store hands over, not the fold's
        tracemalloc.start()
        try:
            compute_metrics(decode_known(iter(raws), kinds=METRICS_KINDS))
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(100), peak(1000)
    assert large - small < 64 * 1024, (small, large)


def test_a_pass_over_finished_runs_holds_none_of_their_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `tracebound metrics` kept every step's payload to the end of its pass (912 MB at
    # 70,000 runs): a finished run's steps are counted when it finishes, and what is left
    # of them when the last record is read is what the metrics hold (a few numbers each).
    from tracebound.pipeline import metrics
    from tracebound.store import port

    def steps_alive() -> int:
        gc.collect()
        return sum(isinstance(o, StepRecorded) for o in gc.get_objects())

    alive: list[int] = []
    real = port.read_matching

    def counting(*args: Any, **kwargs: Any) -> Any:
        before = steps_alive()
        yield from real(*args, **kwargs)
        alive.append(steps_alive() - before)

    with Ledger(SQLiteStore(tmp_path / "l"), clock=FixedClock(), ids=SequentialIds()) as ledger:
        for i in range(30):
            steps = [_step(s, role) for s, role in (("plan", "Planner"), ("exec", "Executor"))]
            run = [p.model_copy(update={"run_id": f"r{i}"}) for p in _run(*steps)]
            done = RunFinished(run_id=RunId(f"r{i}"), status="completed")
            ledger.record(f"run/r{i}", [*run, done], workflow_id=f"r{i}")
        monkeypatch.setattr(metrics, "read_matching", counting)
        m = metrics.store_metrics(ledger.store)
    assert m.overall.outputs == 60
    assert alive[0] <= 1, alive  # the last one read, at most
