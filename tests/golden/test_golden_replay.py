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

``<name>.v1.jsonl`` files are different: histories an older tracebound recorded, before a
payload type's schema version was bumped (``gated.v1``: GateRequested v1, docs/adr/0012).
``make_golden.py`` does not write them and they are never regenerated. Re-encoding their
events would write the current version's bytes, so they are imported verbatim instead
(``import_raw``, which re-hashes every record) and must verify, read upcast, and fold and
project to ``<name>.v1.expected.json``.
"""

from __future__ import annotations

import importlib.util
import json
import os
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tracebound.canonical import canonical_bytes
from tracebound.events.catalog import CostIncurred, GateRequested
from tracebound.events.envelope import Event, RecordedEvent, format_timestamp
from tracebound.events.record import RawRecord
from tracebound.ledger import Ledger
from tracebound.projections import ProjectionRunner, SQLiteViews, fold
from tracebound.projections.fold import BUILTIN_KINDS
from tracebound.projections.reports import views_snapshot, workflow_state
from tracebound.sources import FixedClock, SequentialIds
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


def _verbatim_records(name: str) -> list[RawRecord]:
    """A history's records as they were stored: the hashed body is the line without its
    hash, the payload exactly as written and the envelope's time in its one text form (the
    lines hold pydantic's spelling of it)."""
    out = []
    for line in (HERE / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        digest = bytes.fromhex(record.pop("hash"))
        record["timestamp"] = format_timestamp(datetime.fromisoformat(record["timestamp"]))
        out.append(
            RawRecord(
                record["position"], record["stream_id"], record["stream_version"],
                record["event_type"], record["workflow_id"], record["timestamp"],
                record["schema_version"], bytes.fromhex(record["prev_hash"]), digest,
                canonical_bytes(record),
            )
        )  # fmt: skip
    return out


def _final_state(
    tmp_path: Path, events: list[RecordedEvent], *, load: Any = None
) -> dict[str, Any]:
    store = SQLiteStore(tmp_path / "ledger")
    views = SQLiteViews(tmp_path / "views.db")
    try:
        (load or _replay_into)(store, events)
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


V1_NAMES = ["gated.v1"]


@pytest.mark.parametrize("name", V1_NAMES)
def test_histories_of_older_schema_versions_verify_upcast_and_fold(
    tmp_path: Path, name: str
) -> None:
    records = _verbatim_records(name)
    assert any(r.schema_version == 1 and r.event_type == "gate_requested" for r in records)
    assert any(r.schema_version == 1 and r.event_type == "cost_incurred" for r in records)
    events = _history(name)  # read as this version reads them: upcast
    assert [e.hash for e in events] == [r.hash for r in records]

    def load(store: SQLiteStore, _: list[RecordedEvent]) -> None:
        store.import_raw(records)  # every record re-hashed: the v1 bytes are what was hashed
        assert [r.body for r in store.read_raw()] == [r.body for r in records]
        report = Ledger(store, clock=FixedClock(), ids=SequentialIds()).verify(require_signed=False)
        assert report.damage is None and report.checks["chain"] == "ok"
        gates = [(e, e.payload) for e in store.read_log() if isinstance(e.payload, GateRequested)]
        assert gates and all(g.repository_wide for _, g in gates)  # ADR 0012: fail closed
        assert all(e.schema_version == GateRequested.SCHEMA_VERSION for e, _ in gates)
        # v1 spend rows (before the cache-write counts, docs/adr/0020) read as not saying them
        costs = [(e, e.payload) for e in store.read_log() if isinstance(e.payload, CostIncurred)]
        assert costs and all(c.cache_write_input_tokens is None for _, c in costs)
        assert all(e.schema_version == CostIncurred.SCHEMA_VERSION == 2 for e, _ in costs)

    state = canonical_bytes(_final_state(tmp_path, events, load=load))
    expected_path = HERE / f"{name}.expected.json"
    if REGEN:
        expected_path.write_bytes(state + b"\n")
    assert expected_path.exists(), f"run with TRACEBOUND_REGEN_GOLDEN=1 to create {expected_path}"
    assert state + b"\n" == expected_path.read_bytes()


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
            "input_cache_write": 0,
            "input_cache_write_long": 0,
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
