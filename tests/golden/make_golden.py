"""Write the golden event histories: four runs recorded by a real ledger, deterministically.

Usage (from the repository root)::

    .venv/bin/python tests/golden/make_golden.py

Each scenario is recorded into a fresh SQLite ledger with ``FixedClock`` and
``SequentialIds``, so the output is identical on every run and machine; it is exported as
JSON lines, one ``RecordedEvent.model_dump(mode="json")`` per line in log order (hashes
included, so a replay can check it rebuilt the same chain). The expected states
(``*.expected.json``) are written by the replay test, see ``test_golden_replay.py``.

* ``successful``: one attempt, gate passes, PR merged.
* ``retried``: attempt 0 fails the gate and is retried; attempt 1 passes; PR modified.
* ``refused``: the plan is refused and the attempt refused for policy; a blob is erased.
* ``gated``: a step waits for human approval, is approved, and the PR is closed.

Together they hold every built-in event kind at least once.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, TypedDict
from uuid import UUID

from tracebound.events.anchor import AttemptAnchor, PlanOutcomeTag
from tracebound.events.catalog import (
    AdapterDegraded,
    ApprovalRecorded,
    AttemptAnchorRecorded,
    AttemptCompleted,
    AttemptRefused,
    BlameAssigned,
    BlobErased,
    BudgetPrecharged,
    BudgetPrechecked,
    BudgetReconciled,
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
    StepStatus,
    TransformBuilt,
    TrustGateFailed,
    TrustGatePassed,
    ValidationRecorded,
    Validations,
)
from tracebound.events.envelope import Payload
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
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.sqlite import SQLiteStore

HERE = Path(__file__).resolve().parent
T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)
PROMPT = PromptDigest("ab" * 32)
RESPONSE = ResponseDigest("cd" * 32)
BLOB = Sha256Digest("sha256:" + "01" * 32)


_NUMBER = {"wf-successful": 1, "wf-retried": 2, "wf-refused": 3, "wf-gated": 4}


class _Attempt(TypedDict):
    attempt_id: AttemptId
    attempt_index: int


def _attempt(workflow: str, index: int) -> _Attempt:
    return {
        "attempt_id": AttemptId(UUID(int=(_NUMBER[workflow] << 8) | index)),
        "attempt_index": index,
    }


def _patch(workflow: str, index: int) -> PatchDigest:
    return PatchDigest(f"{_NUMBER[workflow]:02x}{index:02x}" * 16)


def _anchor(workflow: str, index: int, *, outcome: PlanOutcomeTag, passed: bool | None) -> Payload:
    at = _attempt(workflow, index)
    anchor = AttemptAnchor(
        attempt_id=at["attempt_id"],
        workflow_id=WorkflowId(workflow),
        attempt_index=index,
        advisory_id=AdvisoryId("GHSA-golden-0001"),
        prompt_digest_blake3=PROMPT,
        retrieved_evidence_chain_head=ChainHead(bytes(range(32))),
        retrieved_record_ids=(RagRecordId("rec-1"),),
        plan_proposal_kind="refuse" if outcome == "Refused" else "apply_transform",
        response_digest_blake3=RESPONSE,
        validator_outcome=outcome,
        refusal_reason="touches a protected path" if outcome == "Refused" else None,
        tokens_in=1200,
        tokens_out=300,
        cost_usd=Decimal("0.0213"),
        timestamp_utc=T0,
    )
    if passed is not None:
        anchor = anchor.attach_trust_outcome(passed, "high" if passed else "low")
    return AttemptAnchorRecorded(anchor=anchor)


def _planning(workflow: str, index: int) -> list[Payload]:
    """Phase 4's happy path up to the plan outcome, for one attempt."""
    at = _attempt(workflow, index)
    return [
        ProvenanceClassified(**at, advisory_id=AdvisoryId("GHSA-golden-0001"), provenance="llm"),
        BudgetPrechecked(
            **at, estimated_usd=Decimal("0.05"), available_usd=Decimal("4.95"), allowed=True
        ),
        RagHit(
            **at,
            record_ids=(RagRecordId("rec-1"),),
            evidence_chain_head=ChainHead(bytes(range(32))),
        ),
        PromptBuilt(
            **at, prompt_digest_blake3=PROMPT, prompt_bytes=4096, prior_attempt_count=index
        ),
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
            remaining_usd=Decimal("4.9287"),
            tokens_in=1200,
            tokens_out=300,
        ),
        CostIncurred(
            tier="direct",
            amount_usd=Decimal("0.0213"),
            source=CostSource("openai"),
            tokens_in=1200,
            tokens_out=300,
            cached_input_tokens=1000,
            reasoning_tokens=120,
            cache_write_input_tokens=150,
            cache_write_long_input_tokens=100,
            model="gpt-5",
            role="Planner",
            step_id=StepId(f"{workflow}/plan/{index}"),
        ),
        TransformBuilt(**at, patch_digest_blake3=_patch(workflow, index), files_changed=2),
        PlanOutcomeEmitted(**at, plan_proposal_kind="apply_transform", outcome="AppliedFromLlm"),
    ]


def _passed(workflow: str, index: int) -> list[Payload]:
    at = _attempt(workflow, index)
    return [
        CostIncurred(
            tier="amortized",
            amount_usd=Decimal("0.0040"),
            source=CostSource("sandbox"),
            role="Executor",
        ),
        TrustGatePassed(
            gate=GateId("tests"),
            signals={SignalKind("tests_pass"): True, SignalKind("coverage_bp"): 8700},
            score=9100,
        ),
        AttemptCompleted(
            **at,
            advisory_id=AdvisoryId("GHSA-golden-0001"),
            outcome="AppliedFromLlm",
            trust_outcome_passed=True,
            cost_usd=Decimal("0.0253"),
            duration_ms=5300,
        ),
        _anchor(workflow, index, outcome="AppliedFromLlm", passed=True),
        SolutionFound(
            **at,
            advisory_id=AdvisoryId("GHSA-golden-0001"),
            patch_digest_blake3=_patch(workflow, index),
            outcome="AppliedFromLlm",
        ),
    ]


def _step(workflow: str, step: str, status: StepStatus, **extra: Any) -> StepRecorded:
    return StepRecorded(
        run_id=RunId(f"run-{workflow}"),
        step_id=StepId(step),
        parent_step_id=None,
        role="Executor",
        timestamp_start=T0,
        timestamp_end=T0,
        duration_ms=0,
        artifact_hash=BLOB,
        status=status,
        cost_est=CostEstimate(prompt_tokens=100, compute_usd_est=Decimal("0.01")),
        latency_ms=0,
        validations=Validations(ran=("tests",)),
        storage="db",
        **extra,
    )


def _run_started(workflow: str) -> RunStarted:
    return RunStarted(
        run_id=RunId(f"run-{workflow}"),
        pipeline="remediate",
        pipeline_type="remediation",
        critical=True,
        pipeline_ref="golden:pipeline",
        inputs_digest=BLOB,
        inputs_pointer=f"blob://{BLOB}",
    )


def successful(ledger: Ledger) -> None:
    wf = "wf-successful"
    ledger.record(
        wf,
        [
            _run_started(wf),
            RouteChosen(
                run_id=RunId(f"run-{wf}"),
                step_id=StepId("route"),
                chosen="fast-executor",
                alternatives=("fast-executor", "careful-executor"),
                reason="cost SLO threatened",
            ),
            PluginResolved(
                plugin_id=PluginId("npm-express"),
                extends_chain=(PluginId("npm"), PluginId("base")),
                matched_scope=PluginScope("npm/express"),
                fallback_used=False,
            ),
            *_planning(wf, 0),
            *_passed(wf, 0),
            ValidationRecorded(
                run_id=RunId(f"run-{wf}"),
                step_id=StepId("apply"),
                name="unit-tests",
                check="command",
                passed=True,
                exit_code=0,
                duration_ms=900,
                output_digest=BLOB,
            ),
            _step(wf, "apply", "success"),
            RunFinished(run_id=RunId(f"run-{wf}"), status="completed"),
            MergeOutcome(pr_url="https://example.test/pr/1", decision="merged", reviewer="ana"),
        ],
        workflow_id=wf,
    )
    # Portfolio overhead: no workflow, so it counts in ROI's total but no workflow's row.
    ledger.record(
        "portfolio",
        [
            CostIncurred(
                tier="overhead", amount_usd=Decimal("0.1000"), source=CostSource("index-refresh")
            )
        ],
    )


def retried(ledger: Ledger) -> None:
    wf = "wf-retried"
    first = _attempt(wf, 0)
    ledger.record(
        wf,
        [
            PluginResolved(
                plugin_id=PluginId("universal"),
                extends_chain=(),
                matched_scope=PluginScope("*"),
                fallback_used=True,
            ),
            AdapterDegraded(
                primitive=PrimitiveName("references"),
                primary_adapter=AdapterId("scip"),
                primary_confidence=4200,
                fallback_adapter=AdapterId("tree-sitter"),
            ),
            *_planning(wf, 0),
            TrustGateFailed(
                gate=GateId("tests"),
                failing_signals=(SignalKind("tests_pass"), SignalKind("lint_clean")),
                score=3100,
                retry_count=0,
            ),
            RetryRequested(
                **first,
                gate=GateId("tests"),
                sandbox_run_id=SandboxRunId("sbx-1"),
                failing_signals=(SignalKind("tests_pass"),),
                summary_pointer=BLOB,
            ),
            AttemptCompleted(
                **first,
                advisory_id=AdvisoryId("GHSA-golden-0001"),
                outcome="AppliedFromLlm",
                trust_outcome_passed=False,
                cost_usd=Decimal("0.0213"),
                duration_ms=6100,
            ),
            _anchor(wf, 0, outcome="AppliedFromLlm", passed=False),
            ValidationRecorded(
                run_id=RunId(f"run-{wf}"),
                step_id=StepId("execute"),
                name="unit-tests",
                check="command",
                passed=False,
                exit_code=1,
                duration_ms=1200,
                detail="exit code 1",
            ),
            BlameAssigned(
                run_id=RunId(f"run-{wf}"),
                detected_by=StepId("execute"),
                failed_step_id=StepId("execute"),
                failed_role="Executor",
                origin_step_id=StepId("execute"),
                origin_role="Executor",
                reason="required validations failed: unit-tests",
                harmful=True,
            ),
            RepairAttempted(
                run_id=RunId(f"run-{wf}"),
                origin_step_id=StepId("execute"),
                repair_step_id=StepId("execute~r1"),
                attempt=1,
                succeeded=True,
            ),
            RagDegraded(**_attempt(wf, 1), reason="index stale"),
            *_planning(wf, 1),
            *_passed(wf, 1),
            MergeOutcome(pr_url="https://example.test/pr/2", decision="modified", reviewer="bo"),
        ],
        workflow_id=wf,
    )


def refused(ledger: Ledger) -> None:
    wf = "wf-refused"
    at = _attempt(wf, 0)
    ledger.record(
        wf,
        [
            PluginResolved(
                plugin_id=PluginId("npm-express"),
                extends_chain=(PluginId("npm"),),
                matched_scope=PluginScope("npm"),
                fallback_used=False,
            ),
            ProvenanceClassified(
                **at, advisory_id=AdvisoryId("GHSA-golden-0001"), provenance="recipe"
            ),
            BudgetPrechecked(
                **at, estimated_usd=Decimal("0.05"), available_usd=Decimal("-0.01"), allowed=False
            ),
            RagMiss(**at, evidence_chain_head=None, bypassed=True),
            PlanOutcomeEmitted(
                **at,
                plan_proposal_kind="refuse",
                outcome="Refused",
                refusal_reason="touches a protected path",
            ),
            AttemptCompleted(
                **at,
                advisory_id=AdvisoryId("GHSA-golden-0001"),
                outcome="Refused",
                trust_outcome_passed=None,
                cost_usd=Decimal(0),
                duration_ms=40,
            ),
            AttemptRefused(**at, cause="policy", reason="protected path"),
            _anchor(wf, 0, outcome="Refused", passed=None),
            CostIncurred(
                tier="direct",
                amount_usd=Decimal("0.0007"),
                source=CostSource("openai"),
                role="Router",
            ),
            BlobErased(digest=BLOB, reason="GDPR erasure request"),
            BlameAssigned(
                run_id=RunId(f"run-{wf}"),
                detected_by=StepId("critique"),
                failed_step_id=StepId("plan"),
                failed_role="Planner",
                origin_step_id=None,
                origin_role=None,
                reason="plan contradicts the advisory; cause unknown",
                harmful=True,
            ),
            RunFinished(run_id=RunId(f"run-{wf}"), status="failed", failed_step=StepId("critique")),
            SloAlertRaised(
                pipeline="remediate",
                pipeline_type="remediation",
                metric="unresolved_origin",
                role="Planner",
                value="1",
                threshold="0",
                run_id=RunId(f"run-{wf}"),
            ),
        ],
        workflow_id=wf,
    )


def gated(ledger: Ledger) -> None:
    wf = "wf-gated"
    ledger.record(
        wf,
        [
            PluginResolved(
                plugin_id=PluginId("pypi-django"),
                extends_chain=(PluginId("pypi"),),
                matched_scope=PluginScope("pypi/django"),
                fallback_used=False,
            ),
            *_planning(wf, 0),
            *_passed(wf, 0),
            GateRequested(
                run_id=RunId(f"run-{wf}"),
                step_id=StepId("deploy"),
                role="Executor",
                reasons=("sensitive_paths: touches policy-sensitive files",),
                paths=("infra/prod.tf",),
                owners=("carol@example.test",),
                repository_wide=False,
            ),
            _step(wf, "deploy", "gated"),
            RunFinished(run_id=RunId(f"run-{wf}"), status="gated", reason="waiting for approval"),
            ApprovalRecorded(
                run_id=RunId(f"run-{wf}"),
                step_id=StepId("deploy"),
                approver="carol@example.test",
                decision="approved",
                paths=("infra/prod.tf",),
                timestamp=T0,
            ),
            RunResumed(run_id=RunId(f"run-{wf}"), step_id=StepId("deploy"), decision="approved"),
            _step(wf, "deploy-2", "error", error_origin="deploy"),
            MergeOutcome(pr_url="https://example.test/pr/4", decision="closed", reviewer=None),
        ],
        workflow_id=wf,
    )


SCENARIOS: dict[str, Callable[[Ledger], None]] = {
    "successful": successful,
    "retried": retried,
    "refused": refused,
    "gated": gated,
}


def record(name: str, directory: Path) -> list[dict[str, Any]]:
    """Record one scenario into a fresh ledger under ``directory``; its events as JSON data."""
    store = SQLiteStore(directory / name)
    ledger = Ledger(
        store,
        clock=FixedClock(start=T0),
        ids=SequentialIds(namespace=0x601D),
        origin="tracebound.test/golden",
    )
    with ledger:
        SCENARIOS[name](ledger)
        return [e.model_dump(mode="json") for e in store.read_log()]


def history_path(name: str) -> Path:
    return HERE / f"{name}.jsonl"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name in SCENARIOS:
            events = record(name, Path(tmp))
            text = "".join(json.dumps(e, sort_keys=True, ensure_ascii=False) + "\n" for e in events)
            history_path(name).write_text(text, encoding="utf-8")
            sys.stdout.write(f"wrote {history_path(name)} ({len(events)} events)\n")


if __name__ == "__main__":
    main()
