"""The built-in catalog: the pinned set of kinds, and that every payload survives both trips.

The two trips are the ones the product makes: ``Event`` → JSON-mode dict → ``Event`` (what an
API or export does), and canonical record bytes → JSON → registry decode (what the ledger
does). Both must give back an equal payload and, for the ledger, the same bytes again.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from tracebound.canonical import canonical_bytes
from tracebound.errors import UpcastError, ValidationFailed
from tracebound.events import Event, EventRegistry, Payload, default_registry
from tracebound.events.anchor import AttemptAnchor
from tracebound.events.catalog import (
    BUILTIN_PAYLOAD_TYPES,
    PHASE4_ATTEMPT_TYPES,
    AdapterDegraded,
    ApprovalRecorded,
    AttemptAnchorRecorded,
    AttemptCompleted,
    AttemptPayload,
    AttemptRefused,
    BlameAssigned,
    BlobErased,
    BudgetPrecharged,
    BudgetPrechecked,
    BudgetReconciled,
    BuiltinPayload,
    CostEstimate,
    CostIncurred,
    CostSource,
    GateRequested,
    LeafInvoked,
    LeafReturned,
    MergeOutcome,
    PlanOutcomeEmitted,
    PluginResolved,
    PluginScope,
    PrimitiveName,
    PromptBuilt,
    ProvenanceClassified,
    RagDegraded,
    RagHit,
    RagMiss,
    RepairAttempted,
    RetryRequested,
    RouteChosen,
    RunFinished,
    RunResumed,
    RunStarted,
    SignalKind,
    SloAlertRaised,
    SolutionFound,
    StepRecorded,
    TransformBuilt,
    TrustGateFailed,
    TrustGatePassed,
    ValidationRecorded,
    Validations,
)
from tracebound.events.record import event_prefix
from tracebound.ids import (
    AdapterId,
    AdvisoryId,
    AttemptId,
    ChainHead,
    GateId,
    PatchDigest,
    PluginId,
    PromptDigest,
    RagRecordId,
    ResponseDigest,
    RunId,
    SandboxRunId,
    Sha256Digest,
    StepId,
    WorkflowId,
)

EXPECTED_KINDS = [
    "adapter_degraded",
    "approval_recorded",
    "attempt_anchor_recorded",
    "attempt_completed",
    "attempt_refused",
    "blob_erased",
    "budget_precharged",
    "budget_prechecked",
    "budget_reconciled",
    "cost_incurred",
    "leaf_invoked",
    "leaf_returned",
    "merge_outcome",
    "plan_outcome_emitted",
    "plugin_resolved",
    "prompt_built",
    "provenance_classified",
    "rag_degraded",
    "rag_hit",
    "rag_miss",
    "retry_requested",
    "solution_found",
    "step_recorded",
    "transform_built",
    "trust_gate_failed",
    "trust_gate_passed",
]

T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)
ATTEMPT = AttemptId(UUID("0b4e7c1e-6d0a-4f43-9a57-6f1f3b2a9c10"))
HEAD = ChainHead(bytes(range(32)))  # not valid UTF-8 once past 0x7f: must travel as hex
HIGH_HEAD = ChainHead(bytes(range(224, 256)))
PROMPT = PromptDigest("ab" * 32)
RESPONSE = ResponseDigest("cd" * 32)
PATCH = PatchDigest("ef" * 32)
BLOB = Sha256Digest("sha256:" + "01" * 32)


def _anchor(**overrides: Any) -> AttemptAnchor:
    fields: dict[str, Any] = {
        "attempt_id": ATTEMPT,
        "workflow_id": WorkflowId("wf-42"),
        "attempt_index": 1,
        "advisory_id": AdvisoryId("GHSA-xxxx-yyyy-zzzz"),
        "prompt_digest_blake3": PROMPT,
        "retrieved_evidence_chain_head": HIGH_HEAD,
        "retrieved_record_ids": (RagRecordId("rec-1"), RagRecordId("rec-2")),
        "plan_proposal_kind": "apply_transform",
        "response_digest_blake3": RESPONSE,
        "validator_outcome": "AppliedFromLlm",
        "tokens_in": 1200,
        "tokens_out": 300,
        "cost_usd": Decimal("0.0213"),
        "timestamp_utc": T0,
        "extras": {"phase7.base_image": "distroless"},
    }
    fields.update(overrides)
    return AttemptAnchor(**fields)


def _samples() -> list[Payload]:
    at: dict[str, Any] = {"attempt_id": ATTEMPT, "attempt_index": 1}
    return [
        ProvenanceClassified(**at, advisory_id=AdvisoryId("GHSA-1"), provenance="retrieval"),
        BudgetPrechecked(
            **at, estimated_usd=Decimal("0.02"), available_usd=Decimal("-0.5"), allowed=False
        ),
        RagHit(**at, record_ids=(RagRecordId("rec-1"),), evidence_chain_head=HEAD),
        RagDegraded(**at, reason="index stale"),
        RagDegraded(
            **at,
            reason="timeout after 2 of 5 shards",
            record_ids=(RagRecordId("rec-9"),),
            evidence_chain_head=HIGH_HEAD,
        ),
        RagMiss(**at, evidence_chain_head=HEAD),
        RagMiss(**at, evidence_chain_head=None, bypassed=True),
        PromptBuilt(**at, prompt_digest_blake3=PROMPT, prompt_bytes=4096, prior_attempt_count=1),
        PromptBuilt(**at, prompt_digest_blake3=PROMPT, prompt_bytes=1, prompt_pointer=BLOB),
        BudgetPrecharged(**at, precharged_usd=Decimal("0.05"), model="gpt-5"),
        LeafInvoked(**at, model="gpt-5", prompt_digest_blake3=PROMPT),
        LeafReturned(
            **at,
            model="gpt-5",
            response_digest_blake3=RESPONSE,
            tokens_in=1200,
            tokens_out=300,
            cached_input_tokens=1000,
            reasoning_tokens=120,
        ),
        BudgetReconciled(
            **at,
            precharged_usd=Decimal("0.05"),
            actual_usd=Decimal("0.0213"),
            remaining_usd=Decimal("4.9787"),
            tokens_in=1200,
            tokens_out=300,
        ),
        TransformBuilt(**at, patch_digest_blake3=PATCH, files_changed=3, patch_pointer=BLOB),
        PlanOutcomeEmitted(**at, plan_proposal_kind="apply_transform", outcome="AppliedFromLlm"),
        PlanOutcomeEmitted(
            **at, plan_proposal_kind="refuse", outcome="Refused", refusal_reason="no safe patch"
        ),
        AttemptAnchorRecorded(anchor=_anchor()),
        AttemptAnchorRecorded(
            anchor=_anchor(
                retrieved_evidence_chain_head=None,
                retrieved_record_ids=(),
                validator_outcome="Refused",
                refusal_reason="budget",
                extras={},
            ).attach_trust_outcome(passed=False, confidence="low")
        ),
        RetryRequested(
            **at,
            gate=GateId("tests"),
            sandbox_run_id=SandboxRunId("sbx-7"),
            failing_signals=(SignalKind("tests_pass"), SignalKind("lint")),
            summary_pointer=BLOB,
        ),
        AttemptRefused(**at, cause="retry_limit", reason="three attempts failed the gate"),
        PluginResolved(
            plugin_id=PluginId("npm-express"),
            extends_chain=(PluginId("npm"), PluginId("universal")),
            matched_scope=PluginScope("npm/express"),
            fallback_used=False,
        ),
        AdapterDegraded(
            primitive=PrimitiveName("references"),
            primary_adapter=AdapterId("scip"),
            primary_confidence=4_250,
            fallback_adapter=AdapterId("tree-sitter"),
        ),
        AdapterDegraded(
            primitive=PrimitiveName("definitions"),
            primary_adapter=AdapterId("scip"),
            primary_confidence=0,
            fallback_adapter=None,
        ),
        TrustGatePassed(
            gate=GateId("trust"),
            signals={
                SignalKind("tests_pass"): True,
                SignalKind("coverage_bp"): 8_125,
                SignalKind("sast"): "clean",
            },
            score=9_000,
        ),
        TrustGateFailed(
            gate=GateId("trust"),
            failing_signals=(SignalKind("tests_pass"),),
            score=1_500,
            retry_count=2,
        ),
        CostIncurred(tier="direct", amount_usd=Decimal("0.0213"), source=CostSource("llm")),
        CostIncurred(
            tier="amortized",
            amount_usd=Decimal("1E+2"),
            source=CostSource("llm"),
            tokens_in=1200,
            tokens_out=300,
            cached_input_tokens=1000,
            reasoning_tokens=120,
            model="gpt-5",
            role="Executor",
            step_id=StepId("step-2"),
        ),
        MergeOutcome(pr_url="https://example.test/pr/1", decision="merged", reviewer="alice"),
        MergeOutcome(pr_url="https://example.test/pr/2", decision="closed", reviewer=None),
        SolutionFound(
            **at,
            advisory_id=AdvisoryId("GHSA-1"),
            patch_digest_blake3=PATCH,
            outcome="AppliedFromRecipe",
        ),
        AttemptCompleted(
            **at,
            advisory_id=AdvisoryId("GHSA-1"),
            outcome="Refused",
            trust_outcome_passed=None,
            cost_usd=Decimal(0),
            duration_ms=12_000,
        ),
        StepRecorded(
            run_id=RunId("5f0c8a3e-0000-4000-8000-000000000001"),
            step_id=StepId("step-2"),
            parent_step_id=StepId("step-1"),
            role="Executor",
            timestamp_start=T0,
            timestamp_end=T0 + timedelta(milliseconds=850),
            duration_ms=850,
            artifact_hash=BLOB,
            payload_pointer="blob://sha256/01",
            status="error",
            error_origin=StepId("step-1"),
            cost_est=CostEstimate(prompt_tokens=1200, compute_usd_est=Decimal("0.02")),
            latency_ms=850,
            validations=Validations(ran=("schema-validation",), failed=("security-scan",)),
            storage="db",
            redaction_reason="api key in prompt",
            scopes_granted=("repo:read",),
        ),
        StepRecorded(
            run_id=RunId("run-1"),
            step_id=StepId("step-1"),
            parent_step_id=None,
            role="Planner",
            timestamp_start=T0,
            timestamp_end=T0,
            duration_ms=0,
            artifact_hash=BLOB,
            status="gated",
            cost_est=CostEstimate(prompt_tokens=0, compute_usd_est=Decimal(0)),
            latency_ms=0,
            storage="console",
        ),
        ApprovalRecorded(
            run_id=RunId("run-1"),
            step_id=StepId("step-1"),
            approver="@org/security",
            decision="approved",
            paths=("src/auth.py",),
            timestamp=T0,
        ),
        BlobErased(digest=BLOB, reason="GDPR erasure request 2026-17"),
        RunStarted(
            run_id=RunId("run-1"),
            pipeline="remediate",
            pipeline_type="remediation",
            critical=True,
            pipeline_ref="examples.remediation:pipeline",
            inputs_digest=BLOB,
            inputs_pointer=f"blob://{BLOB}",
        ),
        RunFinished(
            run_id=RunId("run-1"),
            status="failed",
            failed_step=StepId("step-1"),
            reason="required validations failed: unit-tests",
        ),
        GateRequested(
            run_id=RunId("run-1"),
            step_id=StepId("step-1"),
            role="Executor",
            reasons=("sensitive_paths: touches policy-sensitive files",),
            paths=("requirements.txt",),
            owners=("@security-lead",),
            repository_wide=False,
        ),
        RunResumed(run_id=RunId("run-1"), step_id=StepId("step-1"), decision="approved"),
        ValidationRecorded(
            run_id=RunId("run-1"),
            step_id=StepId("step-1"),
            name="unit-tests",
            check="command",
            passed=False,
            exit_code=1,
            duration_ms=812,
            output_digest=BLOB,
            detail="exit code 1",
        ),
        BlameAssigned(
            run_id=RunId("run-1"),
            detected_by=StepId("critique"),
            failed_step_id=StepId("execute"),
            failed_role="Executor",
            origin_step_id=None,
            origin_role=None,
            reason="output contradicts the plan",
            harmful=True,
        ),
        RepairAttempted(
            run_id=RunId("run-1"),
            origin_step_id=StepId("execute"),
            repair_step_id=StepId("execute~r1"),
            attempt=1,
            succeeded=True,
        ),
        RouteChosen(
            run_id=RunId("run-1"),
            step_id=StepId("route"),
            chosen="fast",
            alternatives=("fast", "careful"),
            reason="cost SLO threatened",
        ),
        SloAlertRaised(
            pipeline="remediate",
            pipeline_type="remediation",
            metric="harm_rate",
            value="0.25",
            threshold="0",
        ),
    ]


SAMPLES = _samples()


def _id(payload: Payload) -> str:
    return payload.kind


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# --- the set of kinds ------------------------------------------------------------------------


RUNTIME_KINDS = [
    "blame_assigned",
    "gate_requested",
    "repair_attempted",
    "route_chosen",
    "run_finished",
    "run_resumed",
    "run_started",
    "slo_alert_raised",
    "validation_recorded",
]


def test_fresh_interpreter_registers_exactly_the_builtin_kinds() -> None:
    # In a fresh process, because other tests (and users) add their own types in-process.
    code = "import json, tracebound.events as e; print(json.dumps(e.default_registry().kinds()))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    # and the ledger's own key rotation (ADR 0017), outside the workflow union
    assert json.loads(out) == sorted([*EXPECTED_KINDS, *RUNTIME_KINDS, "signing_key_rotated"])
    assert set(RUNTIME_KINDS) <= set(EXPECTED_KINDS + RUNTIME_KINDS)


def test_builtin_types_are_registered_under_their_kind() -> None:
    kinds = [cls.model_fields["kind"].default for cls in BUILTIN_PAYLOAD_TYPES]
    assert sorted(kinds) == sorted(EXPECTED_KINDS + RUNTIME_KINDS)
    for cls in BUILTIN_PAYLOAD_TYPES:
        assert default_registry().get(cls.model_fields["kind"].default) is cls


def test_union_and_tuple_hold_the_same_types() -> None:
    adapter_kinds = {cls.model_fields["kind"].default for cls in BUILTIN_PAYLOAD_TYPES}
    expected = EXPECTED_KINDS + RUNTIME_KINDS
    assert len(BUILTIN_PAYLOAD_TYPES) == len(set(BUILTIN_PAYLOAD_TYPES)) == len(expected)
    assert adapter_kinds == set(expected)
    assert all(issubclass(cls, Payload) for cls in BUILTIN_PAYLOAD_TYPES)


@pytest.mark.parametrize("cls", BUILTIN_PAYLOAD_TYPES, ids=lambda c: c.__name__)
def test_kind_is_the_snake_case_class_name(cls: type[Payload]) -> None:
    assert cls.model_fields["kind"].default == _snake(cls.__name__)


@pytest.mark.parametrize("cls", BUILTIN_PAYLOAD_TYPES, ids=lambda c: c.__name__)
def test_every_builtin_is_frozen_closed_and_float_free(cls: type[Payload]) -> None:
    assert cls.model_config.get("frozen") is True
    assert cls.model_config.get("extra") == "forbid"
    # A fresh registry applies the same float check the default one did at import.
    assert EventRegistry().register(cls) is cls
    schema = json.dumps(cls.model_json_schema(mode="serialization"))
    assert '"number"' not in schema


def test_samples_cover_every_builtin_type() -> None:
    assert {type(p) for p in SAMPLES} == set(BUILTIN_PAYLOAD_TYPES)


def test_phase4_attempt_frame_ends_with_the_anchor() -> None:
    assert PHASE4_ATTEMPT_TYPES[-1] is AttemptAnchorRecorded
    assert set(PHASE4_ATTEMPT_TYPES) <= set(BUILTIN_PAYLOAD_TYPES)
    for cls in PHASE4_ATTEMPT_TYPES[:-1]:
        assert issubclass(cls, AttemptPayload)


@pytest.mark.parametrize("payload", SAMPLES, ids=_id)
def test_attempt_scoped_payloads_expose_the_join_key(payload: Payload) -> None:
    if isinstance(payload, AttemptPayload | AttemptAnchorRecorded):
        assert payload.attempt_id == ATTEMPT
        assert payload.attempt_index == 1


# --- round trips --------------------------------------------------------------------------


def _event(payload: Payload, n: int = 1) -> Event:
    return Event.create(
        payload,
        event_id=UUID(int=n),
        timestamp=T0,
        workflow_id="wf-42",
        correlation_id="corr-1",
    )


@pytest.mark.parametrize("payload", SAMPLES, ids=_id)
def test_event_round_trips_through_json_mode_dict(payload: Payload) -> None:
    event = _event(payload)
    dumped = event.model_dump(mode="json")
    json.dumps(dumped)  # plain JSON data, nothing Python-only left in it
    again = Event.model_validate(dumped)
    assert again == event
    assert type(again.payload) is type(payload)


@pytest.mark.parametrize("payload", SAMPLES, ids=_id)
def test_event_round_trips_through_json_text(payload: Payload) -> None:
    event = _event(payload)
    assert Event.model_validate_json(event.model_dump_json()) == event


@pytest.mark.parametrize("payload", SAMPLES, ids=_id)
def test_payload_round_trips_through_canonical_record_bytes(payload: Payload) -> None:
    event = _event(payload)
    prefix = event_prefix(event)
    record = json.loads(prefix + b"}")  # the prefix is the record up to its payload
    assert record["event_type"] == payload.kind
    version = type(payload).SCHEMA_VERSION
    decoded = default_registry().decode_payload(record["event_type"], version, record["payload"])
    assert decoded == payload
    # And the decoded payload hashes to the same bytes: no drift on a second write.
    assert event_prefix(_event(decoded)) == prefix


@pytest.mark.parametrize("payload", SAMPLES, ids=_id)
def test_builtin_union_round_trips_with_one_type_adapter(payload: Payload) -> None:
    adapter: TypeAdapter[BuiltinPayload] = TypeAdapter(BuiltinPayload)
    assert adapter.validate_json(adapter.dump_json(payload)) == payload  # type: ignore[arg-type]


# --- hash-safe encodings --------------------------------------------------------------------


def _payload_json(payload: Payload) -> dict[str, Any]:
    data: dict[str, Any] = payload.model_dump(mode="json")
    return data


def test_money_is_a_plain_decimal_string() -> None:
    cost = CostIncurred(tier="direct", amount_usd=Decimal("1E+2"), source=CostSource("llm"))
    assert _payload_json(cost)["amount_usd"] == "100"
    tiny = CostIncurred(tier="direct", amount_usd=Decimal("1E-7"), source=CostSource("llm"))
    assert _payload_json(tiny)["amount_usd"] == "0.0000001"
    zero = CostIncurred(tier="direct", amount_usd=Decimal("-0.00"), source=CostSource("llm"))
    assert _payload_json(zero)["amount_usd"] == "0.00"


@pytest.mark.parametrize("bad", [0.1, 1.0, True, "NaN", "Infinity", "-0.01", "ten"])
def test_money_refuses_floats_non_finite_and_negative(bad: object) -> None:
    with pytest.raises(ValidationError):
        CostIncurred.model_validate({"tier": "direct", "amount_usd": bad, "source": "llm"})


def test_signed_money_may_be_negative() -> None:
    check = BudgetPrechecked(
        attempt_id=ATTEMPT,
        attempt_index=0,
        estimated_usd=Decimal(1),
        available_usd=Decimal("-2.5"),
        allowed=False,
    )
    assert _payload_json(check)["available_usd"] == "-2.5"


@pytest.mark.parametrize("bad", [-1, 10_001, True, 0.5])
def test_basis_points_are_integers_in_range(bad: object) -> None:
    with pytest.raises(ValidationError):
        TrustGateFailed.model_validate(
            {"gate": "g", "failing_signals": ["s"], "score": bad, "retry_count": 0}
        )


def test_chain_head_is_hex_in_json_and_bytes_in_python() -> None:
    hit = RagHit(
        attempt_id=ATTEMPT,
        attempt_index=0,
        record_ids=(RagRecordId("r"),),
        evidence_chain_head=HEAD,
    )
    assert _payload_json(hit)["evidence_chain_head"] == HEAD.hex()
    assert RagHit.model_validate(_payload_json(hit)).evidence_chain_head == HEAD


@pytest.mark.parametrize("bad", [b"\x00" * 31, "AB" * 32, "zz" * 32, "ab" * 31])
def test_chain_head_must_be_32_bytes_of_lower_hex(bad: object) -> None:
    with pytest.raises(ValidationError):
        RagHit.model_validate(
            {
                "attempt_id": str(ATTEMPT),
                "attempt_index": 0,
                "record_ids": ["r"],
                "evidence_chain_head": bad,
            }
        )


def test_payload_timestamps_are_normalised_to_utc_and_one_text_form() -> None:
    plus_two = timezone(timedelta(hours=2))
    approval = ApprovalRecorded(
        run_id=RunId("r"),
        step_id=StepId("s"),
        approver="alice",
        decision="rejected",
        paths=(),
        timestamp=datetime(2026, 5, 18, 14, 0, tzinfo=plus_two),
    )
    assert approval.timestamp == T0
    assert approval.timestamp.tzinfo is UTC
    assert _payload_json(approval)["timestamp"] == "2026-05-18T12:00:00.000000Z"


def test_naive_payload_timestamps_are_rejected() -> None:
    with pytest.raises(ValidationError):
        ApprovalRecorded(
            run_id=RunId("r"),
            step_id=StepId("s"),
            approver="alice",
            decision="approved",
            paths=(),
            timestamp=datetime(2026, 5, 18, 12, 0),
        )


def test_digests_are_checked_on_construction() -> None:
    with pytest.raises(ValidationError):
        BlobErased(digest=Sha256Digest("sha256:XYZ"), reason="r")
    with pytest.raises(ValidationError):
        LeafInvoked(
            attempt_id=ATTEMPT,
            attempt_index=0,
            model="m",
            prompt_digest_blake3=PromptDigest("ab" * 16),
        )


# --- invariants ---------------------------------------------------------------------------


def test_payloads_are_frozen_and_closed() -> None:
    blob = BlobErased(digest=BLOB, reason="r")
    with pytest.raises(ValidationError):
        blob.reason = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        BlobErased.model_validate({"digest": BLOB, "reason": "r", "by": "mallory"})


def test_signal_mapping_is_read_only() -> None:
    passed = TrustGatePassed(
        gate=GateId("g"), signals={SignalKind("tests_pass"): True}, score=10_000
    )
    with pytest.raises(TypeError):
        passed.signals[SignalKind("tests_pass")] = False  # type: ignore[index]
    assert _payload_json(passed)["signals"] == {"tests_pass": True}


def test_signal_values_keep_their_json_type() -> None:
    passed = TrustGatePassed.model_validate(
        {"gate": "g", "signals": {"a": True, "b": 1, "c": "1"}, "score": 1}
    )
    assert passed.signals == {"a": True, "b": 1, "c": "1"}
    assert type(passed.signals[SignalKind("a")]) is bool
    assert type(passed.signals[SignalKind("b")]) is int
    with pytest.raises(ValidationError):
        TrustGatePassed.model_validate({"gate": "g", "signals": {"a": 0.5}, "score": 1})


def test_cached_and_reasoning_tokens_are_parts_of_the_totals() -> None:
    base = {
        "attempt_id": ATTEMPT,
        "attempt_index": 0,
        "model": "m",
        "response_digest_blake3": RESPONSE,
        "tokens_in": 10,
        "tokens_out": 5,
    }
    LeafReturned.model_validate({**base, "cached_input_tokens": 10, "reasoning_tokens": 5})
    with pytest.raises(ValidationError, match="cached_input_tokens"):
        LeafReturned.model_validate({**base, "cached_input_tokens": 11})
    with pytest.raises(ValidationError, match="reasoning_tokens"):
        LeafReturned.model_validate({**base, "reasoning_tokens": 6})


def test_cost_breakdown_needs_the_total_it_is_part_of() -> None:
    with pytest.raises(ValidationError, match="cached_input_tokens"):
        CostIncurred(
            tier="direct",
            amount_usd=Decimal(1),
            source=CostSource("llm"),
            cached_input_tokens=5,
        )
    with pytest.raises(ValidationError, match="reasoning_tokens"):
        CostIncurred(
            tier="direct",
            amount_usd=Decimal(1),
            source=CostSource("llm"),
            tokens_out=3,
            reasoning_tokens=4,
        )


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [("Refused", None), ("AppliedFromRecipe", "because")],
)
def test_plan_outcome_has_a_reason_iff_refused(outcome: str, reason: str | None) -> None:
    with pytest.raises(ValidationError, match="refusal_reason"):
        PlanOutcomeEmitted.model_validate(
            {
                "attempt_id": ATTEMPT,
                "attempt_index": 0,
                "plan_proposal_kind": "refuse",
                "outcome": outcome,
                "refusal_reason": reason,
            }
        )


def test_bypassed_retrieval_has_no_chain_head() -> None:
    with pytest.raises(ValidationError, match="bypassed"):
        RagMiss(attempt_id=ATTEMPT, attempt_index=0, evidence_chain_head=HEAD, bypassed=True)


def test_rag_hit_needs_a_record() -> None:
    with pytest.raises(ValidationError):
        RagHit(attempt_id=ATTEMPT, attempt_index=0, record_ids=(), evidence_chain_head=HEAD)


def test_step_cannot_end_before_it_starts() -> None:
    with pytest.raises(ValidationError, match="timestamp_end"):
        StepRecorded(
            run_id=RunId("r"),
            step_id=StepId("s"),
            parent_step_id=None,
            role="Critic",
            timestamp_start=T0,
            timestamp_end=T0 - timedelta(microseconds=1),
            duration_ms=0,
            artifact_hash=BLOB,
            status="success",
            cost_est=CostEstimate(prompt_tokens=0, compute_usd_est=Decimal(0)),
            latency_ms=0,
            storage="file",
        )


def test_step_role_and_status_are_closed_sets() -> None:
    step = next(p for p in SAMPLES if isinstance(p, StepRecorded))
    good = _payload_json(step)
    assert good["role"] == "Executor"
    for field, value in (("role", "Janitor"), ("status", "ok"), ("storage", "s3")):
        with pytest.raises(ValidationError):
            StepRecorded.model_validate({**good, field: value})


def test_attempt_index_cannot_be_negative() -> None:
    with pytest.raises(ValidationError):
        AttemptRefused(attempt_id=ATTEMPT, attempt_index=-1, cause="policy", reason="r")


# --- property-based round trips -------------------------------------------------------------

_hex64 = st.binary(min_size=32, max_size=32).map(bytes.hex)
_money = st.decimals(min_value=0, max_value=10**9, allow_nan=False, allow_infinity=False, places=6)
_text = st.text(min_size=1, max_size=40)
_count = st.integers(min_value=0, max_value=2**53 - 1)


@st.composite
def _leaf_returned(draw: st.DrawFn) -> LeafReturned:
    tokens_in = draw(_count)
    tokens_out = draw(_count)
    return LeafReturned(
        attempt_id=AttemptId(draw(st.uuids())),
        attempt_index=draw(st.integers(min_value=0, max_value=100)),
        model=draw(_text),
        response_digest_blake3=ResponseDigest(draw(_hex64)),
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        cached_input_tokens=draw(st.integers(min_value=0, max_value=tokens_in)),
        reasoning_tokens=draw(st.integers(min_value=0, max_value=tokens_out)),
    )


_cost_incurred = st.builds(
    CostIncurred,
    tier=st.sampled_from(["direct", "amortized", "overhead"]),
    amount_usd=_money,
    source=_text.map(CostSource),
    model=st.none() | _text,
    role=st.none() | st.sampled_from(["Planner", "Executor", "Critic", "Reviewer", "Router"]),
)

_trust_gate_passed = st.builds(
    TrustGatePassed,
    gate=_text.map(GateId),
    signals=st.dictionaries(
        _text.map(SignalKind), st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text()
    ),
    score=st.integers(min_value=0, max_value=10_000),
)

_budget_reconciled = st.builds(
    BudgetReconciled,
    attempt_id=st.uuids().map(AttemptId),
    attempt_index=st.integers(min_value=0, max_value=10),
    precharged_usd=_money,
    actual_usd=_money,
    remaining_usd=st.decimals(
        min_value=-(10**6), max_value=10**6, allow_nan=False, allow_infinity=False, places=4
    ),
    tokens_in=_count,
    tokens_out=_count,
)

_step_times = st.datetimes(
    min_value=datetime(2000, 1, 1),
    max_value=datetime(2100, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7)), timezone(timedelta(hours=5))]),
)

_approval = st.builds(
    ApprovalRecorded,
    run_id=_text.map(RunId),
    step_id=_text.map(StepId),
    approver=_text,
    decision=st.sampled_from(["approved", "rejected"]),
    paths=st.lists(_text, max_size=4).map(tuple),
    timestamp=_step_times,
)

_generated = st.one_of(
    _leaf_returned(), _cost_incurred, _trust_gate_passed, _budget_reconciled, _approval
)


@given(payload=_generated, n=st.integers(min_value=0, max_value=2**64))
def test_generated_payloads_round_trip_both_ways(payload: Payload, n: int) -> None:
    event = _event(payload, n)
    assert Event.model_validate(event.model_dump(mode="json")) == event
    record = json.loads(event_prefix(event) + b"}")
    decoded = default_registry().decode_payload(payload.kind, 1, record["payload"])
    assert decoded == payload
    assert canonical_bytes(decoded.model_dump(mode="json")) == canonical_bytes(record["payload"])


# --- GateRequested v2 (docs/adr/0012) ---------------------------------------------------------

GATE_V1 = {
    "kind": "gate_requested",
    "run_id": "run-1",
    "step_id": "execute",
    "role": "Executor",
    "reasons": ["sensitive_paths: touches policy-sensitive files"],
    "paths": ["requirements.txt"],
    "owners": ["@alice"],
}


def test_a_v1_gate_is_upcast_to_repository_wide() -> None:
    """v1 never said whether a reason named no path, so it is read as if one did: a v1
    gate then needs a default owner as well as the owners of its paths (fail closed)."""
    assert GateRequested.SCHEMA_VERSION == 2
    gate = default_registry().decode_payload("gate_requested", 1, GATE_V1)
    assert isinstance(gate, GateRequested)
    assert gate.repository_wide is True
    assert (gate.paths, gate.owners) == (("requirements.txt",), ("@alice",))  # kept as recorded
    # A current record is read as it says, and must say it.
    current = {**GATE_V1, "repository_wide": False}
    assert not default_registry().decode_payload("gate_requested", 2, current).repository_wide  # type: ignore[attr-defined]
    with pytest.raises(ValidationFailed, match="repository_wide"):
        default_registry().decode_payload("gate_requested", 2, GATE_V1)


def test_an_event_of_a_v1_gate_describes_the_upcast_payload() -> None:
    dumped = _event(default_registry().decode_payload("gate_requested", 1, GATE_V1))
    old = {**dumped.model_dump(mode="json"), "schema_version": 1, "payload": GATE_V1}
    again = Event.model_validate(old)
    assert again.schema_version == 2 and again.payload.repository_wide  # type: ignore[attr-defined]


def test_a_gate_that_names_no_path_is_repository_wide_by_construction() -> None:
    with pytest.raises(ValidationError, match="names no path"):
        GateRequested(
            run_id=RunId("r"),
            step_id=StepId("s"),
            role="Executor",
            reasons=("untrusted_code_execution: proposes to execute: sh",),
            paths=(),
            owners=(),
            repository_wide=False,
        )
    with pytest.raises(ValidationError, match="repository_wide"):
        GateRequested.model_validate({**GATE_V1, "paths": ["x"]})  # the flag is required


# A spend row exactly as tracebound wrote it before the cache-write counts (schema v1).
COST_V1 = {
    "kind": "cost_incurred",
    "tier": "direct",
    "amount_usd": "0.0213",
    "source": "anthropic",
    "tokens_in": 1200,
    "tokens_out": 300,
    "cached_input_tokens": 1000,
    "reasoning_tokens": None,
    "model": "claude-x",
    "role": "Planner",
    "step_id": None,
}


def test_a_v1_cost_reads_with_its_cache_writes_unknown() -> None:
    """v2 added the cache-write counts. A payload is canonicalised with its defaults, so the
    new fields are in every new cost record: written as v1, a tracebound of before them read
    such a record as a malformed v1 ('Extra inputs are not permitted') instead of as newer
    than itself, and v1 named two shapes (docs/adr/0020)."""
    assert CostIncurred.SCHEMA_VERSION == 2
    cost = default_registry().decode_payload("cost_incurred", 1, COST_V1)
    assert isinstance(cost, CostIncurred)
    assert (cost.cache_write_input_tokens, cost.cache_write_long_input_tokens) == (None, None)
    assert (cost.tokens_in, cost.cached_input_tokens) == (1200, 1000)  # kept as recorded
    dumped = _event(cost)
    assert dumped.schema_version == 2
    again = Event.model_validate(
        {**dumped.model_dump(mode="json"), "schema_version": 1, "payload": COST_V1}
    )
    assert again.schema_version == 2 and again.payload == cost
    with pytest.raises(UpcastError, match="newer than this reader's 2"):
        default_registry().decode_payload("cost_incurred", 3, COST_V1)
