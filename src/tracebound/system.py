"""The real clock and id source: the only place that reads the wall clock or makes UUIDs."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID, uuid4

__all__ = ["RandomIds", "SystemClock"]


class SystemClock:
    """Wall-clock time in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class RandomIds:
    """Random (version 4) UUIDs."""

    def new_id(self) -> UUID:
        return uuid4()
