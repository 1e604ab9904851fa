"""The retry loop when it fails *after* ``FallbackTier.run`` returned a plan.

The tier has done its work by then: the attempt is anchored, ``chain_head.bin`` moved, the
reservation settled. If an interrupt lands, or the loop's own bookkeeping fails (the
attempts log, the cost row, the retry request...), the attempt must still leave its
attempts-log line, its cost row and, unless it passed, exactly one typed
``AttemptRefused`` naming what stopped it; then the error surfaces (an interrupt as itself,
a non-tracebound error as ``BookkeepingFailed`` with the original as its ``__cause__``).

Faults are injected with monkeypatch at the exact point; the ledger is a real SQLite file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.unit.retry.test_retry_loop_raises import (
    WF,
    NewVersionEachCall,
    _anchors,
    _assert_refused_last,
    _gate_events,
    _inspect_ok,
    _loop,
)

from tracebound.errors import StoreClosed
from tracebound.events.catalog import AttemptCompleted, CostIncurred
from tracebound.pipeline.retry.ledger import verify_attempts
from tracebound.pipeline.retry.loop import BookkeepingFailed


def _fail_once(real: Callable[..., Any], exc: BaseException) -> Callable[..., Any]:
    """``real``, except that its first call raises ``exc`` before doing anything."""
    calls: list[object] = []

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 1:
            raise exc
        return real(*args, **kwargs)

    return wrapper


def _fail_after(real: Callable[..., Any], exc: BaseException) -> Callable[..., Any]:
    """``real``, then ``exc``: the interrupt lands once the write is done."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise exc

    return wrapper


def _costs() -> str:
    return f"costs/{WF}"


def _closed_records(kit: Any) -> tuple[Any, list[Any], list[Any]]:
    """The attempts-log line, the cost rows and the learning rows of attempt 0."""
    state = verify_attempts(kit.tier.workdir / WF)
    assert state.ok
    (line,) = state.attempts
    costs = [e.payload for e in kit.ledger.store.read_stream(_costs())]
    learning = [e.payload for e in kit.ledger.store.read_stream(f"learning/{WF}")]
    return line, costs, learning


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), asyncio.CancelledError()])
def test_an_interrupt_before_the_attempts_line_still_records_the_attempt_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException
) -> None:
    # Gates fail and a retry is allowed: without the interrupt the loop would retry.
    kit, loop = _loop(tmp_path, gate_exit=1, retries=1)
    monkeypatch.setattr(loop.gates, "record_attempt", _fail_once(loop.gates.record_attempt, exc))
    try:
        with pytest.raises(type(exc)) as info:
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        assert info.value is exc  # the interrupt still interrupts, as itself
        (recorded,) = _anchors(kit)
        line, costs, learning = _closed_records(kit)
        # As what it was: the applied plan and its (failing) verdict, not a bare refusal.
        assert (line.attempt_id, line.plan_tag) == (recorded.anchor.attempt_id, "AppliedFromLlm")
        assert line.trust is not None and line.trust.passed is False
        assert [type(c) for c in costs] == [CostIncurred]
        assert costs[0].amount_usd == recorded.anchor.cost_usd > 0
        assert [type(p) for p in learning] == [AttemptCompleted]
        assert kit.budget.reserved_usd == 0  # the tier settled the reservation
        kinds = [e.event_type for e in _gate_events(kit)]
        assert "retry_requested" not in kinds
        _assert_refused_last(
            kit,
            cause="not_retryable",
            reason_starts=f"interrupted ({type(exc).__name__})",
            index=0,
        )
        _inspect_ok(kit)
    finally:
        kit.close()


def test_a_passed_attempt_interrupted_before_its_line_is_recorded_and_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kit, loop = _loop(tmp_path, gate_exit=0)
    real = loop.gates.record_attempt
    monkeypatch.setattr(loop.gates, "record_attempt", _fail_once(real, KeyboardInterrupt()))
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        line, costs, learning = _closed_records(kit)
        assert line.trust is not None and line.trust.passed
        assert len(costs) == 1 and [p.kind for p in learning] == [
            "attempt_completed",
            "solution_found",
        ]
        # It passed the gates: it did not end without success, so nothing refuses it.
        assert "attempt_refused" not in [e.event_type for e in _gate_events(kit)]
        _inspect_ok(kit)
    finally:
        kit.close()


@pytest.mark.parametrize(
    ("where", "what"),
    [
        ("_record_cost", "the cost row"),
        ("_record_learning", "the learning rows"),
        ("gates.request_retry", "the retry request"),
        ("blobs.put", "the retry request"),
    ],
)
def test_a_bookkeeping_failure_leaves_a_typed_refusal_and_raises_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, what: str
) -> None:
    kit, loop = _loop(tmp_path, gate_exit=1, retries=1)
    bug = RuntimeError("bookkeeping bug quoting ghp_secret")

    def broken(*args: object, **kwargs: object) -> None:
        raise bug

    if where == "blobs.put":  # the loop's own store only: the gates keep their evidence
        monkeypatch.setattr(loop, "blobs", SimpleNamespace(put=broken))
    else:
        owner, _, name = where.rpartition(".")
        monkeypatch.setattr(getattr(loop, owner) if owner else loop, name, broken)
    try:
        with pytest.raises(BookkeepingFailed) as info:
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        assert info.value.__cause__ is bug
        assert info.value.cause == "RuntimeError" and info.value.step == what
        assert "ghp_secret" not in str(info.value)
        (line,) = verify_attempts(kit.tier.workdir / WF).attempts
        assert line.plan_tag == "AppliedFromLlm" and line.trust is not None
        refused = _assert_refused_last(
            kit, cause="not_retryable", reason_starts="record_error (RuntimeError)", index=0
        )
        assert what in refused.reason and "ghp_secret" not in refused.reason
        if where in {"_record_cost", "_record_learning"}:
            # Tried again while closing, failed again: said on the error, not swallowed.
            notes = " ".join(getattr(info.value, "__notes__", []))
            assert what in notes
        _inspect_ok(kit)
    finally:
        kit.close()


def test_a_tracebound_error_in_the_bookkeeping_surfaces_as_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kit, loop = _loop(tmp_path, gate_exit=1, retries=1)
    closed = StoreClosed("the blob store is gone")

    def broken(*args: object, **kwargs: object) -> None:
        raise closed

    monkeypatch.setattr(loop, "blobs", SimpleNamespace(put=broken))
    try:
        with pytest.raises(StoreClosed) as info:
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        assert info.value is closed
        _assert_refused_last(
            kit, cause="not_retryable", reason_starts="record_error (StoreClosed)", index=0
        )
    finally:
        kit.close()


def test_an_interrupt_after_retry_requested_is_written_closes_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kit, loop = _loop(tmp_path, gate_exit=1, retries=1)
    real = loop.gates.request_retry
    monkeypatch.setattr(loop.gates, "request_retry", _fail_after(real, KeyboardInterrupt()))
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        kinds = [e.event_type for e in _gate_events(kit)]
        assert kinds[-2:] == ["retry_requested", "attempt_refused"]
        _assert_refused_last(
            kit, cause="not_retryable", reason_starts="interrupted (KeyboardInterrupt)", index=0
        )
        _inspect_ok(kit)
    finally:
        kit.close()


def test_an_interrupt_after_the_final_refusal_adds_no_second_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kit, loop = _loop(tmp_path, gate_exit=1, retries=0)
    real = loop.gates.refuse
    monkeypatch.setattr(loop.gates, "refuse", _fail_after(real, KeyboardInterrupt()))
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        # The refusal the loop decided on is the one: exactly one, as it was written.
        _assert_refused_last(
            kit, cause="retry_limit", reason_starts="no patch passed the gates", index=0
        )
        line, costs, _ = _closed_records(kit)
        assert line.trust is not None and len(costs) == 1
        _inspect_ok(kit)
    finally:
        kit.close()


def test_an_interrupt_in_the_cost_row_is_recorded_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kit, loop = _loop(tmp_path, gate_exit=1, retries=1)
    monkeypatch.setattr(loop, "_record_cost", _fail_once(loop._record_cost, KeyboardInterrupt()))
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        _line, costs, learning = _closed_records(kit)  # one attempts line, not two
        assert len(costs) == 1 and len(learning) == 1
        _assert_refused_last(
            kit, cause="not_retryable", reason_starts="interrupted (KeyboardInterrupt)", index=0
        )
        _inspect_ok(kit)
    finally:
        kit.close()


def test_the_cost_row_carries_the_attempts_cache_writes(tmp_path: Path) -> None:
    """Cache writes are billed above plain input; the loop's cost row counted them as plain
    input (CostIncurred had no field for them), so the cost ledger could not show them."""
    leaf = NewVersionEachCall([], cache_write_input_tokens=30, cache_write_long_input_tokens=10)
    kit, loop = _loop(tmp_path, leaf=leaf)
    try:
        loop.run(kit.ctx(), workflow_id=WF, target=kit.repo)
        (cost,) = [e.payload for e in kit.ledger.store.read_stream(_costs())]
        assert isinstance(cost, CostIncurred)
        assert (cost.cache_write_input_tokens, cost.cache_write_long_input_tokens) == (30, 10)
        (anchor,) = _anchors(kit)
        assert anchor.anchor.extras["phase4.cache_write_long_input_tokens"] == "10"
    finally:
        kit.close()
