"""RetryLedger (ADR-0005): the attempts log continues the planning chain, or refuses to start."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import pytest
from blake3 import blake3
from tests.unit.retry.retry_kit import WF, Kit

from tracebound.canonical import canonical_bytes
from tracebound.errors import AuditChainCorrupted, LedgerAttemptOutOfOrder, ValidationFailed
from tracebound.ids import AttemptId, WorkflowId
from tracebound.pipeline.retry.ledger import (
    REMEDIATION,
    AttemptRecord,
    RetryLedger,
    TrustSummary,
    verify_attempts,
)
from tracebound.pipeline.retry.models import FailingSignal, TrustOutcome

T0 = datetime(2026, 5, 18, 9, 0, tzinfo=UTC)
GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "phase4_chain_head.bin"


def record(
    index: int, head: bytes, *, attempt_id: int | None = None, passed: bool = False
) -> AttemptRecord:
    outcome = TrustOutcome(
        passed=passed,
        confidence="high",
        score=10_000 if passed else 5_000,
        failing_signals=()
        if passed
        else (FailingSignal(gate="tests", kind="test_failure", subject="tests/t.py::test_a"),),
        sandbox_run_id=f"sbx-{index}",
    )
    return AttemptRecord(
        workflow_id=WorkflowId(WF),
        attempt_index=index,
        attempt_id=AttemptId(UUID(int=attempt_id if attempt_id is not None else 1000 + index)),
        plan_tag="AppliedFromLlm",
        patch_blake3="c" * 64,  # type: ignore[arg-type]
        planning_chain_head=head,  # type: ignore[arg-type]
        trust=TrustSummary.from_outcome(outcome, network_isolated=True),
        started_at=T0 + timedelta(minutes=index),
        recorded_at=T0 + timedelta(minutes=index, seconds=30),
    )


def two_attempts(kit: Kit) -> tuple[Path, bytes]:
    """Planning attempt 0, gate record 0, planning attempt 1, gate record 1."""
    head0 = kit.planning_attempt(0)
    retry = RetryLedger(kit.run_dir(), prev_chain_head=head0)
    retry.record(record(0, head0))
    head1 = kit.planning_attempt(1)
    retry.ensure_usable(prev_chain_head=head1)
    retry.record(record(1, head1))
    return kit.run_dir() / "attempts.jsonl", head1


def test_chain_formula_continues_the_planning_head(kit: Kit) -> None:
    path, head1 = two_attempts(kit)
    lines = [json.loads(line) for line in path.read_bytes().splitlines()]
    head0 = bytes.fromhex(lines[0]["attempt"]["planning_chain_head"])
    # Recomputed here with blake3 directly: chain_hash = blake3(prev ‖ canonical(attempt)).
    prev = head0
    for line in lines:
        assert bytes.fromhex(line["prev_hash"]) == prev
        expected = blake3(prev + canonical_bytes(line["attempt"])).digest()
        assert bytes.fromhex(line["chain_hash"]) == expected
        prev = expected
    assert lines[1]["attempt"]["planning_chain_head"] == head1.hex()
    reopened = RetryLedger(kit.run_dir())  # chain_head.bin == the last line's planning head
    assert [a.attempt_index for a in reopened.attempts] == [0, 1]
    assert reopened.head == prev


def test_files_are_private_and_lines_canonical(kit: Kit) -> None:
    path, _ = two_attempts(kit)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for raw in path.read_bytes().splitlines():
        assert canonical_bytes(json.loads(raw)) == raw


def test_second_record_of_an_attempt_raises(kit: Kit) -> None:
    head = kit.planning_attempt(0)
    retry = RetryLedger(kit.run_dir(), prev_chain_head=head)
    retry.record(record(0, head))
    with pytest.raises(LedgerAttemptOutOfOrder, match="already recorded"):
        retry.record(record(0, head))
    with pytest.raises(LedgerAttemptOutOfOrder, match="already recorded"):
        retry.record(record(1, head, attempt_id=1000))  # same id, new index
    with pytest.raises(LedgerAttemptOutOfOrder, match="out of order"):
        retry.record(record(2, head))  # skips 1
    assert len(RetryLedger(kit.run_dir()).attempts) == 1


def test_record_must_be_bound_to_the_current_planning_head(kit: Kit) -> None:
    head = kit.planning_attempt(0)
    retry = RetryLedger(kit.run_dir(), prev_chain_head=head)
    with pytest.raises(AuditChainCorrupted, match="bound to planning head"):
        retry.record(record(0, bytes(32)))
    other = record(0, head).model_copy(update={"workflow_id": "wf-other"})
    retry.record(record(0, head))
    with pytest.raises(ValidationFailed, match="workflow"):
        retry.record(other.model_copy(update={"attempt_index": 1, "attempt_id": UUID(int=7)}))


@pytest.mark.parametrize("content", [None, b"", b"\x01" * 31, b"\x01" * 33])
def test_missing_or_short_head_refuses_with_remediation(kit: Kit, content: bytes | None) -> None:
    run_dir = kit.run_dir()
    run_dir.mkdir(parents=True)
    if content is not None:
        (run_dir / "chain_head.bin").write_bytes(content)
    with pytest.raises(AuditChainCorrupted) as info:
        RetryLedger(run_dir)
    message = str(info.value)
    assert "chain_head.bin" in message
    assert REMEDIATION in message


def test_prev_chain_head_must_match_the_file(kit: Kit) -> None:
    head = kit.planning_attempt(0)
    RetryLedger(kit.run_dir(), prev_chain_head=head)  # agrees: fine
    with pytest.raises(AuditChainCorrupted, match="rewritten"):
        RetryLedger(kit.run_dir(), prev_chain_head=bytes(32))


def test_phase4_head_rewritten_after_an_attempt_refuses_at_construction(kit: Kit) -> None:
    two_attempts(kit)
    (kit.run_dir() / "chain_head.bin").write_bytes(b"\x42" * 32)  # someone rewrote it
    with pytest.raises(AuditChainCorrupted) as info:
        RetryLedger(kit.run_dir())
    assert "chain_head.bin holds 4242" in str(info.value)
    assert "Do not run more gates" in str(info.value)


def test_a_new_head_is_accepted_only_when_vouched_and_never_backwards(kit: Kit) -> None:
    path, head1 = two_attempts(kit)
    head2 = kit.planning_attempt(2)
    with pytest.raises(AuditChainCorrupted, match="nothing vouches"):
        RetryLedger(kit.run_dir())
    assert RetryLedger(kit.run_dir(), prev_chain_head=head2).planning_head == head2
    assert verify_attempts(kit.run_dir(), prev_chain_head=head2).pending
    # Rolling chain_head.bin back to attempt 0's head is refused even if "vouched".
    head0 = bytes.fromhex(
        json.loads(path.read_bytes().splitlines()[0])["attempt"]["planning_chain_head"]
    )
    (kit.run_dir() / "chain_head.bin").write_bytes(head0)
    with pytest.raises(AuditChainCorrupted, match="earlier attempt"):
        RetryLedger(kit.run_dir(), prev_chain_head=head0)
    assert head1 != head0


def _rewrite(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def _edit_score(line: bytes) -> bytes:
    obj = json.loads(line)
    obj["attempt"]["trust"]["score"] = 9_999
    return canonical_bytes(obj)


@pytest.mark.parametrize(
    ("damage", "line", "what"),
    [
        (lambda ls: [ls[0], _edit_score(ls[1])], 2, "changed after it was written"),
        (lambda ls: [ls[1]], 1, "does not continue"),  # first line deleted
        (lambda ls: [ls[1], ls[0]], 1, "does not continue"),  # reordered
        (lambda ls: [ls[0], ls[1][:-5]], 2, "not JSON"),  # garbled
        (lambda ls: [ls[0], ls[1].replace(b'"attempt":', b'"attempt" :')], 2, "canonical"),
        (lambda ls: [ls[0], ls[1], ls[1]], 3, "does not continue"),  # replayed line
    ],
    ids=["tamper", "deleted", "reordered", "garbled", "reformatted", "replayed"],
)
def test_broken_lines_are_named(kit: Kit, damage: object, line: int, what: str) -> None:
    path, _ = two_attempts(kit)
    lines = path.read_bytes().splitlines()
    _rewrite(path, damage(lines))  # type: ignore[operator]
    with pytest.raises(AuditChainCorrupted) as info:
        RetryLedger(kit.run_dir())
    assert f"AuditChainCorrupted at line {line}:" in str(info.value)
    assert what in str(info.value)


def test_torn_tail_is_named(kit: Kit) -> None:
    path, _ = two_attempts(kit)
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(AuditChainCorrupted, match="line 2: the line is incomplete"):
        RetryLedger(kit.run_dir())


def _usable(retry: RetryLedger) -> bool:
    # Read afresh: mypy keeps ``retry.usable`` narrowed to True from an earlier assert,
    # across the calls that change it, and would call what follows unreachable.
    return retry.usable


def test_a_broken_ledger_stays_refused(kit: Kit) -> None:
    head = kit.planning_attempt(0)
    retry = RetryLedger(kit.run_dir(), prev_chain_head=head)
    retry.record(record(0, head))
    assert retry.usable
    path = kit.run_dir() / "attempts.jsonl"
    good = path.read_bytes()
    path.write_bytes(_edit_score(good.rstrip(b"\n")) + b"\n")
    with pytest.raises(AuditChainCorrupted, match="line 1"):
        retry.ensure_usable()
    path.write_bytes(good)  # putting the bytes back does not make it trustworthy again
    assert not _usable(retry)
    with pytest.raises(AuditChainCorrupted):
        retry.record(record(1, head))


def test_lines_appended_by_someone_else_are_noticed(kit: Kit) -> None:
    head = kit.planning_attempt(0)
    mine = RetryLedger(kit.run_dir(), prev_chain_head=head)
    theirs = RetryLedger(kit.run_dir(), prev_chain_head=head)
    theirs.record(record(0, head))
    with pytest.raises(AuditChainCorrupted, match="changed under this RetryLedger"):
        mine.record(record(0, head))


def test_continues_the_golden_phase4_head(tmp_path: Path) -> None:
    """The planning side's golden chain head (tests/golden/phase4_chain_head.bin) is a head
    this ledger can continue. Until that fixture lands, a head computed the way Phase 4
    computes it (the BLAKE3 chain of its attempt stream) stands in for it."""
    if GOLDEN.is_file():
        golden = GOLDEN.read_bytes()
    else:
        from tracebound import FixedClock, Ledger, SequentialIds, SQLiteStore
        from tracebound.events.catalog import PlanOutcomeEmitted

        with Ledger(
            SQLiteStore(tmp_path / "phase4"), clock=FixedClock(), ids=SequentialIds(), origin="g"
        ) as ledger:
            (event,) = ledger.record(
                f"attempts/{WF}",
                [
                    PlanOutcomeEmitted(
                        attempt_id=AttemptId(UUID(int=1000)),
                        attempt_index=0,
                        plan_proposal_kind="apply_transform",
                        outcome="AppliedFromLlm",
                    )
                ],
                workflow_id=WF,
            )
        golden = bytes(event.hash)
    assert len(golden) == 32
    run_dir = tmp_path / "remediation" / WF
    run_dir.mkdir(parents=True)
    (run_dir / "chain_head.bin").write_bytes(golden)
    retry = RetryLedger(run_dir, prev_chain_head=golden)
    first = retry.record(record(0, golden))
    assert (
        first
        == blake3(golden + canonical_bytes(record(0, golden).model_dump(mode="json"))).digest()
    )
    line = json.loads((run_dir / "attempts.jsonl").read_bytes())
    assert bytes.fromhex(line["prev_hash"]) == golden
