"""OpenTelemetry metrics: exact counts and sums for known runs, live and from the ledger."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from tests.unit.replay import replay_pipelines as rp

from tracebound import Payload
from tracebound.errors import UnknownEventType
from tracebound.events.catalog import RepairAttempted, StepRecorded
from tracebound.export.otel import OtelRunHook, export_ledger_metrics, observe_redactions
from tracebound.ids import RunId, StepId
from tracebound.pipeline.runner import Runner, approve

Points = dict[str, dict[frozenset[tuple[str, Any]], Any]]


def _points(reader: InMemoryMetricReader) -> Points:
    """name -> attributes -> value (a sum) or (count, sum) (a histogram)."""
    out: Points = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                series = out.setdefault(metric.name, {})
                for point in metric.data.data_points:
                    key = frozenset((point.attributes or {}).items())
                    if isinstance(point, HistogramDataPoint):
                        series[key] = (point.count, round(point.sum, 9))
                    else:
                        assert isinstance(point, NumberDataPoint)
                        series[key] = point.value
    return out


def _attrs(**kw: Any) -> frozenset[tuple[str, Any]]:
    names = {
        "role": "tracebound.role",
        "status": "tracebound.step.status",
        "ptype": "tracebound.pipeline.type",
        "reason": "tracebound.redaction.reason",
        "succeeded": "tracebound.repair.succeeded",
        "metric": "tracebound.slo.metric",
        "decision": "tracebound.gate.decision",
        "take_over": "tracebound.resume.take_over",
    }
    return frozenset((names[k], v) for k, v in kw.items())


def _known_runs(runner: Runner) -> None:
    """A repaired run, a gated run approved and resumed, and a harmful critical run."""
    runner.run(rp.repaired, {"ticket": "T-1"})
    gated = runner.run(rp.gated, {"ticket": "T-2"})
    approve(runner.ledger, RunId(gated.run_id), StepId("execute"), "alice",
            codeowners=runner.codeowners)  # fmt: skip
    runner.resume(rp.gated, gated.run_id)
    runner.run(rp.harmful, {"ticket": "T-3"})


@pytest.fixture
def live(tmp_path: Path) -> tuple[Runner, Points]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    runner = rp.make_runner(tmp_path)
    runner.on_event = OtelRunHook(provider, store=runner.ledger.store)
    observe_redactions(runner.redactor.stats, provider)
    _known_runs(runner)
    return runner, _points(reader)


def test_live_counters_are_exact(live: tuple[Runner, Points]) -> None:
    _, points = live
    R = "remediation"  # noqa: N806 - a constant, read as one
    assert points["tracebound.pipeline.steps"] == {
        _attrs(role="Planner", status="success", ptype=R): 3,
        _attrs(role="Executor", status="error", ptype=R): 1,
        _attrs(role="Executor", status="success", ptype=R): 3,  # execute~r1, gated, harmful
        _attrs(role="Executor", status="gated", ptype=R): 1,
        _attrs(role="Critic", status="success", ptype=R): 3,
    }
    assert points["tracebound.pipeline.gate_triggers"] == {_attrs(role="Executor", ptype=R): 1}
    assert points["tracebound.pipeline.resumes"] == {
        _attrs(decision="approved", take_over=False, ptype=R): 1
    }
    assert points["tracebound.pipeline.repairs"] == {
        _attrs(role="Executor", succeeded=True, ptype=R): 1
    }
    assert points["tracebound.pipeline.slo_alerts"] == {
        _attrs(metric="harm_rate", role="any", ptype=R): 1,
        _attrs(metric="unresolved_origin", role="Executor", ptype=R): 1,
    }
    assert points["tracebound.pipeline.redacted_steps"] == {
        _attrs(reason="GitHub token", role="Executor", ptype=R): 1
    }


def test_live_histograms_match_the_ledger(live: tuple[Runner, Points]) -> None:
    runner, points = live
    expected: dict[tuple[str, str], list[int]] = {}
    for e in runner.ledger.store.read_log():
        if isinstance(e.payload, StepRecorded) and e.payload.status != "gated":
            expected.setdefault((e.payload.role, "remediation"), []).append(e.payload.latency_ms)
    latency = points["tracebound.pipeline.step.latency"]
    cost = points["tracebound.pipeline.step.cost"]
    for (role, ptype), values in expected.items():
        key = _attrs(role=role, ptype=ptype)
        assert latency[key] == (len(values), sum(values))
        # Every artifact of the kit estimates $0.02; an error record estimates nothing.
        outputs = len(values) - (1 if role == "Executor" else 0)
        assert cost[key] == (len(values), float(Decimal("0.02") * outputs))
    assert sum(n for n, _ in latency.values()) == 10


def test_redactions_are_observed_from_the_redactor(live: tuple[Runner, Points]) -> None:
    runner, points = live
    by_reason = runner.redactor.stats.by_reason()
    assert by_reason  # the harmful executor leaked a token, which was redacted
    assert points["tracebound.redactions"] == {
        _attrs(reason=reason): count for reason, count in by_reason.items()
    }


def test_the_ledger_replay_gives_the_same_numbers(live: tuple[Runner, Points]) -> None:
    runner, points = live
    reader = InMemoryMetricReader()
    read = export_ledger_metrics(runner.ledger.store, MeterProvider(metric_readers=[reader]))
    assert read == runner.ledger.store.size()
    replayed = _points(reader)
    live_only = {"tracebound.redactions"}  # the redactor's counters are not in the ledger
    assert replayed == {k: v for k, v in points.items() if k not in live_only}


def test_a_run_resumed_by_another_process_keeps_its_pipeline_type(tmp_path: Path) -> None:
    first = rp.make_runner(tmp_path)
    gated = first.run(rp.gated, {})
    approve(first.ledger, RunId(gated.run_id), StepId("execute"), "alice",
            codeowners=first.codeowners)  # fmt: skip
    reader = InMemoryMetricReader()
    hook = OtelRunHook(MeterProvider(metric_readers=[reader]), store=first.ledger.store)
    resumed = rp.make_runner(tmp_path, on_event=hook)
    resumed.resume(rp.gated, gated.run_id)
    steps = _points(reader)["tracebound.pipeline.steps"]
    types = Counter(dict(k)["tracebound.pipeline.type"] for k in steps)
    assert set(types) == {"remediation"}
    assert steps[_attrs(role="Critic", status="success", ptype="remediation")] == 1


# --- exporting a ledger that is not only pipeline events, or from the middle ----------------


class _TicketOpened(Payload):
    """A user's own event type, registered only in the code that wrote it (here: nowhere)."""

    kind: Literal["h4_ticket_opened"] = "h4_ticket_opened"
    title: str


def test_export_skips_event_types_it_has_no_model_for(
    live: tuple[Runner, Points], tmp_path: Path
) -> None:
    runner, points = live
    runner.ledger.record("tickets/1", [_TicketOpened(title="an event of the user's own")])
    with pytest.raises(UnknownEventType):  # this process cannot decode it...
        list(runner.ledger.store.read_log(start=runner.ledger.store.size()))
    reader = InMemoryMetricReader()
    read = export_ledger_metrics(runner.ledger.store, MeterProvider(metric_readers=[reader]))
    assert read == runner.ledger.store.size()  # ...and the export reads past it all the same
    live_only = {"tracebound.redactions"}
    assert _points(reader) == {k: v for k, v in points.items() if k not in live_only}


def test_an_export_from_the_middle_still_knows_the_repaired_role(
    live: tuple[Runner, Points],
) -> None:
    runner, _ = live
    store = runner.ledger.store
    (repair,) = [e for e in store.read_log() if isinstance(e.payload, RepairAttempted)]
    reader = InMemoryMetricReader()
    # A later export (a new process, say) that starts after the repaired step was recorded.
    export_ledger_metrics(store, MeterProvider(metric_readers=[reader]), start=repair.position)
    assert _points(reader)["tracebound.pipeline.repairs"] == {
        _attrs(role="Executor", succeeded=True, ptype="remediation"): 1
    }


# --- a long-running process: the hook forgets finished runs -----------------------------------


def _replayed(runner: Runner) -> Points:
    reader = InMemoryMetricReader()
    export_ledger_metrics(runner.ledger.store, MeterProvider(metric_readers=[reader]))
    return _points(reader)


def _hooked(
    tmp_path: Path, *, with_store: bool
) -> tuple[Runner, OtelRunHook, InMemoryMetricReader]:
    """A Runner whose events feed an OtelRunHook (given the ledger's store, or none)."""
    reader = InMemoryMetricReader()
    runner = rp.make_runner(tmp_path)
    hook = OtelRunHook(
        MeterProvider(metric_readers=[reader]),
        store=runner.ledger.store if with_store else None,
    )
    runner.on_event = hook
    return runner, hook, reader


@pytest.mark.parametrize("with_store", [True, False])
def test_the_hook_forgets_every_run_that_finished(tmp_path: Path, with_store: bool) -> None:
    runner, hook, reader = _hooked(tmp_path, with_store=with_store)
    n = 0
    for _ in range(3):
        for pipeline in (rp.deterministic, rp.repaired, rp.harmful):
            runner.run(pipeline, {"ticket": f"T-{n}"})
            n += 1
            assert hook.tracked_runs == frozenset()  # completed or failed: nothing kept
    rejected = runner.run(rp.gated, {"ticket": "T-rejected"})
    approve(runner.ledger, RunId(rejected.run_id), StepId("execute"), "alice",
            decision="rejected", codeowners=runner.codeowners)  # fmt: skip
    runner.resume(rp.gated, rejected.run_id)
    assert hook.tracked_runs == frozenset()  # rejected: finished for good
    # The numbers are still the ledger's, also for the runs whose entries were dropped.
    live = {k: v for k, v in _points(reader).items() if k != "tracebound.redactions"}
    assert live == _replayed(runner)
    assert "unknown" not in {
        dict(k)["tracebound.pipeline.type"] for k in live["tracebound.pipeline.steps"]
    }


@pytest.mark.parametrize("with_store", [True, False])
def test_a_run_resumed_in_the_same_process_keeps_its_metrics(
    tmp_path: Path, with_store: bool
) -> None:
    runner, hook, reader = _hooked(tmp_path, with_store=with_store)
    gated = runner.run(rp.gated, {"ticket": "T-1"})
    # Paused, not finished: without a store nothing else could tell the resume the run's
    # pipeline type, so it is kept; with one it is dropped and read back on resume.
    assert hook.tracked_runs == (frozenset() if with_store else {gated.run_id})
    approve(runner.ledger, RunId(gated.run_id), StepId("execute"), "alice",
            codeowners=runner.codeowners)  # fmt: skip
    runner.resume(rp.gated, gated.run_id)
    assert hook.tracked_runs == frozenset()
    points = _points(reader)
    R = "remediation"  # noqa: N806 - a constant, read as one
    assert points["tracebound.pipeline.resumes"] == {
        _attrs(decision="approved", take_over=False, ptype=R): 1
    }
    assert points["tracebound.pipeline.steps"] == {
        _attrs(role="Planner", status="success", ptype=R): 1,
        _attrs(role="Executor", status="gated", ptype=R): 1,
        _attrs(role="Executor", status="success", ptype=R): 1,
        _attrs(role="Critic", status="success", ptype=R): 1,
    }
    assert {k: v for k, v in points.items() if k != "tracebound.redactions"} == _replayed(runner)
