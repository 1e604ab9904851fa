"""The fold: exhaustive over the catalog (checked by mypy), pure, and right on fixture streams."""

from __future__ import annotations

import importlib
import shutil
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Literal, TypedDict, cast
from uuid import UUID

import pytest

from tracebound.events.anchor import PlanOutcomeTag
from tracebound.events.catalog import (
    BUILTIN_PAYLOAD_TYPES,
    ApprovalRecorded,
    AttemptCompleted,
    AttemptRefused,
    CostEstimate,
    CostIncurred,
    CostSource,
    MergeOutcome,
    PluginResolved,
    PluginScope,
    RetryRequested,
    Role,
    SignalKind,
    StepRecorded,
    TrustGateFailed,
)
from tracebound.events.envelope import Event, Payload
from tracebound.ids import (
    AdvisoryId,
    AttemptId,
    GateId,
    PluginId,
    RunId,
    SandboxRunId,
    Sha256Digest,
    StepId,
)
from tracebound.projections.fold import (
    BUILTIN_KINDS,
    BuiltinKind,
    WorkflowState,
    fold,
    fold_all,
    handler_for,
)

REPO = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)
ATTEMPT = AttemptId(UUID(int=7))


class _Attempt(TypedDict):
    attempt_id: AttemptId
    attempt_index: int


class _Completed(TypedDict):
    advisory_id: AdvisoryId
    outcome: PlanOutcomeTag
    cost_usd: Decimal
    duration_ms: int


class _Step(TypedDict):
    run_id: RunId
    step_id: StepId
    parent_step_id: StepId | None
    role: Role
    timestamp_start: datetime
    timestamp_end: datetime
    duration_ms: int
    artifact_hash: Sha256Digest
    cost_est: CostEstimate
    latency_ms: int
    storage: Literal["console", "file", "db"]


class _Approval(TypedDict):
    run_id: RunId
    step_id: StepId
    approver: str
    paths: tuple[str, ...]
    timestamp: datetime


def _events(*payloads: Payload, workflow: str | None = "wf-1") -> list[Event]:
    return [
        Event.create(
            p, event_id=UUID(int=i + 1), timestamp=T0 + timedelta(seconds=i), workflow_id=workflow
        )
        for i, p in enumerate(payloads)
    ]


class UserNote(Payload):
    """A user-registered kind the fold has never heard of."""

    kind: Literal["user_note"] = "user_note"
    text: str


# --- exhaustiveness ------------------------------------------------------------------------


def test_builtin_kinds_are_the_catalogs_kinds() -> None:
    catalog = {cls.model_fields["kind"].default for cls in BUILTIN_PAYLOAD_TYPES}
    assert catalog == BUILTIN_KINDS


def test_every_kind_has_a_handler() -> None:
    for kind in sorted(BUILTIN_KINDS):
        # BUILTIN_KINDS is get_args(BuiltinKind): every member is a BuiltinKind.
        assert callable(handler_for(cast(BuiltinKind, kind)))


def _mypy(files: list[Path], cache: Path) -> tuple[str, int]:
    api = pytest.importorskip("mypy.api")
    stdout, stderr, status = api.run(
        [
            "--strict",
            "--warn-unreachable",
            "--no-error-summary",
            "--show-error-codes",
            "--cache-dir",
            str(cache),
            "--config-file",
            str(REPO / "pyproject.toml"),
            *map(str, files),
        ]
    )
    return stdout + stderr, status


@pytest.mark.slow
def test_a_new_variant_without_a_handler_is_a_type_error(tmp_path: Path) -> None:
    """Adding a payload variant without handling it fails mypy, in both places it could.

    1. ``extra_union.py``: a union with one extra payload class; handing it to the fold's
       ``kind_of`` is an error, because its kind is not a ``BuiltinKind``.
    2. ``fold_extended.py``: the real fold module with one kind added to ``BuiltinKind``
       and no arm for it; ``assert_never`` in ``handler_for`` is then an error.
    ``fold_copy.py`` (the unmodified module) must check clean, or the test proves nothing.
    """
    # importlib: the package's `fold` attribute is the function, not the module.
    module = importlib.import_module("tracebound.projections.fold")
    source = Path(str(module.__file__)).read_text(encoding="utf-8")
    (tmp_path / "fold_copy.py").write_text(source)
    marker = '    "slo_alert_raised",\n]'
    assert marker in source
    extended = source.replace(marker, '    "slo_alert_raised",\n    "extra_variant",\n]')
    (tmp_path / "fold_extended.py").write_text(extended)
    (tmp_path / "extra_union.py").write_text(
        "from typing import Literal, TypeAlias\n"
        "from tracebound.events.catalog import BuiltinPayload\n"
        "from tracebound.events.envelope import Payload\n"
        "from tracebound.projections.fold import BuiltinKind, kind_of\n\n\n"
        "class ExtraVariant(Payload):\n"
        '    kind: Literal["extra_variant"] = "extra_variant"\n\n\n'
        "ExtendedPayload: TypeAlias = BuiltinPayload | ExtraVariant\n\n\n"
        "def dispatch(payload: ExtendedPayload) -> BuiltinKind:\n"
        "    return kind_of(payload)\n"
    )
    files = [tmp_path / n for n in ("fold_copy.py", "fold_extended.py", "extra_union.py")]
    out, status = _mypy(files, tmp_path / ".mypy_cache")
    assert status == 1, out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert not [e for e in errors if "fold_copy.py" in e], out
    extended_errors = [e for e in errors if "fold_extended.py" in e]
    assert any("assert_never" in e and "extra_variant" in e for e in extended_errors), out
    union_errors = [e for e in errors if "extra_union.py" in e]
    assert any("kind_of" in e and "ExtraVariant" in e for e in union_errors), out
    shutil.rmtree(tmp_path / ".mypy_cache", ignore_errors=True)


# --- behaviour -----------------------------------------------------------------------------


def test_fold_is_pure_and_repeatable() -> None:
    events = _events(
        PluginResolved(
            plugin_id=PluginId("p"),
            extends_chain=(),
            matched_scope=PluginScope("s"),
            fallback_used=True,
        ),
        CostIncurred(tier="direct", amount_usd=Decimal("0.10"), source=CostSource("llm")),
        CostIncurred(tier="direct", amount_usd=Decimal("0.20"), source=CostSource("llm")),
    )
    before = [e.model_dump() for e in events]
    first, second = fold(events), fold(events)
    assert first == second
    assert [e.model_dump() for e in events] == before  # the input is not touched
    assert first.cost_usd == Decimal("0.30")  # exact: 0.1 + 0.2 as floats is not 0.3
    assert (first.plugin_id, first.fallback_used) == ("p", True)
    assert (first.events, first.first_position, first.last_position) == (3, 1, 3)


def test_retry_then_success_then_merge() -> None:
    at: _Attempt = {"attempt_id": ATTEMPT, "attempt_index": 0}
    retry: _Attempt = {"attempt_id": AttemptId(UUID(int=8)), "attempt_index": 1}
    completed: _Completed = {
        "advisory_id": AdvisoryId("GHSA-1"),
        "outcome": "AppliedFromLlm",
        "cost_usd": Decimal("0.01"),
        "duration_ms": 5,
    }
    state = fold(
        _events(
            TrustGateFailed(
                gate=GateId("tests"),
                failing_signals=(SignalKind("t"),),
                score=100,
                retry_count=0,
            ),
            RetryRequested(
                **at,
                gate=GateId("tests"),
                sandbox_run_id=SandboxRunId("s"),
                failing_signals=(SignalKind("t"),),
                summary_pointer=Sha256Digest("sha256:" + "0" * 64),
            ),
            AttemptCompleted(**at, **completed, trust_outcome_passed=False),
            AttemptCompleted(**retry, **completed, trust_outcome_passed=True),
            MergeOutcome(pr_url="u", decision="merged", reviewer=None),
        )
    )
    assert (state.status, state.retries, state.attempts, state.gates_failed) == (
        "succeeded",
        1,
        2,
        1,
    )
    assert state.merge_decision == "merged"


def test_refusal_is_terminal() -> None:
    at: _Attempt = {"attempt_id": ATTEMPT, "attempt_index": 2}
    state = fold(_events(AttemptRefused(**at, cause="retry_limit", reason="three strikes")))
    assert (state.status, state.refused_cause, state.attempts) == ("refused", "retry_limit", 3)


def test_gate_waits_for_approval_and_rejection_is_terminal() -> None:
    step: _Step = {
        "run_id": RunId("r"),
        "step_id": StepId("s"),
        "parent_step_id": None,
        "role": "Executor",
        "timestamp_start": T0,
        "timestamp_end": T0,
        "duration_ms": 0,
        "artifact_hash": Sha256Digest("sha256:" + "0" * 64),
        "cost_est": CostEstimate.model_validate({"prompt_tokens": 1, "compute_usd_est": "0"}),
        "latency_ms": 0,
        "storage": "db",
    }
    approval: _Approval = {
        "run_id": RunId("r"),
        "step_id": StepId("s"),
        "approver": "a",
        "paths": (),
        "timestamp": T0,
    }
    gated = _events(StepRecorded(**step, status="gated"))
    assert fold(gated).status == "awaiting_approval"
    approved = [*gated, *_events(ApprovalRecorded(**approval, decision="approved"))]
    assert fold(approved).status == "running"
    rejected = [*gated, *_events(ApprovalRecorded(**approval, decision="rejected"))]
    assert fold(rejected).status == "rejected"


def test_unknown_kinds_are_counted_not_fatal() -> None:
    records = [
        {
            "event_type": "user_note",
            "payload": {"kind": "user_note", "text": "hi"},
            "workflow_id": "wf-1",
            "position": 1,
            "timestamp": "2026-01-01T00:00:00.000000Z",
        },
    ]
    state = fold(records)
    assert (state.events, state.other_events, state.status) == (1, 1, "running")


def test_fold_filters_by_workflow_and_fold_all_groups() -> None:
    a = _events(
        CostIncurred(tier="direct", amount_usd=Decimal(1), source=CostSource("x")), workflow="a"
    )
    b = _events(
        CostIncurred(tier="direct", amount_usd=Decimal(2), source=CostSource("x")), workflow="b"
    )
    mixed = [a[0], b[0]]
    assert fold(mixed, workflow_id="b").cost_usd == Decimal(2)
    states = fold_all(mixed)
    assert {k: v.cost_usd for k, v in states.items()} == {"a": Decimal(1), "b": Decimal(2)}


def test_state_round_trips_through_json_data() -> None:
    state = WorkflowState(workflow_id="w", cost_usd=Decimal("1.2300"), fallback_used=False)
    assert WorkflowState.from_dict(state.to_dict()) == state
    assert state.to_dict()["cost_usd"] == "1.2300"
