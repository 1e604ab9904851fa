"""Shared by the provider adapters: the typed failures, the missing-extra error, the digest.

Every failure of a provider call is a :class:`LeafCallFailed` (so the tier refuses the
attempt instead of crashing), and the subclass says which kind, because an operator reacts
differently to each: back off on :class:`LeafRateLimited`, raise the timeout on
:class:`LeafTimeout`, fix the server on :class:`LeafMalformedResponse`. The tier records
the class name in the anchor (``phase4.leaf_error``), never the message, which may quote
the provider's error body.
"""

from __future__ import annotations

from math import inf
from typing import Any

from blake3 import blake3

from tracebound.errors import ConfigError
from tracebound.pipeline.fallback.leaf import LeafCallFailed

__all__ = [
    "PARSE_ERRORS",
    "LeafConnectionError",
    "LeafMalformedResponse",
    "LeafRateLimited",
    "LeafStatusError",
    "LeafTimeout",
    "check_settings",
    "digest",
    "missing_extra",
    "raw_body",
    "sdk_failure",
    "usage_field",
]


class LeafConnectionError(LeafCallFailed):
    """No answer came back: the connection failed (after the SDK's retries)."""


class LeafTimeout(LeafConnectionError):
    """No answer came back within the adapter's ``timeout`` (after the SDK's retries)."""


class LeafStatusError(LeafCallFailed):
    """The provider answered with an error status (``status_code``), after the SDK's retries."""

    def __init__(self, message: str, *, status_code: int) -> None:
        self.status_code = status_code
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_status_error, (type(self), str(self), self.status_code))


class LeafRateLimited(LeafStatusError):
    """HTTP 429: the provider's rate limit or quota; retrying later may succeed."""


class LeafMalformedResponse(LeafCallFailed):
    """A success status whose body cannot be used: not JSON, no answer, no or bad usage.

    A body without a usable ``usage`` block is one of these: its cost could not be
    reconciled against the budget.
    """


def _rebuild_status_error(
    cls: type[LeafStatusError], message: str, status_code: int
) -> LeafStatusError:
    return cls(message, status_code=status_code)


PARSE_ERRORS: tuple[type[Exception], ...] = (
    AttributeError,
    LookupError,
    TypeError,
    ValueError,  # JSON and UTF-8 decoding errors, pydantic's ValidationError
    RecursionError,  # a body nested deeper than the JSON decoder's recursion limit
)
"""What reading an untrusted response body can raise, besides the SDK's own errors."""


def sdk_failure(what: str, exc: Exception, sdk: Any) -> LeafCallFailed:
    """The typed failure for an exception the SDK raised while making the call.

    ``sdk`` is the SDK module (``openai`` or ``anthropic``): both name their exceptions
    alike. The checks go from the most specific class to the least.
    """
    message = f"{what} failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, sdk.APITimeoutError):
        return LeafTimeout(message)
    if isinstance(exc, sdk.APIConnectionError):
        return LeafConnectionError(message)
    if isinstance(exc, sdk.RateLimitError):
        return LeafRateLimited(message, status_code=exc.status_code)
    if isinstance(exc, sdk.APIStatusError):
        return LeafStatusError(message, status_code=exc.status_code)
    if isinstance(exc, sdk.APIResponseValidationError):
        return LeafMalformedResponse(message)
    return LeafCallFailed(message)


def check_settings(*, api_key: str, model: str, timeout: float, max_retries: int) -> None:
    """Refuse settings the SDKs would take and then misbehave with, or reject untyped.

    Raises:
        ConfigError: an empty key or model, a timeout that is not a positive number of
            seconds, or a negative retry count.
    """
    if not isinstance(api_key, str) or not api_key:
        raise ConfigError("the api_key must be a non-empty string")
    if not isinstance(model, str) or not model:
        raise ConfigError("the model name must be a non-empty string")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < inf:
        raise ConfigError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigError(f"max_retries must be a whole number >= 0, not {max_retries!r}")


def missing_extra(extra: str, package: str) -> ConfigError:
    return ConfigError(
        f"this leaf needs the {package!r} package: pip install 'tracebound[{extra}]'"
    )


def digest(body: bytes) -> str:
    """BLAKE3 of the exact response body, the anchor's ``response_digest_blake3``."""
    return blake3(body).hexdigest()


def raw_body(raw: object) -> bytes:
    """The exact body bytes of an SDK raw response, across SDK generations.

    Older SDKs return a "legacy" response with a ``content`` attribute; newer ones an
    ``APIResponse`` with ``read()``. The digest must be of the bytes on the wire, so the
    parsed model is never re-serialised instead.
    """
    content = getattr(raw, "content", None)
    if isinstance(content, bytes):
        return content
    read = getattr(raw, "read", None)
    if callable(read):
        data = read()
        if isinstance(data, bytes):
            return data
    raise TypeError(f"cannot read the body of a {type(raw).__name__}")


def usage_field(block: object, name: str) -> Any:
    """``block.name`` of a usage block, ``None`` when absent, whatever SDK version parsed it.

    The oldest SDK versions the extras allow (anthropic 0.34, openai 1.40) predate the cache
    and reasoning fields: such an SDK keeps a field it does not declare as the raw JSON (so a
    nested block is a ``dict``), and a field the body omits is no attribute at all. Read
    as attributes only, every answer of such a setup was refused as malformed.
    """
    if isinstance(block, dict):
        return block.get(name)
    return getattr(block, name, None)
