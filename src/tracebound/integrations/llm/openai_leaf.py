"""``OpenAICompatibleLeaf``: the chat-completions API, for OpenAI and compatible servers.

Token mapping (already the catalog's convention, so no arithmetic): ``prompt_tokens`` is
the input total and includes ``prompt_tokens_details.cached_tokens``;
``completion_tokens`` is the output total and includes
``completion_tokens_details.reasoning_tokens``. Servers that omit the details blocks report
zero cached and reasoning tokens. A response without a ``usage`` block is refused: its cost
could not be reconciled against the budget.

The prompt is sent as one user message, byte for byte the text whose digest
``PromptBuilt`` recorded.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ValidationError

from tracebound.integrations.llm._common import digest, missing_extra, raw_body
from tracebound.pipeline.fallback.leaf import LeafCallFailed, LeafResponse, TokenUsage

try:
    import openai
    from openai.types.chat import ChatCompletionMessageParam
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("openai", "openai") from exc

__all__ = ["OpenAICompatibleLeaf"]


class OpenAICompatibleLeaf:
    """An :class:`~tracebound.pipeline.fallback.LLMLeaf` over ``POST {base_url}/chat/completions``.

    Args:
        base_url: the API root, e.g. ``https://api.openai.com/v1``.
        api_key: the bearer token (never logged; the SDK sends it as a header).
        model: the model name the tier prices and requests.
        timeout: seconds per request.
        max_retries: the SDK's retries on connection errors, 429 and 5xx.
        token_limit_param: ``max_completion_tokens`` (OpenAI, reasoning models) or
            ``max_tokens`` (older compatible servers).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        model: str,
        timeout: float = 60.0,
        max_retries: int = 2,
        token_limit_param: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",  # noqa: S107 - a parameter name, not a secret
    ) -> None:
        self._model = model
        self._param = token_limit_param
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )

    @property
    def model(self) -> str:
        return self._model

    def close(self) -> None:
        self._client.close()

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> LeafResponse:
        """One chat completion.

        Raises:
            LeafCallFailed: transport error, error status, or an unusable body.
        """
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": prompt}]
        create = self._client.chat.completions.with_raw_response.create
        try:
            if self._param == "max_completion_tokens":
                raw = create(model=model, messages=messages, max_completion_tokens=max_tokens)
            else:
                raw = create(model=model, messages=messages, max_tokens=max_tokens)
            body = raw_body(raw)
            completion = raw.parse()
        except (openai.OpenAIError, TypeError, ValueError) as exc:
            raise LeafCallFailed(f"chat completion failed: {type(exc).__name__}: {exc}") from exc
        try:
            text = completion.choices[0].message.content or ""
            usage = completion.usage
            if usage is None:
                raise LeafCallFailed("the response has no usage block; its cost is unknown")
            details_in = usage.prompt_tokens_details
            details_out = usage.completion_tokens_details
            tokens = TokenUsage(
                input_tokens=usage.prompt_tokens,
                output_tokens=usage.completion_tokens,
                cached_input_tokens=(details_in.cached_tokens or 0) if details_in else 0,
                reasoning_tokens=(details_out.reasoning_tokens or 0) if details_out else 0,
            )
            return LeafResponse(
                text=text,
                usage=tokens,
                model=completion.model or model,
                raw_digest_blake3=digest(body),
            )
        except (IndexError, AttributeError, ValidationError) as exc:
            raise LeafCallFailed(f"unusable chat completion: {exc}") from exc
