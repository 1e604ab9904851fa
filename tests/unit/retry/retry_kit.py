"""Shared pieces for the verifying side's tests: a real ledger, a tiny project, test doubles.

``Plan`` stands in for the planning side's ``PlanOutcome`` (same field names); ``Kit``
plays the planning side where a test needs one: it appends to the ledger stream
``attempts/<workflow_id>`` and writes ``chain_head.bin`` the way Phase 4 does.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from blake3 import blake3

from tracebound import FixedClock, Ledger, NoteSigner, SequentialIds, SQLiteStore
from tracebound.events.anchor import AttemptAnchor
from tracebound.events.catalog import AttemptAnchorRecorded, PlanOutcomeEmitted
from tracebound.ids import AttemptId
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.retry.gates import CommandGate, GateRunner
from tracebound.pipeline.retry.models import TrustOutcome
from tracebound.pipeline.retry.sandbox import probe_network_isolation
from tracebound.store.blobs import BlobStore, FileBlobStore

WF = "wf-demo"
SECRET = "ghp_" + "Q" * 36  # GitHub-token shaped, never real

CALC = "def add(a, b):\n    return a - b\n"
TESTS = textwrap.dedent(
    """\
    from calc import add


    def test_add():
        assert add(2, 3) == 5, "two plus three"


    def test_zero():
        assert add(0, 0) == 0
    """
)
HEADER = "--- a/calc.py\n+++ b/calc.py\n"
FIX = HEADER + "@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"


def digest(patch: str) -> str:
    return blake3(patch.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Plan:
    """A local double of ``tracebound.pipeline.fallback.PlanOutcome`` (same field names)."""

    tag: str
    attempt_id: UUID
    attempt_index: int
    workflow_id: str
    patch: str | None
    patch_blake3: str | None
    refusal_reason: str | None = None
    prompt: str | None = None
    trust: TrustOutcome | None = None


def plan(index: int, patch: str | None = FIX, *, tag: str = "AppliedFromLlm", wf: str = WF) -> Plan:
    return Plan(
        tag=tag,
        attempt_id=UUID(int=1000 + index),
        attempt_index=index,
        workflow_id=wf,
        patch=patch,
        patch_blake3=None if patch is None else digest(patch),
        refusal_reason="no safe transform" if tag == "Refused" else None,
    )


def anchor(
    index: int,
    *,
    wf: str = WF,
    when: datetime | None = None,
    tag: str = "AppliedFromLlm",
) -> AttemptAnchor:
    refused = tag == "Refused"
    return AttemptAnchor.model_validate(
        {
            "attempt_id": UUID(int=1000 + index),
            "workflow_id": wf,
            "attempt_index": index,
            "advisory_id": "GHSA-demo",
            "prompt_digest_blake3": "a" * 64,
            "retrieved_evidence_chain_head": None,
            "retrieved_record_ids": (),
            "plan_proposal_kind": "refuse" if refused else "apply_transform",
            "response_digest_blake3": "b" * 64,
            "validator_outcome": tag,
            "refusal_reason": "no safe transform" if refused else None,
            "tokens_in": 120,
            "tokens_out": 40,
            "cost_usd": Decimal("0.0123"),
            "timestamp_utc": when or datetime(2026, 5, 18, 12, 0, tzinfo=UTC),
        }
    )


def make_project(root: Path, *, calc: str = CALC, tests: str = TESTS) -> Path:
    """A tiny project whose test fails until ``FIX`` is applied."""
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text(calc)
    (root / "conftest.py").write_text("")  # puts the project root on sys.path for pytest
    (root / "tests" / "test_calc.py").write_text(tests)
    return root


@dataclass
class Kit:
    root: Path
    ledger: Ledger
    redactor: Redactor = field(default_factory=lambda: Redactor(b"retry-tests-hmac-key"))

    @property
    def runs(self) -> Path:
        return self.root / "store" / "remediation"

    @property
    def evidence(self) -> BlobStore:
        return FileBlobStore(self.root / "store" / "blobs")

    def run_dir(self, wf: str = WF) -> Path:
        return self.runs / wf

    def begin(self, index: int, *, wf: str = WF) -> None:
        """Phase 4 before its hook: the attempt's planning events, no anchor yet."""
        self.ledger.record(
            f"attempts/{wf}",
            [
                PlanOutcomeEmitted(
                    attempt_id=AttemptId(UUID(int=1000 + index)),
                    attempt_index=index,
                    plan_proposal_kind="apply_transform",
                    outcome="AppliedFromLlm",
                )
            ],
            workflow_id=wf,
        )

    def close(self, p: Plan, trust: TrustOutcome | None) -> tuple[Plan, bytes]:
        """Phase 4 after its hook: the anchor (with the verdict), then chain_head.bin."""
        a = anchor(p.attempt_index, wf=p.workflow_id, tag=p.tag)
        if trust is not None:
            a = a.attach_trust_outcome(trust)
        (event,) = self.ledger.record(
            f"attempts/{p.workflow_id}",
            [AttemptAnchorRecorded(anchor=a)],
            workflow_id=p.workflow_id,
        )
        head = bytes(event.hash)
        run_dir = self.run_dir(p.workflow_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "chain_head.bin").write_bytes(head)
        return replace(p, trust=trust), head

    def planning_attempt(self, index: int, *, wf: str = WF) -> bytes:
        """A whole planning attempt without gates (events, anchor, chain_head.bin)."""
        self.begin(index, wf=wf)
        return self.close(plan(index, wf=wf), None)[1]

    def attempt(self, runner: GateRunner, p: Plan, target: Path) -> Plan:
        """One attempt in the order FallbackTier.run and the loop make it: planning events,
        the gates (the verify hook), the anchor and chain_head.bin, then the attempts log."""
        self.begin(p.attempt_index, wf=p.workflow_id)
        trust = None if p.tag == "Refused" else runner.verify(p, target=target)
        closed, _head = self.close(p, trust)
        runner.record_attempt(closed)
        return closed

    def runner(self, gates: Sequence[CommandGate], **kwargs: object) -> GateRunner:
        return GateRunner(
            gates,
            ledger=self.ledger,
            redactor=self.redactor,
            evidence=self.evidence,
            runs_root=self.runs,
            **kwargs,  # type: ignore[arg-type]
        )

    def gate_events(self, wf: str = WF) -> list[tuple[str, dict[str, Any], str | None]]:
        return [
            (e.event_type, e.payload.model_dump(mode="json"), e.correlation_id)
            for e in self.ledger.store.read_stream(f"gates/{wf}")
        ]


def open_kit(root: Path) -> Kit:
    """A Kit on a fresh SQLite ledger under ``root/store`` (signing key outside it)."""
    ledger = Ledger(
        SQLiteStore(root / "store"),
        clock=FixedClock(),
        ids=SequentialIds(namespace=5),
        signer=NoteSigner("retry-test", bytes(range(32))),
        origin="tracebound.test/retry",
    )
    return Kit(root, ledger)


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    made = open_kit(tmp_path)
    yield made
    made.ledger.close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project")


@pytest.fixture(scope="session")
def isolated() -> bool:
    """Whether this machine can cut gates off the network (root or user namespaces)."""
    return probe_network_isolation().available
