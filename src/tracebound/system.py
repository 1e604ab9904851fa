"""The real clock and id source: the only place that reads the wall clock or makes UUIDs."""

from __future__ import annotations

import os
import weakref
from datetime import UTC, datetime
from typing import Final
from uuid import UUID, SafeUUID

__all__ = ["RandomIds", "SystemClock"]


class SystemClock:
    """Wall-clock time in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


_CLEAR: Final = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
"""Everything but the version nibble and the two variant bits of a UUID's 128-bit int."""
_SET: Final = (0x4000 << 64) | (0x8000 << 48)
"""Version 4, variant RFC 4122 (``10``): what ``uuid4`` sets."""
_BATCH: Final = 256
"""Ids drawn from the OS per refill: one ``os.urandom`` call of 4 KB."""

_new_uuid = object.__new__
_set = object.__setattr__
_UNKNOWN: Final = SafeUUID.unknown


def _random_uuids(count: int) -> list[UUID]:
    """``count`` version-4 UUIDs from one ``os.urandom`` read (the source ``uuid4`` uses).

    Each gets exactly the attributes ``UUID.__init__`` would set: ``int`` and ``is_safe``.
    """
    raw = os.urandom(16 * count)
    from_bytes = int.from_bytes
    out: list[UUID] = []
    add = out.append
    for start in range(0, 16 * count, 16):
        uuid = _new_uuid(UUID)
        _set(uuid, "int", (from_bytes(raw[start : start + 16]) & _CLEAR) | _SET)
        _set(uuid, "is_safe", _UNKNOWN)
        add(uuid)
    return out


_LIVE: weakref.WeakSet[RandomIds] = weakref.WeakSet()


def _forget_pools() -> None:
    """In a forked child: drop every pool, so that parent and child never share an id."""
    for ids in list(_LIVE):
        ids._pool = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


class RandomIds:
    """Random (version 4) UUIDs, equal in kind to ``uuid.uuid4()``'s.

    ``uuid4()`` reads 16 bytes from the OS and runs ``UUID.__init__``'s argument checks
    (pure Python, ~1 µs) for every id. Here the bytes come 4 KB at a time (one
    ``os.urandom`` call per 256 ids), the version and variant bits are set on the int as
    ``uuid4`` sets them, and each ``UUID`` gets exactly the two attributes ``__init__``
    would give it (``int`` and ``is_safe``), all in one loop per refill. A forked child
    starts with an empty pool, so unused ids are never handed out twice. ``list.pop`` is
    atomic, so threads may share an instance.
    """

    __slots__ = ("__weakref__", "_pool")

    def __init__(self) -> None:
        self._pool: list[UUID] = []
        _LIVE.add(self)

    def new_id(self) -> UUID:
        try:
            return self._pool.pop()
        except IndexError:
            pool = _random_uuids(_BATCH)
            uuid = pool.pop()
            self._pool = pool
            return uuid
