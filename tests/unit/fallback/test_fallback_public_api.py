"""The planning side's public surface is pinned: changing it is a visible decision (the
verifying side and the retry loop are written against it)."""

from __future__ import annotations

import inspect

import tracebound.integrations.llm as llm
import tracebound.pipeline.fallback as fallback

FALLBACK = {
    "CHAIN_HEAD_FILENAME", "DATAMARK", "EMPTY_DIGEST", "PRIOR_ATTEMPTS_HEADER", "Advisory",
    "AnchorHook", "ApplyContext", "AttemptEventLog", "Budget", "FallbackTier", "FenceWrapper",
    "LLMLeaf", "LeafCallFailed", "LeafResponse", "ModelPrice", "Neutralisation",
    "PatchRejected", "PinBumpRecipe", "PlanOutcome", "PlanningFailed", "PricingTable",
    "Recipe", "RecipeBook", "RecipeProposal", "RefusalReason", "Reservation", "Retrieval",
    "SanitizedText", "SolvedExample", "SolvedExampleStore", "TokenUsage", "attempt_stream",
    "build_attempt_summary",
}  # fmt: skip
LLM = {
    "AnthropicLeaf", "LLMLeaf", "LeafCallFailed", "LeafConnectionError", "LeafMalformedResponse",
    "LeafRateLimited", "LeafResponse", "LeafStatusError", "LeafTimeout", "OpenAICompatibleLeaf",
    "ReceivedRequest", "RecordedExchange", "ReplayServer", "ScriptedLeaf", "TokenUsage",
    "load_exchanges",
}  # fmt: skip


def test_exports_are_pinned() -> None:
    assert set(fallback.__all__) == FALLBACK and len(fallback.__all__) == len(FALLBACK)
    assert set(llm.__all__) == LLM and len(llm.__all__) == len(LLM)
    for module in (fallback, llm):
        for name in module.__all__:
            assert getattr(module, name) is not None, name


def test_the_contract_signatures() -> None:
    run = inspect.signature(fallback.FallbackTier.run)
    assert list(run.parameters) == [
        "self", "ctx", "workflow_id", "attempt_index", "prior_attempts", "verify",
    ]  # fmt: skip
    assert run.parameters["workflow_id"].kind is inspect.Parameter.KEYWORD_ONLY
    assert run.parameters["attempt_index"].default == 0
    assert run.parameters["prior_attempts"].default == []
    assert run.parameters["verify"].default is None
    init = inspect.signature(fallback.FallbackTier.__init__)
    assert [p for p in init.parameters if p != "self"] == [
        "ledger", "recipes", "retrieval", "leaf", "budget", "pricing", "fence", "redactor",
        "workdir",
    ]  # fmt: skip
    assert all(
        p.kind is inspect.Parameter.KEYWORD_ONLY
        for name, p in init.parameters.items()
        if name != "self"
    )
    summary = inspect.signature(fallback.build_attempt_summary)
    assert list(summary.parameters) == [
        "attempt_id", "sandbox_run_id", "failing_signals", "fence", "evidence_paths",
        "redactor",  # added, keyword-only with a default: existing calls are unchanged
    ]  # fmt: skip
    assert set(fallback.PlanOutcome.model_fields) == {
        "tag", "attempt_id", "attempt_index", "workflow_id", "patch", "patch_blake3",
        "refusal_reason", "prompt", "anchor", "trust",
    }  # fmt: skip
    assert set(fallback.ApplyContext.model_fields) == {
        "advisory", "repo_path", "package", "current_version", "ecosystem", "prior_attempts",
    }  # fmt: skip
    assert (
        fallback.PlanOutcome.model_config["frozen"] and fallback.ApplyContext.model_config["frozen"]
    )
    assert fallback.Advisory.model_config["frozen"]
