"""The planning side of the retry loop ("Phase 4"): recipe, then retrieval, then the LLM.

:class:`FallbackTier` runs one attempt per call and closes it with the attempt's
``AttemptAnchorRecorded`` (ADR-04-0017). :class:`FenceWrapper` and
:func:`build_attempt_summary` keep raw sandbox output and other untrusted text from acting
as instructions (ADR-0002). The verifying side (GateRunner, RetryLedger) is bound in through
the ``verify`` hook and reads ``chain_head.bin`` (ADR-0005). Provider adapters for the
:class:`LLMLeaf` Protocol live in :mod:`tracebound.integrations.llm`.

See docs/retry.md, "Planning side".
"""

from tracebound.pipeline.fallback.budget import Budget, ModelPrice, PricingTable, Reservation
from tracebound.pipeline.fallback.eventlog import AttemptEventLog, attempt_stream
from tracebound.pipeline.fallback.fence import (
    DATAMARK,
    FenceWrapper,
    Neutralisation,
    SanitizedText,
    build_attempt_summary,
)
from tracebound.pipeline.fallback.leaf import LeafCallFailed, LeafResponse, LLMLeaf, TokenUsage
from tracebound.pipeline.fallback.models import (
    Advisory,
    AnchorHook,
    ApplyContext,
    PlanOutcome,
    RefusalReason,
)
from tracebound.pipeline.fallback.patch import PatchRejected
from tracebound.pipeline.fallback.prompt import PRIOR_ATTEMPTS_HEADER
from tracebound.pipeline.fallback.recipes import PinBumpRecipe, Recipe, RecipeBook, RecipeProposal
from tracebound.pipeline.fallback.retrieval import Retrieval, SolvedExample, SolvedExampleStore
from tracebound.pipeline.fallback.tier import (
    CHAIN_HEAD_FILENAME,
    EMPTY_DIGEST,
    FallbackTier,
    PlanningFailed,
)

__all__ = [
    "CHAIN_HEAD_FILENAME",
    "DATAMARK",
    "EMPTY_DIGEST",
    "PRIOR_ATTEMPTS_HEADER",
    "Advisory",
    "AnchorHook",
    "ApplyContext",
    "AttemptEventLog",
    "Budget",
    "FallbackTier",
    "FenceWrapper",
    "LLMLeaf",
    "LeafCallFailed",
    "LeafResponse",
    "ModelPrice",
    "Neutralisation",
    "PatchRejected",
    "PinBumpRecipe",
    "PlanOutcome",
    "PlanningFailed",
    "PricingTable",
    "Recipe",
    "RecipeBook",
    "RecipeProposal",
    "RefusalReason",
    "Reservation",
    "Retrieval",
    "SanitizedText",
    "SolvedExample",
    "SolvedExampleStore",
    "TokenUsage",
    "attempt_stream",
    "build_attempt_summary",
]
