"""Model providers behind the planning tier's :class:`~tracebound.pipeline.fallback.LLMLeaf`.

* :class:`OpenAICompatibleLeaf`: chat completions (OpenAI and compatible servers); extra
  ``tracebound[openai]``.
* :class:`AnthropicLeaf`: the Messages API; extra ``tracebound[anthropic]``.
* :class:`ScriptedLeaf`: an in-process *test double* (no HTTP), for unit tests and docs.
* :class:`ReplayServer`: a loopback HTTP server that answers the adapters with recorded
  provider responses, chosen by matching the prompt. Tests and the demo replace a provider
  here, at the HTTP boundary, so the adapters run their real request and parsing code.

The two adapters are imported lazily: the SDKs are optional extras.

Every failure of a call is a :class:`LeafCallFailed`; the subclass names its kind:
:class:`LeafTimeout` (a :class:`LeafConnectionError`), :class:`LeafRateLimited` (a
:class:`LeafStatusError`, which carries the ``status_code``) and
:class:`LeafMalformedResponse` (a success status whose body cannot be used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracebound.integrations.llm._common import (
    LeafConnectionError,
    LeafMalformedResponse,
    LeafRateLimited,
    LeafStatusError,
    LeafTimeout,
)
from tracebound.integrations.llm.replay_server import (
    ReceivedRequest,
    RecordedExchange,
    ReplayServer,
    load_exchanges,
)
from tracebound.integrations.llm.scripted import ScriptedLeaf
from tracebound.pipeline.fallback.leaf import LeafCallFailed, LeafResponse, LLMLeaf, TokenUsage

if TYPE_CHECKING:
    from tracebound.integrations.llm.anthropic_leaf import AnthropicLeaf
    from tracebound.integrations.llm.openai_leaf import OpenAICompatibleLeaf

__all__ = [
    "AnthropicLeaf",
    "LLMLeaf",
    "LeafCallFailed",
    "LeafConnectionError",
    "LeafMalformedResponse",
    "LeafRateLimited",
    "LeafResponse",
    "LeafStatusError",
    "LeafTimeout",
    "OpenAICompatibleLeaf",
    "ReceivedRequest",
    "RecordedExchange",
    "ReplayServer",
    "ScriptedLeaf",
    "TokenUsage",
    "load_exchanges",
]


def __getattr__(name: str) -> Any:
    # The adapters pull in their SDK; import them only when asked for.
    if name == "OpenAICompatibleLeaf":
        from tracebound.integrations.llm.openai_leaf import OpenAICompatibleLeaf  # noqa: PLC0415

        return OpenAICompatibleLeaf
    if name == "AnthropicLeaf":
        from tracebound.integrations.llm.anthropic_leaf import AnthropicLeaf  # noqa: PLC0415

        return AnthropicLeaf
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
