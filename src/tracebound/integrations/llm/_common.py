"""Shared by the provider adapters: the missing-extra error and the response digest."""

from __future__ import annotations

from blake3 import blake3

from tracebound.errors import ConfigError

__all__ = ["digest", "missing_extra", "raw_body"]


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
