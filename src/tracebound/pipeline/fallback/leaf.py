"""The LLM leaf: the one Protocol the planning tier calls a model through.

The tier (layer 3) depends only on this Protocol; the provider adapters live in
``tracebound.integrations.llm`` (layer 4) and the tier never imports them. Tests and demos
replace a provider at the HTTP boundary (a recorded-response server on loopback), or use
the in-process ``ScriptedLeaf`` test double; either way the tier's code path is the real one.

Token accounting follows the catalog's convention (``LeafReturned``): ``cached_input_tokens``
is a *part* of ``input_tokens`` and ``reasoning_tokens`` a *part* of ``output_tokens``.
Providers disagree (Anthropic reports cache reads beside the input count, OpenAI inside it),
so each adapter normalises to this one reading and a cost can never count a token twice.
"""

from __future__ import annotations

from typing import Annotated, Protocol, Self, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tracebound.errors import AttemptRefusedError
from tracebound.events.anchor import BLAKE3_HEX_PATTERN, Count

__all__ = ["LLMLeaf", "LeafCallFailed", "LeafResponse", "TokenUsage"]


class LeafCallFailed(AttemptRefusedError):
    """The model call itself failed (transport, HTTP status, malformed body).

    A subclass of :class:`~tracebound.errors.AttemptRefusedError` because the tier turns it
    into a typed refusal (``refusal_reason="leaf_error"``), never a crash. Adapters translate
    every SDK or transport exception into this class, so no ``openai.APIError`` or
    ``httpx`` error escapes the API (CONVENTIONS.md #7).
    """


class TokenUsage(BaseModel):
    """What one call consumed, normalised: cached ⊆ input, reasoning ⊆ output.

    ``cache_write_input_tokens`` (Anthropic's ``cache_creation_input_tokens``, OpenAI's
    ``prompt_tokens_details.cache_write_tokens``) is also a part of ``input_tokens``; it is
    kept apart because providers price cache writes above plain input.
    ``cache_write_long_input_tokens`` is the part of those writes made for the provider's
    longer retention (Anthropic's 1-hour cache, ``cache_creation.ephemeral_1h_input_tokens``),
    which is billed at a higher rate again: 2x input against 1.25x for 5 minutes.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: Count
    output_tokens: Count
    cached_input_tokens: Count = 0
    reasoning_tokens: Count = 0
    cache_write_input_tokens: Count = 0
    cache_write_long_input_tokens: Count = 0

    @model_validator(mode="after")
    def _parts_within_totals(self) -> Self:
        if self.cached_input_tokens + self.cache_write_input_tokens > self.input_tokens:
            raise ValueError("cached and cache-write tokens are parts of input_tokens")
        if self.cache_write_long_input_tokens > self.cache_write_input_tokens:
            raise ValueError("cache_write_long_input_tokens is a part of cache_write_input_tokens")
        if self.reasoning_tokens > self.output_tokens:
            raise ValueError("reasoning_tokens is a part of output_tokens")
        return self


class LeafResponse(BaseModel):
    """A model's answer as the tier records it.

    ``raw_digest_blake3`` is the BLAKE3 of the exact response bytes the provider sent (the
    HTTP body for the adapters), so a recorded response can be matched to an anchor later
    without storing the response itself.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    usage: TokenUsage
    model: Annotated[str, Field(min_length=1)]
    raw_digest_blake3: Annotated[str, Field(pattern=BLAKE3_HEX_PATTERN)]


@runtime_checkable
class LLMLeaf(Protocol):
    """A model the planning tier can ask for a patch.

    ``model`` is the leaf's configured model name: the tier passes it back to
    :meth:`complete` and looks its price up in the ``PricingTable`` before the call, so an
    unpriced model is refused before any money is spent.
    """

    @property
    def model(self) -> str: ...

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> LeafResponse:
        """Send ``prompt`` as-is and return the answer.

        Raises:
            LeafCallFailed: the call failed; the tier records a refusal.
        """
        ...
