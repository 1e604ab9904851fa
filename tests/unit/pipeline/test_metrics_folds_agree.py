"""The metrics' quick folds give the full fold's numbers, on generated ledgers.

Two readers of a big log do less than fold everything it holds: ``store_metrics`` counts a
run's steps when the run finishes (a pass over a year's runs holds the open runs' steps,
not all of them), and the runner's SLO check folds only the runs of the critical pipelines
a harmful or unresolved blame names. Each is compared here with the fold of every record
kept to the end (:func:`compute_metrics` over ``read_log``), on ledgers of interleaved runs
with gates, claims and take-overs, repairs and blames, and with what the runner never
writes (a step or a start after a run finished, a step in another run's stream, a run with
no start), where the quick fold must notice and still agree.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tracebound.events.catalog import (
    BlameAssigned,
    GateRequested,
    RepairAttempted,
    RunFinished,
    RunResumed,
    RunStarted,
    StepRecorded,
)
from tracebound.events.envelope import Payload
from tracebound.ids import StreamId
from tracebound.ledger import Ledger
from tracebound.pipeline.metrics import (
    SLO_KINDS,
    RunMetrics,
    compute_metrics,
    slo_violations,
    store_metrics,
    store_slo_violations,
)
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.port import AppendRequest
from tracebound.store.sqlite import SQLiteStore

T0 = datetime(2026, 5, 18, 12, tzinfo=UTC)
DIGEST = "sha256:" + "0" * 64
ROLES = ("Planner", "Executor", "Critic", "Reviewer")
STEP_IDS = ("plan", "exec", "crit", "review")
SEEDS = range(40)


class _RunWriter:
    """One generated run's records, in its stream's order: (stream, payload)."""

    def __init__(self, rnd: random.Random, run_id: str, pipelines: list[dict[str, Any]]) -> None:
        self.rnd, self.run_id, self.pipelines = rnd, run_id, pipelines
        self.records: list[tuple[str, Payload]] = []
        self.stream = f"run/{run_id}"

    def add(self, payload: Payload, stream: str | None = None) -> None:
        self.records.append((stream or self.stream, payload))

    def started(self) -> None:
        pipe = self.rnd.choice(self.pipelines)
        self.add(RunStarted.model_validate({
            "run_id": self.run_id, "inputs_digest": DIGEST, "inputs_pointer": "inputs", **pipe,
        }))  # fmt: skip

    def steps(self, count: int, stream: str | None = None) -> None:
        rnd = self.rnd
        for _ in range(count):
            self.add(StepRecorded.model_validate({
                "run_id": self.run_id, "step_id": rnd.choice(STEP_IDS), "parent_step_id": None,
                "role": rnd.choice(ROLES), "timestamp_start": T0, "timestamp_end": T0,
                "duration_ms": 1, "artifact_hash": DIGEST,
                "status": rnd.choice(("success", "success", "error", "skipped", "gated")),
                "cost_est": {"prompt_tokens": 1, "compute_usd_est": f"0.0{rnd.randint(0, 9)}"},
                "latency_ms": rnd.randint(0, 40), "storage": "db",
            }), stream)  # fmt: skip

    def blamed(self) -> None:
        rnd = self.rnd
        origin = rnd.choice((None, *STEP_IDS))
        self.add(BlameAssigned.model_validate({
            "run_id": self.run_id, "detected_by": "crit", "failed_step_id": rnd.choice(STEP_IDS),
            "failed_role": rnd.choice(ROLES), "origin_step_id": origin,
            "origin_role": None if origin is None else rnd.choice(ROLES), "reason": "found",
            "harmful": rnd.random() < 0.3,
        }))  # fmt: skip
        if origin is not None and rnd.random() < 0.5:
            self.add(RepairAttempted.model_validate({
                "run_id": self.run_id, "origin_step_id": origin, "repair_step_id": "fix",
                "attempt": 1, "succeeded": True,
            }))  # fmt: skip

    def resumed(self, gate: str, by: str | None) -> None:
        self.add(RunResumed.model_validate({
            "run_id": self.run_id, "step_id": gate, "decision": "approved", "taken_over_by": by,
        }))  # fmt: skip

    def gated(self) -> None:
        """A gate, its claim, the claimant's steps, and maybe take-overs of it."""
        rnd = self.rnd
        gate = rnd.choice(STEP_IDS)
        self.add(GateRequested.model_validate({
            "run_id": self.run_id, "step_id": gate, "role": "Executor",
            "reasons": ["sensitive"], "repository_wide": True,
        }))  # fmt: skip
        self.resumed(gate, None)
        for taker in ("alice", "bob")[: rnd.randint(0, 2)]:
            self.steps(rnd.randint(0, 3))
            if rnd.random() < 0.5:
                self.blamed()
            self.resumed(gate, taker)
        self.steps(rnd.randint(0, 3))

    def finished(self) -> None:
        status = self.rnd.choice(("completed", "completed", "failed", "rejected", "gated"))
        self.add(RunFinished.model_validate({"run_id": self.run_id, "status": status}))


def _run(rnd: random.Random, run_id: str, pipelines: list[dict[str, Any]]) -> _RunWriter:
    w = _RunWriter(rnd, run_id, pipelines)
    if rnd.random() < 0.9:
        w.started()
    w.steps(rnd.randint(0, 4))
    for _ in range(rnd.randint(0, 2)):
        w.blamed()
    if rnd.random() < 0.4:
        w.gated()
    if rnd.random() < 0.85:
        w.finished()
    odd = rnd.random()  # what the runner never writes: the quick fold must still agree
    if odd < 0.05:
        w.steps(1)
    elif odd < 0.08:
        w.started()
    elif odd < 0.11:
        w.steps(1, stream=f"side/{run_id}")
        w.finished()
    return w


def _ledger(path: Path, seed: int) -> Ledger:
    rnd = random.Random(seed)
    pipelines = [
        {"pipeline": name, "pipeline_type": rnd.choice(("remediation", "analysis")),
         "critical": rnd.random() < 0.6}
        for name in ("deps", "pins", "triage")
    ]  # fmt: skip
    writers = [_run(rnd, f"r{i}", pipelines) for i in range(rnd.randint(3, 9))]
    ledger = Ledger(SQLiteStore(path), clock=FixedClock(), ids=SequentialIds())
    batch: list[AppendRequest] = []
    while writers:  # the runs interleaved, each in its own order
        w = rnd.choice(writers)
        stream, payload = w.records.pop(0)
        batch.append(AppendRequest(StreamId(stream), [ledger.event(payload, workflow_id=w.run_id)]))
        if not w.records:
            writers.remove(w)
    ledger.store.append_batch(batch)
    return ledger


def _numbers(m: RunMetrics) -> dict[str, Any]:
    """Everything a reader of the metrics sees (a group's latencies as a multiset)."""
    groups = {"overall": {"": m.overall}, "by_role": m.by_role,
              "by_pipeline_type": m.by_pipeline_type, "by_pipeline": m.by_pipeline}  # fmt: skip
    return {
        "shown": m.as_dict(),
        "latencies": {
            (kind, name): sorted(g.latencies_ms) for kind, gs in groups.items()
            for name, g in gs.items()
        },
        "pipelines": m.pipelines,
        "unresolved": dict(m.unresolved_by_pipeline_role),
    }  # fmt: skip


@pytest.mark.parametrize("seed", SEEDS)
def test_store_metrics_and_the_slo_check_agree_with_the_full_fold(
    tmp_path: Path, seed: int
) -> None:
    with _ledger(tmp_path / "l", seed) as ledger:
        full = compute_metrics(ledger.store.read_log())
        assert _numbers(store_metrics(ledger.store)) == _numbers(full)
        slo_fold = store_metrics(ledger.store, SLO_KINDS)
        assert _numbers(slo_fold)["unresolved"] == _numbers(full)["unresolved"]
        expected = slo_violations(full)
        assert slo_violations(slo_fold) == expected
        assert store_slo_violations(ledger.store) == expected
        for name in ("deps", "pins", "triage", "none"):  # the runner's check of one pipeline
            mine = [v for v in expected if v.pipeline == name]
            assert store_slo_violations(ledger.store, pipeline=name) == mine


def test_the_generated_ledgers_break_slos_and_take_runs_over(tmp_path: Path) -> None:
    """The comparison above is worth something: the ledgers it runs on break SLOs (by harm
    and by unresolved origin), leave some pipelines clean, and hold take-overs."""
    seen: dict[str, int] = {}
    for seed in SEEDS:
        with _ledger(tmp_path / f"l{seed}", seed) as ledger:
            violations = slo_violations(compute_metrics(ledger.store.read_log()))
            taken = sum(
                1
                for e in ledger.store.read_log()
                if isinstance(e.payload, RunResumed) and e.payload.taken_over_by
            )
        for v in violations:
            seen[v.metric] = seen.get(v.metric, 0) + 1
        seen["clean"] = seen.get("clean", 0) + int(not violations)
        seen["take-overs"] = seen.get("take-overs", 0) + taken
    assert all(seen.get(k, 0) >= 3 for k in ("harm_rate", "unresolved_origin", "clean",
                                             "take-overs")), seen  # fmt: skip
