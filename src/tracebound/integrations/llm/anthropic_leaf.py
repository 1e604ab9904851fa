"""``AnthropicLeaf``: the Messages API.

Token mapping to the catalog's "cached ⊆ input" convention, explicitly: Anthropic reports
``input_tokens`` *excluding* the cache, with cache reads (``cache_read_input_tokens``) and
cache writes (``cache_creation_input_tokens``) beside it. So

* ``input_tokens`` (ours) = ``input_tokens + cache_read_input_tokens +
  cache_creation_input_tokens``
* ``cached_input_tokens`` (ours) = ``cache_read_input_tokens`` (billed at the cached rate)
* ``cache_write_input_tokens`` (ours) = ``cache_creation_input_tokens`` (billed at the
  cache-write rate if the pricing table has one, else at the input rate)
* ``cache_write_long_input_tokens`` (ours) = ``cache_creation.ephemeral_1h_input_tokens``
  (the 1-hour cache's writes, billed at the long cache-write rate), when the API reports
  the breakdown by retention. The breakdown must add up to ``cache_creation_input_tokens``:
  a body where it does not is refused, because its cost would be a guess.
* ``output_tokens`` = ``output_tokens``, which already includes extended-thinking tokens;
  ``reasoning_tokens`` = ``output_tokens_details.thinking_tokens`` when the API reports
  it, else 0.
"""

from __future__ import annotations

from typing import Any

from tracebound.errors import ConfigError, short_repr
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
    import anthropic
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("anthropic", "anthropic") from exc

__all__ = ["AnthropicLeaf"]

_UNUSABLE: tuple[type[Exception], ...] = (*PARSE_ERRORS, anthropic.AnthropicError)
"""What reading a success body can raise: all of it means the body cannot be used."""


class AnthropicLeaf:
    """An :class:`~tracebound.pipeline.fallback.LLMLeaf` over ``POST {base_url}/v1/messages``.

    Args:
        api_key: the ``x-api-key`` credential.
        model: the model name the tier prices and requests.
        base_url: the API root (``https://api.anthropic.com`` when ``None``).
        timeout: seconds per request.
        max_retries: the SDK's retries on connection errors, 429 and 5xx.
    """

    def __init__(
        self,
        api_key: str,
        *,
        model: str,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        check_settings(api_key=api_key, model=model, timeout=timeout, max_retries=max_retries)
        self._model = model
        try:
            self._client = anthropic.Anthropic(
                api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
            )
        except (anthropic.AnthropicError, TypeError, ValueError) as exc:
            raise ConfigError(f"cannot configure the Anthropic client: {exc}") from exc

    @property
    def model(self) -> str:
        return self._model

    def close(self) -> None:
        self._client.close()

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> LeafResponse:
        """One message.

        Raises:
            LeafTimeout: no answer within ``timeout`` (a :class:`LeafConnectionError`).
            LeafConnectionError: the server could not be reached.
            LeafRateLimited: HTTP 429 (a :class:`LeafStatusError`).
            LeafStatusError: any other error status (529 "overloaded" included).
            LeafMalformedResponse: a success status with a body that cannot be used.
            LeafCallFailed: anything else the SDK raised; the base of all of the above.
        """
        try:
            raw = self._client.messages.with_raw_response.create(
                model=model, max_tokens=max_tokens, messages=[{"role": "user", "content": prompt}]
            )
        except (anthropic.AnthropicError, TypeError, ValueError) as exc:
            raise sdk_failure("message", exc, anthropic) from exc
        try:
            # The body is untrusted input: anything it makes the parser raise is a
            # malformed response, never an exception of its own kind.
            body = raw_body(raw)
            message = raw.parse()
            text = "".join(
                getattr(block, "text", "") for block in message.content if block.type == "text"
            )
            return LeafResponse(
                text=text,
                usage=_token_usage(message.usage),
                model=message.model or model,
                raw_digest_blake3=digest(body),
            )
        except _UNUSABLE as exc:
            raise LeafMalformedResponse(f"unusable message: {type(exc).__name__}: {exc}") from exc


def _token_usage(u: Any) -> TokenUsage:
    """The message's ``usage`` in the catalog's convention (see the module's docstring)."""
    # Counts are summed here, so each is checked first: `true + 0` would be 1.
    uncached = _count(u.input_tokens, "input_tokens")
    cache_read = _count(_optional(u, "cache_read_input_tokens"), "cache_read_input_tokens")
    cache_write = _count(_optional(u, "cache_creation_input_tokens"), "cache_creation_input_tokens")
    long_write = _long_writes(usage_field(u, "cache_creation"), cache_write)
    details = usage_field(u, "output_tokens_details")
    return TokenUsage(
        input_tokens=uncached + cache_read + cache_write,
        output_tokens=u.output_tokens,
        cached_input_tokens=cache_read,
        cache_write_input_tokens=cache_write,
        cache_write_long_input_tokens=long_write,
        reasoning_tokens=_optional(details, "thinking_tokens"),
    )


def _optional(block: object, name: str) -> Any:
    """A count the API may omit or give as null: 0 then."""
    value = usage_field(block, name)
    return 0 if value is None else value


def _long_writes(breakdown: object, cache_write: int) -> int:
    """The 1-hour cache's share of ``cache_write`` from ``usage.cache_creation``, 0 when the
    API gives no breakdown."""
    if breakdown is None:
        return 0
    long_write, short_write = (
        _count(_optional(breakdown, name), f"cache_creation.{name}")
        for name in ("ephemeral_1h_input_tokens", "ephemeral_5m_input_tokens")
    )
    if long_write + short_write != cache_write:
        raise LeafMalformedResponse(
            f"usage.cache_creation gives {short_write} 5-minute and {long_write} 1-hour cache"
            f" writes, but cache_creation_input_tokens is {cache_write}"
        )
    return long_write


def _count(value: object, field: str) -> int:
    if type(value) is not int or value < 0:
        raise TypeError(f"usage.{field} is not a token count: {short_repr(value)}")
    return value
