"""Injected time and ids are deterministic, so a recorded run replays to identical bytes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tracebound.errors import TraceboundError, ValidationFailed
from tracebound.sources import FixedClock, SequentialIds
from tracebound.system import RandomIds, SystemClock


def test_fixed_clock_steps_and_is_utc() -> None:
    clock = FixedClock(datetime(2026, 5, 18, 12, tzinfo=UTC), timedelta(seconds=2))
    assert [clock.now().second for _ in range(3)] == [0, 2, 4]
    assert clock.now().tzinfo is UTC
    with pytest.raises(ValidationFailed, match="timezone-aware"):
        FixedClock(datetime(2026, 1, 1))


def test_sequential_ids_repeat_exactly_across_instances() -> None:
    a, b = SequentialIds(namespace=9), SequentialIds(namespace=9)
    first = [a.new_id() for _ in range(5)]
    assert first == [b.new_id() for _ in range(5)]
    assert len(set(first)) == 5
    assert SequentialIds(namespace=1).new_id() != SequentialIds(namespace=2).new_id()


@pytest.mark.parametrize("namespace", [-1, 1 << 64, True, "7"])
def test_a_namespace_that_cannot_prefix_a_uuid_is_refused_at_once(namespace: object) -> None:
    with pytest.raises(ValidationFailed, match="namespace"):
        SequentialIds(namespace=namespace)  # type: ignore[arg-type]


def test_the_widest_namespace_still_makes_distinct_ids() -> None:
    ids = SequentialIds(namespace=(1 << 64) - 1)
    assert ids.new_id() != ids.new_id()


def test_bad_input_is_never_a_bare_value_error() -> None:
    # CONVENTIONS #7: one exception root; a caller's `except TraceboundError` is enough.
    for bad in (lambda: FixedClock(datetime(2026, 1, 1)), lambda: SequentialIds(-1)):
        with pytest.raises(TraceboundError):
            bad()


def test_system_sources_are_real() -> None:
    now = SystemClock().now()
    assert now.tzinfo is UTC and abs((datetime.now(UTC) - now).total_seconds()) < 60
    ids = RandomIds()
    assert ids.new_id() != ids.new_id()
