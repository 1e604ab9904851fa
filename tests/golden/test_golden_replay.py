"""Replay as a test primitive (ADR-0034): golden histories must reach the same final state.

Each ``tests/golden/<name>.jsonl`` is a run recorded by ``make_golden.py``. The test replays
it into a fresh ledger (checking every chain hash comes out identical), folds it, runs every
projection over it, and compares the result byte for byte, as RFC 8785 canonical JSON, with
``tests/golden/<name>.expected.json``.

A change that alters what a projection or the fold computes fails here. If the change is
intended, regenerate the expected states and review the diff::

    TRACEBOUND_REGEN_GOLDEN=1 .venv/bin/pytest tests/golden

and, when the scenarios themselves change, the histories first::

    .venv/bin/python tests/golden/make_golden.py
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tracebound.canonical import canonical_bytes
from tracebound.events.envelope import Event, RecordedEvent
from tracebound.projections import ProjectionRunner, SQLiteViews, fold
from tracebound.projections.fold import BUILTIN_KINDS
from tracebound.projections.reports import views_snapshot, workflow_state
from tracebound.store.sqlite import SQLiteStore

HERE = Path(__file__).resolve().parent
REGEN = os.environ.get("TRACEBOUND_REGEN_GOLDEN") == "1"


def _maker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_golden", HERE / "make_golden.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKER = _maker()
NAMES = list(MAKER.SCENARIOS)


def _history(name: str) -> list[RecordedEvent]:
    lines = (HERE / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [RecordedEvent.model_validate_json(line) for line in lines]


def _replay_into(store: SQLiteStore, events: list[RecordedEvent]) -> None:
    """Append the recorded events again; the rebuilt chain must match hash for hash."""
    for e in events:
        (again,) = store.append(
            e.stream_id,
            [
                Event.create(
                    e.payload,
                    event_id=e.event_id,
                    timestamp=e.timestamp,
                    workflow_id=e.workflow_id,
                    correlation_id=e.correlation_id,
                )
            ],
        )
        assert (again.position, again.hash) == (e.position, e.hash), (
            f"replay diverged at position {e.position}"
        )


def _final_state(tmp_path: Path, events: list[RecordedEvent]) -> dict[str, Any]:
    store = SQLiteStore(tmp_path / "ledger")
    views = SQLiteViews(tmp_path / "views.db")
    try:
        _replay_into(store, events)
        ProjectionRunner(store, views).run()
        workflows = sorted({e.workflow_id for e in events if e.workflow_id is not None})
        folded = {wf: fold(events, workflow_id=wf).to_dict() for wf in workflows}
        for wf in workflows:  # the materialised fold is the in-memory fold
            stored = workflow_state(views, wf)
            assert stored is not None and stored.to_dict() == folded[wf]
        return {"fold": folded, "views": views_snapshot(views)}
    finally:
        views.close()
        store.close()


@pytest.mark.parametrize("name", NAMES)
def test_replay_reaches_the_expected_state(tmp_path: Path, name: str) -> None:
    state = canonical_bytes(_final_state(tmp_path, _history(name)))
    expected_path = HERE / f"{name}.expected.json"
    if REGEN:
        expected_path.write_bytes(state + b"\n")
    assert expected_path.exists(), f"run with TRACEBOUND_REGEN_GOLDEN=1 to create {expected_path}"
    assert state + b"\n" == expected_path.read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_histories_regenerate_identically(tmp_path: Path, name: str) -> None:
    """make_golden.py is deterministic: same clock, same ids, same bytes."""
    events = MAKER.record(name, tmp_path)
    committed = [json.loads(line) for line in MAKER.history_path(name).read_text().splitlines()]
    assert events == committed


def test_golden_runs_cover_every_builtin_kind() -> None:
    seen = {e.event_type for name in NAMES for e in _history(name)}
    assert seen == BUILTIN_KINDS


def test_golden_states_are_what_the_scenarios_say() -> None:
    """The expected files are not just whatever the code produced: spot-check the meaning."""
    states = {name: json.loads((HERE / f"{name}.expected.json").read_text()) for name in NAMES}
    assert states["successful"]["fold"]["wf-successful"]["status"] == "succeeded"
    assert states["successful"]["fold"]["wf-successful"]["merge_decision"] == "merged"
    retried = states["retried"]["fold"]["wf-retried"]
    assert (retried["retries"], retried["attempts"], retried["status"]) == (1, 2, "succeeded")
    refused = states["refused"]["fold"]["wf-refused"]
    assert (refused["status"], refused["refused_cause"]) == ("refused", "policy")
    gated = states["gated"]["fold"]["wf-gated"]
    assert (gated["steps_gated"], gated["approvals"], gated["merge_decision"]) == (1, 1, "closed")
    overhead = [r for r in states["successful"]["views"]["cost_ledger"] if r["workflow_id"] == ""]
    assert overhead == [
        {
            "amount_usd": "0.1000",
            "events": 1,
            "events_without_tokens": 1,
            "first_at": overhead[0]["first_at"],
            "input_cached": 0,
            "input_uncached": 0,
            "last_at": overhead[0]["last_at"],
            "output_reasoning": 0,
            "output_visible": 0,
            "source": "index-refresh",
            "tier": "overhead",
            "tokens_in": 0,
            "tokens_out": 0,
            "workflow_id": "",
        }
    ]
