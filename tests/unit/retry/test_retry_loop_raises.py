"""The retry loop when ``FallbackTier.run`` raises instead of returning a plan.

The tier closes such an attempt with its anchor and writes ``chain_head.bin`` before the
error surfaces (its own failure as ``PlanningFailed``, an interrupt as itself, a gate's error
as itself). The verifying side must then still record the attempt: its attempts-log line,
bound to the new planning head, and ``AttemptRefused``; and the original error must surface
afterwards (an interrupt still interrupts). An attempt the tier did not anchor gets nothing.

Faults are injected into real collaborators (the redactor, the pricing table, the leaf, the
gate runner); the assertions read the ledger, the attempts log and ``tracebound inspect``.
"""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from tests.fence.fallback_kit import (
    PRICES,
    InterruptedLeaf,
    Kit,
    PromptRedactorFails,
    llm_patch,
    make_kit,
)
from typer.testing import CliRunner

from tracebound.cli.app import app
from tracebound.errors import AuditChainCorrupted, ConfigError, TraceboundError
from tracebound.events.catalog import AttemptAnchorRecorded, AttemptRefused, CostIncurred
from tracebound.integrations.llm import ScriptedLeaf
from tracebound.pipeline.fallback import PlanningFailed, PricingTable, RecipeBook
from tracebound.pipeline.fallback.leaf import LeafResponse, TokenUsage
from tracebound.pipeline.redaction import RedactionResult, Redactor
from tracebound.pipeline.retry.gates import CommandGate, GateRunner
from tracebound.pipeline.retry.ledger import verify_attempts
from tracebound.pipeline.retry.loop import RetryLoop
from tracebound.store.blobs import FileBlobStore

WF = "wf"


class NewVersionEachCall(ScriptedLeaf):
    """A different patch per call (a repeated patch would be refused on the retry)."""

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> LeafResponse:
        self._script = ((None, llm_patch(f"2.2{len(self.prompts)}.0")),)
        return super().complete(prompt, model=model, max_tokens=max_tokens)


class FaultyRedactor(Redactor):
    """A real redactor that raises ``exc`` on a patch (the model's answer's diff)."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(b"tracebound-test-redaction-key-01")
        self.exc = exc

    def redact_text(self, text: str) -> RedactionResult[str]:
        if text.startswith("--- "):
            raise self.exc
        return super().redact_text(text)


class CostFailsFrom(PricingTable):
    """Prices estimates fine; pricing an answer fails from the ``n``-th answer on."""

    def __init__(self, n: int) -> None:
        super().__init__(PRICES)
        self.n = n
        self.calls = 0

    def cost(self, model: str, usage: TokenUsage) -> Decimal:
        self.calls += 1
        if self.calls >= self.n:
            raise ArithmeticError("pricing bug")
        return super().cost(model, usage)


def _gate(exit_code: int) -> CommandGate:
    return CommandGate("exit", (sys.executable, "-c", f"import sys; sys.exit({exit_code})"))


def _loop(
    tmp_path: Path, *, leaf: ScriptedLeaf | None = None, gate_exit: int = 0, retries: int = 1
) -> tuple[Kit, RetryLoop]:
    kit = make_kit(
        tmp_path,
        leaf=leaf if leaf is not None else NewVersionEachCall([]),
        retrieval=False,
        recipes=RecipeBook([]),
    )
    store = tmp_path / ".tracebound"
    store.mkdir(exist_ok=True)
    blobs = FileBlobStore(store / "blobs")
    gates = GateRunner(
        [_gate(gate_exit)],
        ledger=kit.ledger,
        redactor=Redactor(b"loop-raises-redaction-key"),
        evidence=blobs,
        runs_root=kit.tier.workdir,
    )
    loop = RetryLoop(
        kit.tier, gates, ledger=kit.ledger, fence=kit.fence, blobs=blobs, max_retries=retries
    )
    return kit, loop


def _anchors(kit: Kit) -> list[AttemptAnchorRecorded]:
    return [e.payload for e in kit.events(WF) if isinstance(e.payload, AttemptAnchorRecorded)]


def _gate_events(kit: Kit) -> list[Any]:
    return list(kit.ledger.store.read_stream(f"gates/{WF}"))


def _inspect_ok(kit: Kit) -> dict[str, Any]:
    """``tracebound inspect --attempts`` on the run, vouched for by the ledger: exit 0, and
    every anchored attempt has its line (nothing left "in flight")."""
    attempts = kit.tier.workdir / WF / "attempts.jsonl"
    result = CliRunner().invoke(
        app,
        ["inspect", "--attempts", str(attempts), "--store", str(kit.root / "ledger"), "--json"],
    )
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)
    assert data["ok"] and data["damage"] is None
    assert data["pending_attempt"] is False
    assert len(data["attempts"]) == len(_anchors(kit))
    assert data["planning_head"] == kit.tier.chain_head_path(WF).read_bytes().hex()
    return data


def _assert_refused_last(kit: Kit, *, cause: str, reason_starts: str, index: int) -> AttemptRefused:
    events = _gate_events(kit)
    last = events[-1]
    assert isinstance(last.payload, AttemptRefused)
    anchor = _anchors(kit)[index].anchor
    assert last.correlation_id == str(anchor.attempt_id)
    assert (last.payload.attempt_id, last.payload.attempt_index) == (anchor.attempt_id, index)
    assert last.payload.cause == cause
    assert last.payload.reason.startswith(reason_starts), last.payload.reason
    assert [e.event_type for e in events].count("attempt_refused") == 1
    return last.payload


@pytest.mark.parametrize(
    ("fault", "cause_type"),
    [
        ("redactor", "RuntimeError"),
        ("pricing", "ArithmeticError"),
    ],
)
def test_a_tier_failure_after_the_anchor_is_recorded_by_the_verifying_side(
    tmp_path: Path, fault: str, cause_type: str
) -> None:
    kit, loop = _loop(tmp_path)
    if fault == "redactor":
        kit.tier._redactor = FaultyRedactor(RuntimeError("bug quoting ghp_secret"))
    else:
        kit.tier._pricing = CostFailsFrom(1)
    try:
        with pytest.raises(PlanningFailed) as info:
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        assert info.value.anchored and type(info.value.__cause__).__name__ == cause_type
        (recorded,) = _anchors(kit)
        state = verify_attempts(kit.tier.workdir / WF)
        assert state.ok
        (line,) = state.attempts
        assert (line.attempt_id, line.attempt_index) == (recorded.anchor.attempt_id, 0)
        assert (line.plan_tag, line.refusal_reason, line.trust) == ("Refused", "tier_error", None)
        assert line.planning_chain_head == kit.tier.chain_head_path(WF).read_bytes()
        refused = _assert_refused_last(
            kit, cause="not_retryable", reason_starts="tier_error", index=0
        )
        assert cause_type in refused.reason and "ghp_secret" not in refused.reason
        # The model was called and paid for: the cost ledger says so too.
        costs = [e.payload for e in kit.ledger.store.read_stream(f"costs/{WF}")]
        assert [type(c) for c in costs] == [CostIncurred]
        assert isinstance(costs[0], CostIncurred)
        assert costs[0].amount_usd == recorded.anchor.cost_usd > 0
        _inspect_ok(kit)
    finally:
        kit.close()


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)])
def test_an_interrupt_in_the_leaf_is_recorded_then_still_interrupts(
    tmp_path: Path, exc: BaseException
) -> None:
    kit, loop = _loop(tmp_path, leaf=InterruptedLeaf(exc))
    try:
        with pytest.raises(type(exc)) as info:
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        assert info.value is exc
        (recorded,) = _anchors(kit)
        assert recorded.anchor.extras["phase4.leaf_error"] == type(exc).__name__
        (line,) = verify_attempts(kit.tier.workdir / WF).attempts
        assert (line.plan_tag, line.refusal_reason) == ("Refused", "leaf_error")
        _assert_refused_last(
            kit, cause="not_retryable", reason_starts=f"interrupted ({type(exc).__name__})", index=0
        )
        _inspect_ok(kit)
    finally:
        kit.close()


def test_a_gate_error_is_recorded_with_the_plan_and_no_verdict(tmp_path: Path) -> None:
    kit, loop = _loop(tmp_path)
    try:
        with pytest.raises(ConfigError, match="not a directory"):
            loop.run(kit.ctx(), workflow_id=WF, target=tmp_path / "no-such-target")
        (recorded,) = _anchors(kit)
        assert recorded.anchor.extras["phase4.verify_error"] == "ConfigError"
        (line,) = verify_attempts(kit.tier.workdir / WF).attempts
        transform = next(e.payload for e in kit.events(WF) if e.event_type == "transform_built")
        # What the planner proposed, and that no verdict was reached: as the anchor says.
        assert (line.plan_tag, line.refusal_reason, line.trust) == ("AppliedFromLlm", None, None)
        assert line.patch_blake3 == transform.patch_digest_blake3
        _assert_refused_last(
            kit, cause="not_retryable", reason_starts="verify_error (ConfigError)", index=0
        )
        _inspect_ok(kit)
    finally:
        kit.close()


def test_an_interrupt_in_the_gates_is_recorded_then_still_interrupts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kit, loop = _loop(tmp_path)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(loop.gates, "_run_gate", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        (line,) = verify_attempts(kit.tier.workdir / WF).attempts
        assert (line.plan_tag, line.trust) == ("AppliedFromLlm", None)
        _assert_refused_last(
            kit, cause="not_retryable", reason_starts="interrupted (KeyboardInterrupt)", index=0
        )
        _inspect_ok(kit)
    finally:
        kit.close()


def test_a_failure_on_a_retry_continues_the_chain(tmp_path: Path) -> None:
    kit, loop = _loop(tmp_path, gate_exit=1, retries=2)
    kit.tier._pricing = CostFailsFrom(2)  # the first answer prices fine, the second does not
    try:
        with pytest.raises(PlanningFailed):
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        first, second = _anchors(kit)
        state = verify_attempts(kit.tier.workdir / WF)
        assert state.ok
        assert [(a.attempt_index, a.plan_tag) for a in state.attempts] == [
            (0, "AppliedFromLlm"),
            (1, "Refused"),
        ]
        assert state.attempts[0].trust is not None and not state.attempts[0].trust.passed
        assert state.attempts[1].refusal_reason == "tier_error"
        assert state.attempts[0].planning_chain_head != state.attempts[1].planning_chain_head
        kinds = [e.event_type for e in _gate_events(kit)]
        assert kinds[-2:] == ["retry_requested", "attempt_refused"]
        _assert_refused_last(kit, cause="not_retryable", reason_starts="tier_error", index=1)
        assert second.anchor.attempt_index == 1 and first.anchor.attempt_index == 0
        _inspect_ok(kit)
    finally:
        kit.close()


def test_an_attempt_the_tier_did_not_anchor_gets_no_verifying_record(tmp_path: Path) -> None:
    kit, loop = _loop(tmp_path)
    kit.tier._redactor = PromptRedactorFails(MemoryError())
    try:
        with pytest.raises(PlanningFailed, match="nothing was recorded") as info:
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        assert not info.value.anchored
        assert kit.kinds(WF) == [] and _gate_events(kit) == []
        assert not (kit.tier.workdir / WF / "attempts.jsonl").exists()
    finally:
        kit.close()


def test_the_original_error_surfaces_when_the_attempts_line_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kit, loop = _loop(tmp_path)
    kit.tier._redactor = FaultyRedactor(RuntimeError("bug"))

    def broken(plan: object) -> None:
        raise AuditChainCorrupted("the attempts log does not verify")

    monkeypatch.setattr(loop.gates, "record_attempt", broken)
    try:
        with pytest.raises(PlanningFailed) as info:
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        notes = " ".join(getattr(info.value, "__notes__", []))
        assert "AuditChainCorrupted" in notes and "attempts log" in notes
        # The ledger side is still told the attempt ended.
        _assert_refused_last(kit, cause="not_retryable", reason_starts="tier_error", index=0)
        assert isinstance(info.value, TraceboundError)
    finally:
        kit.close()
