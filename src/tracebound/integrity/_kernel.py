"""The optional C verify kernel (``tracebound._verifykernel``), or None.

The kernel runs :meth:`~tracebound.integrity.verify.ChunkVerifier.feed_page`'s acceptance
loop in C: BLAKE3 of a whole page in SIMD lanes, the suffix and link checks, and the Merkle
leaf hashes (ADR 0007). It only ever *accepts* records; whatever it does not accept goes to
the Python path, which writes every damage report.

It is used when it was built and the C canonical encoder is in use: the one switch
``TRACEBOUND_PURE_PYTHON=1``, read by :mod:`tracebound.canonical` (the core's only contact
with the environment), turns off every C extension at once.
"""

from __future__ import annotations

from types import ModuleType
from typing import Final

from tracebound import canonical

__all__ = ["ABI", "KERNEL", "load"]

ABI: Final = 2
"""The kernel interface this Python code speaks; a stale build with another one is ignored."""


def load() -> ModuleType | None:
    """The kernel module, or None if unbuilt, stale, or C extensions are switched off."""
    if canonical._IMPLEMENTATION != "c":
        return None
    try:
        from tracebound import _verifykernel  # type: ignore[attr-defined]  # noqa: PLC0415
    except ImportError:
        return None
    module: ModuleType = _verifykernel
    if getattr(module, "ABI", None) != ABI:
        return None
    return module


KERNEL: ModuleType | None = load()
"""The loaded kernel. Tests set it to None (on this module and on its users) to compare."""
