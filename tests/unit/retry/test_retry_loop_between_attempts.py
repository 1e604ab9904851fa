"""The retry loop interrupted *between* two attempts: after ``RetryRequested`` for attempt N
was written, before the planning side anchored attempt N+1.

Nothing of attempt N+1 is on the record (the tier failed before its first event, or was
never called), so it has nothing to close. But the remediation stopped, and the last thing
it said was that it would retry: it must still end with exactly one ``AttemptRefused``,
for attempt N (the last attempt made, whose retry was not), ``not_retryable``, whose reason
names the error. Then the original error surfaces unchanged. A run stopped before attempt 0
was anchored asked for nothing and still writes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.fence.fallback_kit import Kit, PromptRedactorFails
from tests.unit.retry.test_retry_loop_raises import (
    WF,
    _anchors,
    _assert_refused_last,
    _gate_events,
    _inspect_ok,
    _loop,
)

from tracebound.events.catalog import AttemptRefused
from tracebound.pipeline.fallback import PlanningFailed
from tracebound.pipeline.retry.ledger import verify_attempts
from tracebound.pipeline.retry.loop import RetryLoop
from tracebound.projections.fold import fold
from tracebound.projections.gates import GATE_CAUSES, GATE_STATS, TrustGateProjection
from tracebound.projections.memory import project

INTERRUPTS = [KeyboardInterrupt(), asyncio.CancelledError(), SystemExit(3)]


def _after_retry_requested(loop: RetryLoop, fault: Callable[[], None]) -> None:
    """Arm ``fault`` once ``RetryRequested`` is written and ``request_retry`` has returned."""
    real = loop.gates.request_retry

    def request_retry(*args: Any, **kwargs: Any) -> Any:
        recorded = real(*args, **kwargs)
        fault()
        return recorded

    loop.gates.request_retry = request_retry  # type: ignore[method-assign]


def _raise_in_tier_run(loop: RetryLoop, exc: BaseException) -> Callable[[], None]:
    """The next ``tier.run`` raises ``exc`` on entry (before the attempt's first event)."""

    def arm() -> None:
        def run(*args: Any, **kwargs: Any) -> Any:
            raise exc

        loop.tier.run = run  # type: ignore[method-assign]

    return arm


def _raise_in_clock(loop: RetryLoop, exc: BaseException) -> Callable[[], None]:
    """The next ``clock.now()`` raises ``exc``: the loop's own timing of attempt N+1."""
    clock = loop.ledger.clock

    def arm() -> None:
        real = clock.now

        def now() -> Any:
            clock.now = real  # type: ignore[method-assign]
            raise exc

        clock.now = now  # type: ignore[method-assign]

    return arm


def _assert_one_closing_refusal(kit: Kit, *, reason_starts: str, index: int = 0) -> None:
    """Exactly one ``AttemptRefused``, the run's last record, for attempt ``index`` whose
    retry was requested; attempt ``index + 1`` never anchored; the run verifies."""
    assert len(_anchors(kit)) == index + 1
    kinds = [e.event_type for e in _gate_events(kit)]
    assert kinds[-2:] == ["retry_requested", "attempt_refused"]
    refused = _assert_refused_last(
        kit, cause="not_retryable", reason_starts=reason_starts, index=index
    )
    assert f"before attempt {index + 1} was anchored" in refused.reason
    assert f"the retry requested after attempt {index} was not made" in refused.reason
    state = verify_attempts(kit.tier.workdir / WF)
    assert state.ok and [a.attempt_index for a in state.attempts] == list(range(index + 1))
    _inspect_ok(kit)


@pytest.mark.parametrize("exc", INTERRUPTS, ids=lambda e: type(e).__name__)
def test_an_interrupt_in_the_tier_before_the_retry_is_anchored_closes_the_run(
    tmp_path: Path, exc: BaseException
) -> None:
    # Attempt 0 fails its gates, RetryRequested is written; the tier is interrupted while it
    # builds attempt 1's prompt, before the attempt's first event.
    kit, loop = _loop(tmp_path, gate_exit=1, retries=1)
    kit.tier._redactor = PromptRedactorFails(exc, prompt=2)
    try:
        with pytest.raises(type(exc)) as info:
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        assert info.value is exc  # the interrupt still interrupts, as itself
        assert kit.tier._redactor.prompts == 2
        _assert_one_closing_refusal(kit, reason_starts=f"interrupted ({type(exc).__name__})")
    finally:
        kit.close()


def test_a_planning_failure_before_the_retry_is_anchored_closes_the_run(tmp_path: Path) -> None:
    kit, loop = _loop(tmp_path, gate_exit=1, retries=1)
    bug = MemoryError("quoting ghp_secret")
    kit.tier._redactor = PromptRedactorFails(bug, prompt=2)
    try:
        with pytest.raises(PlanningFailed) as info:
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        assert not info.value.anchored and info.value.__cause__ is bug  # as the tier raised it
        assert info.value.attempt_id != _anchors(kit)[0].anchor.attempt_id
        _assert_one_closing_refusal(kit, reason_starts="tier_error (MemoryError)")
        (refused,) = [e.payload for e in _gate_events(kit) if e.event_type == "attempt_refused"]
        assert "ghp_secret" not in refused.reason
    finally:
        kit.close()


@pytest.mark.parametrize(
    ("where", "exc", "reason_starts"),
    [
        ("tier.run", KeyboardInterrupt(), "interrupted (KeyboardInterrupt)"),
        ("tier.run", RuntimeError("boom"), "error (RuntimeError)"),
        ("clock.now", KeyboardInterrupt(), "interrupted (KeyboardInterrupt)"),
        ("clock.now", OSError("clock"), "error (OSError)"),
    ],
)
def test_an_error_in_the_loop_between_two_attempts_closes_the_run(
    tmp_path: Path, where: str, exc: BaseException, reason_starts: str
) -> None:
    kit, loop = _loop(tmp_path, gate_exit=1, retries=1)
    arm = _raise_in_tier_run if where == "tier.run" else _raise_in_clock
    _after_retry_requested(loop, arm(loop, exc))
    try:
        with pytest.raises(type(exc)) as info:
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        assert info.value is exc  # unchanged: not wrapped, not replaced
        _assert_one_closing_refusal(kit, reason_starts=reason_starts)
    finally:
        kit.close()


def test_the_refusal_is_for_the_last_attempt_made(tmp_path: Path) -> None:
    # Attempts 0 and 1 fail their gates, both retries are requested; attempt 2 never anchors.
    kit, loop = _loop(tmp_path, gate_exit=1, retries=2)
    kit.tier._redactor = PromptRedactorFails(KeyboardInterrupt(), prompt=3)
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        kinds = [e.event_type for e in _gate_events(kit)]
        assert kinds.count("retry_requested") == 2
        _assert_one_closing_refusal(kit, reason_starts="interrupted (KeyboardInterrupt)", index=1)
    finally:
        kit.close()


def test_projections_see_a_stopped_run_not_a_running_one(tmp_path: Path) -> None:
    kit, loop = _loop(tmp_path, gate_exit=1, retries=1)
    kit.tier._redactor = PromptRedactorFails(KeyboardInterrupt(), prompt=2)
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        events = list(kit.ledger.store.read_log())
        state = fold(events, workflow_id=WF)
        # One attempt made, one retry requested and not made, then the refusal: the fold
        # does not count the unmade retry as an attempt.
        assert (state.status, state.refused_cause) == ("refused", "not_retryable")
        assert (state.attempts, state.retries, state.anchors) == (1, 1, 1)
        rows = project([TrustGateProjection()], events)
        assert {r["gate"]: r["retries"] for r in rows[GATE_STATS.name]} == {"exit": 1, "patch": 0}
        refusals = [r for r in rows[GATE_CAUSES.name] if r["kind"] == "refusal"]
        assert refusals == [{"kind": "refusal", "gate": "", "cause": "not_retryable", "count": 1}]
    finally:
        kit.close()


@pytest.mark.parametrize(
    "exc", [KeyboardInterrupt(), MemoryError()], ids=lambda e: type(e).__name__
)
def test_a_run_stopped_before_attempt_0_was_anchored_writes_nothing(
    tmp_path: Path, exc: BaseException
) -> None:
    kit, loop = _loop(tmp_path, gate_exit=1, retries=1)
    kit.tier._redactor = PromptRedactorFails(exc, prompt=1)
    try:
        with pytest.raises((type(exc), PlanningFailed)):
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        assert kit.kinds(WF) == [] and _gate_events(kit) == []
        assert not (kit.tier.workdir / WF / "attempts.jsonl").exists()
    finally:
        kit.close()


def test_a_failed_closing_write_is_noted_and_the_interrupt_still_surfaces(
    tmp_path: Path,
) -> None:
    kit, loop = _loop(tmp_path, gate_exit=1, retries=1)
    exc = KeyboardInterrupt()
    kit.tier._redactor = PromptRedactorFails(exc, prompt=2)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the gate stream is gone")

    loop.gates.refuse = refuse  # type: ignore[method-assign]
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        assert info.value is exc
        notes = " ".join(getattr(info.value, "__notes__", []))
        assert "AttemptRefused" in notes and "RuntimeError" in notes
        assert not any(isinstance(e.payload, AttemptRefused) for e in _gate_events(kit))
    finally:
        kit.close()
