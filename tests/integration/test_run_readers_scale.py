"""Readers of pipeline runs decode only the records they fold, whatever else the log holds.

A ledger that also records a team's own activity (an LLM cost per call, plugin lookups,
anchors: hundreds of thousands of events) made `tracebound runs` and `tracebound metrics`
decode every one of them (13 s and 36 s, 1.7 GB for `metrics`, at 500,000 events with no
run at all), and the runner did the same at the end of every critical run (its SLO check)
and at each ``ctx.metrics()``. The shape asserted here: the number of records decoded does
not grow when the log grows by records those readers do not read, and what they say stays
the same, take-overs included.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.integration.pipeline_kit import Kit, tpc
from tests.integration.test_gate_owners_and_resume_claim import runner_on
from tests.integration.test_take_over_accounting import Script, taken_over
from tracebound.cli.app import app
from tracebound.events import record
from tracebound.events.catalog import PluginResolved, PluginScope
from tracebound.ids import PluginId
from tracebound.pipeline.runtime import Pipeline
from tracebound.store.sqlite import SQLiteStore

PADDING = 600


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    return Kit(tmp_path)


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many stored records were decoded (one counter, reset by the test)."""
    count = [0]
    real = record.decode_record

    def counting(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(record, "decode_record", counting)
    return count


def _pad(kit: Kit, streams: int = 3) -> None:
    """Records no run reader reads, on streams of their own and with workflow ids."""
    with runner_on(kit, 77).ledger as ledger:
        for s in range(streams):
            payloads = [
                PluginResolved(
                    plugin_id=PluginId(f"plugin-{i}"),
                    extends_chain=(),
                    matched_scope=PluginScope("npm/express"),
                    fallback_used=False,
                )
                for i in range(PADDING // streams)
            ]
            ledger.record(f"team/activity-{s}", payloads, workflow_id=f"wf-{s}")


def _cli(kit: Kit, decoded: list[int], *args: str) -> tuple[dict[str, Any], int]:
    decoded[0] = 0
    out = CliRunner().invoke(app, [*args, "--json", "--store", str(kit.store_dir)])
    assert out.exit_code == 0, out.output
    data: dict[str, Any] = json.loads(out.stdout)
    return data, decoded[0]


def test_runs_and_metrics_decode_only_what_they_fold(kit: Kit, decoded: list[int]) -> None:
    script = Script()
    taken_over(kit, script, script.pipeline())
    before = {cmd: _cli(kit, decoded, *cmd) for cmd in [("runs",), ("metrics",),
              ("metrics", "--pipeline", "handover")]}  # fmt: skip
    _pad(kit)
    after = {cmd: _cli(kit, decoded, *cmd) for cmd in before}
    for cmd, (data, count) in after.items():
        assert data == before[cmd][0], cmd
        assert count == before[cmd][1], (cmd, count, before[cmd][1])
    assert after[("runs",)][0]["runs"][0]["take_overs"][0]["abandoned_steps"] == 5


def _critical(name: str) -> Pipeline:
    pipe = Pipeline(name, pipeline_type="remediation", critical=True)
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    return pipe


_namespaces = iter(range(30, 90))  # each runner its own event ids


def _decodes_of_a_run(kit: Kit, decoded: list[int], pipe: Pipeline) -> int:
    runner = runner_on(kit, next(_namespaces))
    with runner.ledger:
        decoded[0] = 0
        assert runner.run(pipe, {}).status == "completed"
        return decoded[0]


def _slo_check_grows_by_one_run(kit: Kit, counted: list[int]) -> None:
    """A critical run's records counted (decoded or handed to Python) before and after the
    log grew by PADDING events of other kinds: one run more, not PADDING more."""
    pipe = _critical("small")
    _decodes_of_a_run(kit, counted, pipe)  # the log holds one run already
    first = _decodes_of_a_run(kit, counted, pipe)
    _pad(kit)
    assert _decodes_of_a_run(kit, counted, pipe) <= first + 10


def test_a_critical_runs_slo_check_decodes_only_what_it_folds(kit: Kit, decoded: list[int]) -> None:
    _slo_check_grows_by_one_run(kit, decoded)


def test_a_steps_metrics_decode_only_what_they_fold(kit: Kit, decoded: list[int]) -> None:
    seen: list[int] = []

    def step(ctx: Any) -> dict[str, Any]:
        before = decoded[0]
        ctx.metrics()
        seen.append(decoded[0] - before)
        return tpc("Planner")

    pipe = Pipeline("asks", pipeline_type="remediation")
    pipe.planner(name="plan")(step)
    measure: Callable[[], int] = lambda: _decodes_of_a_run(kit, decoded, pipe)  # noqa: E731
    measure()
    _pad(kit)
    measure()
    assert seen[1] <= seen[0] + 10, seen


def test_anchor_export_decodes_only_the_anchor_records(tmp_path: Path, decoded: list[int]) -> None:
    """`export anchors` (AnchorStore.sync) folds one event type: a log of other records
    around it is skipped undecoded."""
    from decimal import Decimal

    from tests.unit.events.test_catalog import SAMPLES
    from tracebound import FixedClock, Ledger, SequentialIds, SQLiteStore
    from tracebound.events.catalog import AttemptAnchorRecorded, CostIncurred, CostSource
    from tracebound.pipeline.retry.anchors import anchor_events

    (anchor,) = [p for p in SAMPLES if isinstance(p, AttemptAnchorRecorded)][:1]
    cost = CostIncurred(tier="direct", amount_usd=Decimal(1), source=CostSource("s"))
    with Ledger(SQLiteStore(tmp_path / "l"), clock=FixedClock(), ids=SequentialIds()) as led:
        led.record("noise", [cost] * PADDING)
        led.record("attempts", [anchor])
        led.record("noise", [cost] * PADDING)
        decoded[0] = 0
        found = list(anchor_events(led))
    assert [event.stream_id for event, _ in found] == ["attempts"]
    assert decoded[0] == 1


def test_otel_export_decodes_only_what_it_folds(kit: Kit, decoded: list[int]) -> None:
    """`export_ledger_metrics` (a backfill of the OpenTelemetry instruments) decoded every
    record of the log; the records it does not fold are now skipped undecoded, and the
    numbers it exports stay the same (a take-over's abandoned steps included)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from tests.unit.export.test_otel import _points
    from tracebound.export.otel import export_ledger_metrics

    def export() -> tuple[dict[str, Any], int, int]:
        reader = InMemoryMetricReader()
        with runner_on(kit, 78).ledger as ledger:
            decoded[0] = 0
            read = export_ledger_metrics(ledger.store, MeterProvider(metric_readers=[reader]))
            return _points(reader), decoded[0], read

    script = Script()
    taken_over(kit, script, script.pipeline())
    points, count, read = export()
    assert points["tracebound.pipeline.abandoned_steps"]
    _pad(kit)
    after, count_after, read_after = export()
    assert (after, count_after) == (points, count)
    assert read_after == read + PADDING  # every record is read (and counted), not decoded


@pytest.fixture
def handed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many stored records the SQLite store handed to Python (read_raw, filtered or
    not): decoding less is not enough on a big log, reading every record into Python took
    most of a `metrics` or an SLO check's time (3.2 s of a 1,000,000-event log per run)."""
    count = [0]
    for name in ("read_raw", "read_raw_matching"):
        real = getattr(SQLiteStore, name)

        def counting(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            for raw in _real(*args, **kwargs):
                count[0] += 1
                yield raw

        monkeypatch.setattr(SQLiteStore, name, counting)
    return count


def test_runs_and_metrics_read_only_the_records_they_fold(kit: Kit, handed: list[int]) -> None:
    """`runs` read every record of the log into Python to pick the runs' own (a log whose
    bulk is a team's own events paid for each); the store now picks them, and a gated
    run's records of other types come from the stream index (a take-over counts them)."""
    script = Script()
    taken_over(kit, script, script.pipeline())
    commands = [("runs",), ("metrics",), ("metrics", "--pipeline", "handover")]
    before = {cmd: _cli(kit, handed, *cmd) for cmd in commands}
    _pad(kit)
    for cmd in commands:
        data, count = _cli(kit, handed, *cmd)
        assert data == before[cmd][0], cmd
        assert count == before[cmd][1] < PADDING, (cmd, count, before[cmd][1])


def test_a_critical_runs_slo_check_reads_only_what_it_folds(kit: Kit, handed: list[int]) -> None:
    _slo_check_grows_by_one_run(kit, handed)


def _plain_runs(kit: Kit, runs: int) -> None:
    """Completed runs of a pipeline that blames nothing: what most of a year's log is."""
    pipe = Pipeline("everyday", pipeline_type="remediation")
    for name in ("plan", "execute", "review"):
        pipe.planner(name=name)(lambda ctx: tpc("Planner"))
    runner = runner_on(kit, 91)
    with runner.ledger:
        for _ in range(runs):
            assert runner.run(pipe, {}).status == "completed"


def test_a_critical_runs_slo_check_reads_no_step_when_nothing_was_blamed(
    kit: Kit, handed: list[int]
) -> None:
    """The SLO check at the end of every critical run read every run's steps (38 s and
    900 MB after each critical run in a 70,000-run log); with no harmful or unresolved
    blame in the log no SLO can be broken, and the check reads the blames alone."""
    pipe = _critical("small")
    _decodes_of_a_run(kit, handed, pipe)
    first = _decodes_of_a_run(kit, handed, pipe)
    _plain_runs(kit, 20)  # 20 runs of 3 steps: 100 records a full fold would read
    assert _decodes_of_a_run(kit, handed, pipe) <= first + 10


def _harmful_critical(name: str) -> Pipeline:
    """A critical pipeline whose Critic finds a harmful output once (then it is repaired)."""
    pipe = _critical(name)

    @pipe.critic(name="critique")
    def critique(ctx: Any) -> dict[str, Any]:
        if not ctx.repair_notes:
            ctx.report("the plan pins nothing", harmful=True)
        return tpc("Critic")

    return pipe


def test_a_critical_runs_slo_check_after_a_harmful_blame_reads_its_pipeline_alone(
    kit: Kit, handed: list[int]
) -> None:
    """Once any harmful (or unresolved) blame was in the log, the SLO check at the end of
    every critical run folded every run's steps (30 s and 900 MB at 70,000 runs); it now
    folds the records of the blamed critical pipeline's runs, and of the rest of the log
    reads each run's start (which pipeline a run is of), not its steps."""
    from tracebound.events.catalog import SloAlertRaised
    from tracebound.pipeline.metrics import SLO_KINDS, slo_violations, store_metrics

    pipe = _harmful_critical("risky")
    first = _decodes_of_a_run(kit, handed, pipe)
    second = _decodes_of_a_run(kit, handed, pipe)  # one blamed run more to fold
    _plain_runs(kit, 20)  # 20 runs of 3 steps: over 100 records a full fold would read
    assert _decodes_of_a_run(kit, handed, pipe) <= second + (second - first) + 20
    with runner_on(kit, 92).ledger as ledger:
        alerts = [e.payload for e in ledger.store.read_log()
                  if isinstance(e.payload, SloAlertRaised)]  # fmt: skip
        assert [(a.pipeline, a.metric) for a in alerts] == [("risky", "harm_rate")] * 3
        assert slo_violations(store_metrics(ledger.store, SLO_KINDS))[0].value == alerts[-1].value


def test_a_clean_critical_pipelines_slo_check_folds_no_run_of_a_blamed_one(
    kit: Kit, handed: list[int]
) -> None:
    """The runner raises a run's pipeline's alerts alone, yet its check folded every
    pipeline a blame was in: after a run of a clean critical pipeline it now reads the
    blames and the blamed runs' starts, and none of the blamed pipeline's other records."""
    risky, small = _harmful_critical("risky"), _critical("small")
    _decodes_of_a_run(kit, handed, risky)
    before = _decodes_of_a_run(kit, handed, small)
    for _ in range(5):
        _decodes_of_a_run(kit, handed, risky)
    # each blamed run: its blame and its start, not its steps, gates and end
    assert _decodes_of_a_run(kit, handed, small) <= before + 5 * 2
