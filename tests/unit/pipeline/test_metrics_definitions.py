"""`tracebound metrics` against hand-computed numbers, on a small real SQLite ledger.

The definitions are the TPC + ARL record's (/work/shared/spec/003, "Blame / Repair / Harm
Metrics"): "harm_rate: harmful_outputs / total_outputs, where harmful outputs violate
constraints or introduce regressions", "SLO guardrails: alert if harm_rate > 0".
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal, localcontext
from pathlib import Path

from typer.testing import CliRunner

from tracebound.cli.app import app
from tracebound.events.catalog import BlameAssigned, RunStarted, StepRecorded
from tracebound.events.envelope import Payload
from tracebound.ledger import Ledger
from tracebound.pipeline.metrics import compute_metrics, slo_violations
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
