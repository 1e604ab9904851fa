"""The retry loop's cross-side contracts, snapshotted: a change to any of them is loud.

ADR-0002 makes ``prior_attempts`` a default-empty keyword argument on ``FallbackTier.run``
and ``ApplyContext``; the GateRunner's surface is what the loop binds. If a snapshot
differs, the change is either a mistake or needs an ADR amendment; in the second case
regenerate with ``TRACEBOUND_REGENERATE_SNAPSHOTS=1`` and commit the new snapshot with it.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tracebound.pipeline.fallback import ApplyContext, FallbackTier
from tracebound.pipeline.retry.gates import GateRunner
from tracebound.pipeline.retry.models import AttemptSummary, FailingSignal, TrustOutcome

SNAPSHOT = Path(__file__).with_name("contract_snapshots.json")


def _signature(obj: Any) -> str:
    return str(inspect.signature(obj))


def _fields(model: Any) -> dict[str, str]:
    return {
        name: f"{field.annotation!r} = {field.default!r}" if not field.is_required()
        else repr(field.annotation)
        for name, field in model.model_fields.items()
    }  # fmt: skip


def current() -> dict[str, Any]:
    runner_methods = ("verify", "anchor_hook", "record_attempt", "request_retry", "refuse")
    return {
        "FallbackTier.__init__": _signature(FallbackTier.__init__),
        "FallbackTier.run": _signature(FallbackTier.run),
        "ApplyContext": _fields(ApplyContext),
        "GateRunner.__init__": _signature(GateRunner.__init__),
        **{f"GateRunner.{m}": _signature(getattr(GateRunner, m)) for m in runner_methods},
        "AttemptSummary": _fields(AttemptSummary),
        "FailingSignal": _fields(FailingSignal),
        "TrustOutcome": _fields(TrustOutcome),
    }


def test_contracts_match_their_snapshot() -> None:
    now = current()
    if os.environ.get("TRACEBOUND_REGENERATE_SNAPSHOTS"):
        SNAPSHOT.write_text(json.dumps(now, indent=2, sort_keys=True) + "\n")
    recorded = json.loads(SNAPSHOT.read_text())
    changed = sorted(k for k in {*recorded, *now} if recorded.get(k) != now.get(k))
    assert not changed, (
        f"contract changed: {changed}. If intended, amend the ADR and regenerate with "
        "TRACEBOUND_REGENERATE_SNAPSHOTS=1 .venv/bin/pytest "
        "tests/unit/retry/test_contract_snapshots.py"
    )


def test_prior_attempts_is_a_default_empty_keyword() -> None:
    param = inspect.signature(FallbackTier.run).parameters["prior_attempts"]
    assert param.kind is inspect.Parameter.KEYWORD_ONLY
    assert param.default == []
    assert ApplyContext.model_fields["prior_attempts"].default == []


def test_the_snapshot_test_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(self: FallbackTier, ctx: ApplyContext, *, prior_failure_log: str = "") -> None: ...

    monkeypatch.setattr(FallbackTier, "run", run)
    assert current()["FallbackTier.run"] != json.loads(SNAPSHOT.read_text())["FallbackTier.run"]
