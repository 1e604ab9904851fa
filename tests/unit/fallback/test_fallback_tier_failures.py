"""The tier's own machinery failing mid-attempt: the redactor, the patch parser, the dry run,
the pricing of an answer, a ledger write.

Model and gate failures have their own paths (``leaf_error``, ``phase4.verify_error``).
Everything else that raises after the attempt's first event must still close the attempt
with exactly one anchor, its last event, settle any budget reservation, and only then
surface the error: a tracebound error as it is, anything else as ``PlanningFailed`` (the
original as its cause), an interrupt as itself. Faults are injected into real collaborators;
the assertions read the recorded event stream.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from tests.fence.fallback_kit import PRICES, Kit, llm_patch, make_kit

from tracebound.errors import (
    AttemptRefusedError,
    StorageError,
    TraceboundError,
    ValidationFailed,
)
from tracebound.events.catalog import AttemptAnchorRecorded, BudgetReconciled, LeafReturned
from tracebound.integrations.llm import ScriptedLeaf
from tracebound.pipeline.fallback import (
    PlanningFailed,
    PlanOutcome,
    PricingTable,
    RecipeBook,
    RecipeProposal,
)
from tracebound.pipeline.fallback import tier as tier_module
from tracebound.pipeline.fallback.leaf import TokenUsage
from tracebound.pipeline.redaction import RedactionResult, Redactor
from tracebound.pipeline.retry.models import TrustOutcome

LLM_REFUSED = [
    "provenance_classified",
    "budget_prechecked",
    "rag_miss",
    "prompt_built",
    "budget_precharged",
    "leaf_invoked",
    "leaf_returned",
    "budget_reconciled",
    "plan_outcome_emitted",
    "attempt_anchor_recorded",
]
RECIPE_REFUSED = [
    "provenance_classified",
    "budget_prechecked",
    "rag_miss",
    "plan_outcome_emitted",
    "attempt_anchor_recorded",
]


class FaultyRedactor(Redactor):
    """A real redactor that raises ``exc`` on the texts ``when`` picks."""

    def __init__(self, exc: BaseException, when: Callable[[str], bool]) -> None:
        super().__init__(b"tracebound-test-redaction-key-01")
        self.exc = exc
        self.when = when

    def redact_text(self, text: str) -> RedactionResult[str]:
        if self.when(text):
            raise self.exc
        return super().redact_text(text)


def _is_patch(text: str) -> bool:
    return text.startswith("--- ")


def _llm_kit(tmp_path: Path, **kw: Any) -> Kit:
    leaf = kw.pop("leaf", None) or ScriptedLeaf([(None, llm_patch("2.20.0"))])
    return make_kit(tmp_path, leaf=leaf, recipes=RecipeBook([]), retrieval=False, **kw)


def _with_redactor(kit: Kit, redactor: Redactor) -> Kit:
    kit.tier._redactor = redactor
    return kit


def _never_called(plan: PlanOutcome) -> TrustOutcome:
    raise AssertionError("a plan refused by the tier is not sent to the gates")


def _assert_closed(kit: Kit, kinds: list[str], *, cause: str) -> AttemptAnchorRecorded:
    """One anchor, last, refused as tier_error; the budget holds no reservation."""
    assert kit.kinds("wf") == kinds
    last = kit.events("wf")[-1]
    assert isinstance(last.payload, AttemptAnchorRecorded)
    anchor = last.payload.anchor
    assert (anchor.validator_outcome, anchor.refusal_reason) == ("Refused", "tier_error")
    assert anchor.plan_proposal_kind == "refuse"
    assert anchor.extras["phase4.tier_error"] == cause
    assert anchor.trust_outcome_passed is None
    assert kit.budget.reserved_usd == 0
    assert kit.budget.available_usd == kit.budget.limit_usd - kit.budget.spent_usd
    assert kit.tier.chain_head_path("wf").read_bytes() == last.hash  # ADR-0005 head moved on
    return last.payload


def test_a_redactor_failing_on_the_answer_closes_the_attempt_then_raises_typed(
    tmp_path: Path,
) -> None:
    boom = RuntimeError("redactor bug: the message might quote ghp_secret")
    kit = _with_redactor(_llm_kit(tmp_path), FaultyRedactor(boom, _is_patch))
    try:
        with pytest.raises(PlanningFailed) as info:
            kit.tier.run(kit.ctx(), workflow_id="wf", verify=_never_called)
        assert isinstance(info.value, AttemptRefusedError | TraceboundError)
        assert info.value.__cause__ is boom
        assert "ghp_secret" not in str(info.value)  # only the type travels
        assert info.value.workflow_id == "wf"
        recorded = _assert_closed(kit, LLM_REFUSED, cause="RuntimeError")
        assert info.value.attempt_id == recorded.anchor.attempt_id
        # The call was made and paid for: the anchor carries its cost, the budget spent it.
        reconciled = next(
            e.payload for e in kit.events("wf") if e.event_type == "budget_reconciled"
        )
        assert isinstance(reconciled, BudgetReconciled)
        assert recorded.anchor.cost_usd == reconciled.actual_usd == kit.budget.spent_usd > 0
    finally:
        kit.close()


def test_a_redactor_failing_on_a_recipe_patch_closes_the_attempt(tmp_path: Path) -> None:
    kit = make_kit(tmp_path, retrieval=False)
    _with_redactor(kit, FaultyRedactor(LookupError("table missing"), _is_patch))
    try:
        with pytest.raises(PlanningFailed) as info:
            kit.tier.run(kit.ctx(), workflow_id="wf", verify=_never_called)
        assert isinstance(info.value.__cause__, LookupError)
        recorded = _assert_closed(kit, RECIPE_REFUSED, cause="LookupError")
        assert recorded.anchor.extras["phase4.recipe"] == "pin-bump-first-fixed"
        assert kit.budget.spent_usd == 0
    finally:
        kit.close()


def test_a_patch_parser_failure_closes_the_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_parser(text: str) -> Any:
        raise IndexError("parser bug")

    monkeypatch.setattr(tier_module, "parse_patch", broken_parser)
    kit = make_kit(tmp_path, retrieval=False)
    try:
        with pytest.raises(PlanningFailed) as info:
            kit.tier.run(kit.ctx(), workflow_id="wf")
        assert isinstance(info.value.__cause__, IndexError)
        _assert_closed(kit, RECIPE_REFUSED, cause="IndexError")
    finally:
        kit.close()


def test_a_dry_run_failure_closes_the_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_dry_run(repo: Path, patch: str) -> Any:
        raise PermissionError(13, "Permission denied")  # an OSError the applier did not expect

    monkeypatch.setattr(tier_module, "apply_patch", broken_dry_run)
    kit = _llm_kit(tmp_path)
    try:
        with pytest.raises(PlanningFailed) as info:
            kit.tier.run(kit.ctx(), workflow_id="wf")
        assert isinstance(info.value.__cause__, PermissionError)
        _assert_closed(kit, LLM_REFUSED, cause="PermissionError")
    finally:
        kit.close()


def test_a_tracebound_error_from_the_machinery_surfaces_as_itself(tmp_path: Path) -> None:
    typed = ValidationFailed("text", "the redactor refused it")
    kit = _with_redactor(_llm_kit(tmp_path), FaultyRedactor(typed, _is_patch))
    try:
        with pytest.raises(ValidationFailed) as info:
            kit.tier.run(kit.ctx(), workflow_id="wf")
        assert info.value is typed
        _assert_closed(kit, LLM_REFUSED, cause="ValidationFailed")
    finally:
        kit.close()


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(2)])
def test_an_interrupt_in_the_machinery_closes_the_attempt_then_propagates(
    tmp_path: Path, exc: BaseException
) -> None:
    kit = _with_redactor(_llm_kit(tmp_path), FaultyRedactor(exc, _is_patch))
    try:
        with pytest.raises(type(exc)) as info:
            kit.tier.run(kit.ctx(), workflow_id="wf")
        assert info.value is exc
        _assert_closed(kit, LLM_REFUSED, cause=type(exc).__name__)
    finally:
        kit.close()


class BrokenCost(PricingTable):
    """Prices the estimate fine, then fails to price the answer (after the call)."""

    def cost(self, model: str, usage: TokenUsage) -> Decimal:
        raise ArithmeticError("pricing bug")


def test_a_failure_while_money_is_reserved_settles_the_reservation(tmp_path: Path) -> None:
    kit = _llm_kit(tmp_path)
    kit.tier._pricing = BrokenCost(PRICES)
    try:
        with pytest.raises(PlanningFailed) as info:
            kit.tier.run(kit.ctx(), workflow_id="wf")
        assert isinstance(info.value.__cause__, ArithmeticError)
        recorded = _assert_closed(kit, LLM_REFUSED, cause="ArithmeticError")
        reconciled = next(
            e.payload for e in kit.events("wf") if e.event_type == "budget_reconciled"
        )
        assert isinstance(reconciled, BudgetReconciled)
        # The model was called but its cost is unknown: the reservation is charged, never
        # silently dropped, and the record says so.
        assert reconciled.actual_usd == reconciled.precharged_usd == kit.budget.spent_usd > 0
        assert recorded.anchor.cost_usd == reconciled.actual_usd
        returned = next(e.payload for e in kit.events("wf") if e.event_type == "leaf_returned")
        assert isinstance(returned, LeafReturned)
        assert recorded.anchor.tokens_in == returned.tokens_in
    finally:
        kit.close()


def test_a_ledger_write_failure_is_not_papered_over_but_releases_the_budget(
    tmp_path: Path,
) -> None:
    kit = _llm_kit(tmp_path)
    real_record = kit.ledger.record

    def record(stream_id: str, payloads: Any, **kw: Any) -> Any:
        if any(isinstance(p, LeafReturned) for p in payloads):
            raise StorageError("disk full")
        return real_record(stream_id, payloads, **kw)

    kit.ledger.record = record  # type: ignore[method-assign]
    try:
        with pytest.raises(StorageError, match="disk full"):
            kit.tier.run(kit.ctx(), workflow_id="wf")
        # The ledger refused a write: nothing more is written for the attempt (the docs say
        # it is then incomplete), but the money reserved for it is not left held.
        assert kit.kinds("wf") == LLM_REFUSED[:6]
        assert kit.budget.reserved_usd == 0
        assert not kit.tier.chain_head_path("wf").exists()
    finally:
        kit.close()


def test_a_failure_before_the_first_event_records_nothing_and_raises_typed(
    tmp_path: Path,
) -> None:
    prompt_only = FaultyRedactor(MemoryError(), lambda text: text.startswith("You are"))
    kit = _with_redactor(_llm_kit(tmp_path), prompt_only)
    try:
        with pytest.raises(PlanningFailed, match="nothing was recorded") as info:
            kit.tier.run(kit.ctx(), workflow_id="wf")
        assert isinstance(info.value.__cause__, MemoryError)
        assert kit.kinds("wf") == []
        assert kit.budget.spent_usd == 0 and kit.budget.reserved_usd == 0
    finally:
        kit.close()


def test_the_next_attempt_runs_normally_after_a_closed_failure(tmp_path: Path) -> None:
    leaf = ScriptedLeaf([(None, llm_patch("2.20.0"))])
    kit = _llm_kit(tmp_path, leaf=leaf)
    real = kit.tier._redactor
    _with_redactor(kit, FaultyRedactor(RuntimeError("once"), _is_patch))
    try:
        with pytest.raises(PlanningFailed):
            kit.tier.run(kit.ctx(), workflow_id="wf")
        kit.tier._redactor = real
        plan = kit.tier.run(kit.ctx(), workflow_id="wf", attempt_index=1)
        assert plan.tag == "AppliedFromLlm"
        kinds = kit.kinds("wf")
        assert kinds[: len(LLM_REFUSED)] == LLM_REFUSED
        assert (
            kinds.count("attempt_anchor_recorded") == 2 and kinds[-1] == "attempt_anchor_recorded"
        )
    finally:
        kit.close()


def test_planning_failed_is_structured_and_survives_pickling() -> None:
    import pickle
    from uuid import UUID

    err = PlanningFailed(UUID(int=7), "wf", "RuntimeError", anchored=True)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is PlanningFailed and str(back) == str(err)
    assert (back.attempt_id, back.workflow_id, back.cause, back.anchored) == (
        UUID(int=7),
        "wf",
        "RuntimeError",
        True,
    )
    assert "tier_error" in str(err)


class NamelessLeaf(ScriptedLeaf):
    def __init__(self, model: object) -> None:
        super().__init__([(None, llm_patch("2.20.0"))])
        self._bad = model

    @property
    def model(self) -> str:
        return self._bad  # type: ignore[return-value]


@pytest.mark.parametrize("model", [None, "", 7])
def test_a_leaf_without_a_model_name_is_refused_before_the_first_event(
    tmp_path: Path, model: object
) -> None:
    # The name goes into the anchor's extras, which hold strings only: it used to fail when
    # the anchor was built, after four events, leaving the attempt without one.
    kit = _llm_kit(tmp_path, leaf=NamelessLeaf(model))
    try:
        with pytest.raises(ValidationFailed, match=r"leaf\.model"):
            kit.tier.run(kit.ctx(), workflow_id="wf")
        assert kit.kinds("wf") == []
    finally:
        kit.close()


class OddRecipe:
    name = "odd"

    def __init__(self, proposal: object) -> None:
        self.proposal = proposal

    def propose(self, ctx: object) -> object:
        return self.proposal


def _proposal(**kw: object) -> RecipeProposal:
    fields: dict[str, object] = {
        "recipe": "r", "description": "d", "target_version": "1", "patch": "p",
        "files_changed": 1,
    }  # fmt: skip
    return RecipeProposal(**{**fields, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "proposal",
    [
        "--- a/requirements.txt\n+++ b/requirements.txt\n",  # a bare patch, not a proposal
        _proposal(recipe=None),
        _proposal(patch=b"p"),
    ],
)
def test_a_recipe_that_returns_something_else_is_a_typed_error(
    tmp_path: Path, proposal: object
) -> None:
    kit = make_kit(tmp_path, recipes=RecipeBook([OddRecipe(proposal)]), retrieval=False)  # type: ignore[list-item]
    try:
        with pytest.raises(ValidationFailed, match="recipe"):
            kit.tier.run(kit.ctx(), workflow_id="wf")
        assert kit.kinds("wf") == []
    finally:
        kit.close()
