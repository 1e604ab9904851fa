"""``ScriptedLeaf``: an in-process test double for the LLM leaf. Not HTTP, not a provider.

It exists for unit tests and documentation examples that exercise the tier's logic without
an adapter. Anything that should prove an adapter works goes through
:class:`~tracebound.integrations.llm.ReplayServer` instead, which the real adapters talk
HTTP to. The answer is chosen like the replay server chooses: the first rule whose ``match``
substring occurs in the prompt (``None`` matches anything).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from blake3 import blake3

from tracebound.pipeline.fallback.leaf import LeafCallFailed, LeafResponse, TokenUsage

__all__ = ["ScriptedLeaf"]


class ScriptedLeaf:
    """Answers from a script of ``(match, answer)`` rules; records every prompt it got.

    Token counts are a deterministic stand-in (4 bytes a token), capped at ``max_tokens``
    like a real model's output. ``fail=True`` makes every call raise
    :class:`~tracebound.pipeline.fallback.LeafCallFailed`, to test that path.
    """

    def __init__(
        self,
        script: Sequence[tuple[str | None, str]],
        *,
        model: str = "scripted-model",
        fail: bool = False,
        cached_input_tokens: int = 0,
        reasoning_tokens: int = 0,
        cache_write_input_tokens: int = 0,
        cache_write_long_input_tokens: int = 0,
    ) -> None:
        self._script = tuple(script)
        self._model = model
        self._fail = fail
        self._cached = cached_input_tokens
        self._reasoning = reasoning_tokens
        self._written = (cache_write_input_tokens, cache_write_long_input_tokens)
        self.prompts: list[str] = []

    @property
    def model(self) -> str:
        return self._model

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> LeafResponse:
        self.prompts.append(prompt)
        if self._fail:
            raise LeafCallFailed("scripted failure")
        answer = next((a for m, a in self._script if m is None or m in prompt), None)
        if answer is None:
            raise LeafCallFailed("no scripted answer matches the prompt")
        tokens_in = math.ceil(len(prompt.encode()) / 4)
        tokens_out = min(max_tokens, max(math.ceil(len(answer.encode()) / 4), self._reasoning))
        cached = min(self._cached, tokens_in)
        written = min(self._written[0], tokens_in - cached)
        return LeafResponse(
            text=answer,
            usage=TokenUsage(
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                cached_input_tokens=cached,
                reasoning_tokens=min(self._reasoning, tokens_out),
                cache_write_input_tokens=written,
                cache_write_long_input_tokens=min(self._written[1], written),
            ),
            model=model,
            raw_digest_blake3=blake3(answer.encode()).hexdigest(),
        )
