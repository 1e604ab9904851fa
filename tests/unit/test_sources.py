"""Injected time and ids are deterministic, so a recorded run replays to identical bytes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tracebound.sources import FixedClock, SequentialIds
from tracebound.system import RandomIds, SystemClock


def test_fixed_clock_steps_and_is_utc() -> None:
    clock = FixedClock(datetime(2026, 5, 18, 12, tzinfo=UTC), timedelta(seconds=2))
    assert [clock.now().second for _ in range(3)] == [0, 2, 4]
    assert clock.now().tzinfo is UTC
    with pytest.raises(ValueError, match="timezone-aware"):
        FixedClock(datetime(2026, 1, 1))


def test_sequential_ids_repeat_exactly_across_instances() -> None:
    a, b = SequentialIds(namespace=9), SequentialIds(namespace=9)
    first = [a.new_id() for _ in range(5)]
    assert first == [b.new_id() for _ in range(5)]
    assert len(set(first)) == 5
    assert SequentialIds(namespace=1).new_id() != SequentialIds(namespace=2).new_id()


def test_system_sources_are_real() -> None:
    now = SystemClock().now()
    assert now.tzinfo is UTC and abs((datetime.now(UTC) - now).total_seconds()) < 60
    ids = RandomIds()
    assert ids.new_id() != ids.new_id()
