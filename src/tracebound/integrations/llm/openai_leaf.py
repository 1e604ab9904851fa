"""``OpenAICompatibleLeaf``: the chat-completions API, for OpenAI and compatible servers.

Token mapping (already the catalog's convention, so no arithmetic): ``prompt_tokens`` is
the input total and includes ``prompt_tokens_details.cached_tokens``;
``completion_tokens`` is the output total and includes
``completion_tokens_details.reasoning_tokens``. ``prompt_tokens_details.cache_write_tokens``,
where a server reports it, is ``cache_write_input_tokens`` (part of the input, priced at the
cache-write rate). Servers that omit the details blocks report zero cached, cache-write and
reasoning tokens. A response without a ``usage`` block is refused: its cost
could not be reconciled against the budget.

The prompt is sent as one user message, byte for byte the text whose digest
``PromptBuilt`` recorded.
"""

from __future__ import annotations

from typing import Any, Literal

from tracebound.errors import ConfigError
from tracebound.integrations.llm._common import (
    PARSE_ERRORS,
    LeafMalformedResponse,
    check_settings,
    digest,
    missing_extra,
    raw_body,
    sdk_failure,
    usage_field,
)
from tracebound.pipeline.fallback.leaf import LeafResponse, TokenUsage

try:
    import openai
    from openai.types.chat import ChatCompletionMessageParam
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("openai", "openai") from exc

__all__ = ["OpenAICompatibleLeaf"]

_UNUSABLE: tuple[type[Exception], ...] = (*PARSE_ERRORS, openai.OpenAIError)
"""What reading a success body can raise: all of it means the body cannot be used."""


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
        check_settings(api_key=api_key, model=model, timeout=timeout, max_retries=max_retries)
        self._model = model
        self._param = token_limit_param
        try:
            self._client = openai.OpenAI(
                base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
            )
        except (openai.OpenAIError, TypeError, ValueError) as exc:
            raise ConfigError(f"cannot configure the OpenAI client: {exc}") from exc

    @property
    def model(self) -> str:
        return self._model

    def close(self) -> None:
        self._client.close()

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> LeafResponse:
        """One chat completion.

        Raises:
            LeafTimeout: no answer within ``timeout`` (a :class:`LeafConnectionError`).
            LeafConnectionError: the server could not be reached.
            LeafRateLimited: HTTP 429 (a :class:`LeafStatusError`).
            LeafStatusError: any other error status.
            LeafMalformedResponse: a success status with a body that cannot be used.
            LeafCallFailed: anything else the SDK raised; the base of all of the above.
        """
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": prompt}]
        create = self._client.chat.completions.with_raw_response.create
        try:
            if self._param == "max_completion_tokens":
                raw = create(model=model, messages=messages, max_completion_tokens=max_tokens)
            else:
                raw = create(model=model, messages=messages, max_tokens=max_tokens)
        except (openai.OpenAIError, TypeError, ValueError) as exc:
            raise sdk_failure("chat completion", exc, openai) from exc
        try:
            # The body is untrusted input: anything it makes the parser raise is a
            # malformed response, never an exception of its own kind.
            body = raw_body(raw)
            completion = raw.parse()
            text = completion.choices[0].message.content or ""
            return LeafResponse(
                text=text,
                usage=_token_usage(completion.usage),
                model=completion.model or model,
                raw_digest_blake3=digest(body),
            )
        except _UNUSABLE as exc:
            raise LeafMalformedResponse(
                f"unusable chat completion: {type(exc).__name__}: {exc}"
            ) from exc


def _token_usage(usage: Any) -> TokenUsage:
    """The completion's ``usage``, already in the catalog's convention (see the module's
    docstring).

    Raises:
        LeafMalformedResponse: there is no usage block.
    """
    if usage is None:
        raise LeafMalformedResponse("the response has no usage block; its cost is unknown")
    details_in = usage_field(usage, "prompt_tokens_details")
    details_out = usage_field(usage, "completion_tokens_details")
    return TokenUsage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cached_input_tokens=_optional(details_in, "cached_tokens"),
        cache_write_input_tokens=_optional(details_in, "cache_write_tokens"),
        reasoning_tokens=_optional(details_out, "reasoning_tokens"),
    )


def _optional(block: object, name: str) -> Any:
    """A count of a details block the server may omit, or give as null: 0 then."""
    value = usage_field(block, name)
    return 0 if value is None else value
