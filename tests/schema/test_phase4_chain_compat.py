"""ADR-0005: the planning side's chain head is pinned by a golden fixture.

A deterministic Phase 4 run (FixedClock, SequentialIds, fixed inputs; attempt 0 on the
recipe path, attempt 1 on the LLM retry path with a fenced failure summary) is recorded
into a fresh ledger; the ``chain_head.bin`` it writes must equal
``tests/golden/phase4_chain_head.bin`` byte for byte. Any change to the shape of Phase 4's
events (a renamed field, a new event, a different prompt layout, which changes the prompt
digest) changes the head, and this test fails loudly, because the verifying side's
RetryLedger continues this chain and refuses to start on a mismatch.

Regenerate (and then amend the ADR) with::

    TRACEBOUND_REGENERATE_GOLDEN=1 .venv/bin/pytest tests/schema/test_phase4_chain_compat.py
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.fence.fallback_kit import guard_network
from tracebound.integrations.llm import ScriptedLeaf
from tracebound.integrity.chain import HASH_SIZE, ChainCursor, parse_head
from tracebound.ledger import Ledger
from tracebound.pipeline.fallback import (
    PRIOR_ATTEMPTS_HEADER,
    Advisory,
    ApplyContext,
    Budget,
    FallbackTier,
    FenceWrapper,
    ModelPrice,
    PricingTable,
    RecipeBook,
    SolvedExampleStore,
    build_attempt_summary,
)
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.retry.models import FailingSignal
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.sqlite import SQLiteStore

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "phase4_chain_head.bin"
REGENERATE = "TRACEBOUND_REGENERATE_GOLDEN"
COMMAND = f"{REGENERATE}=1 .venv/bin/pytest tests/schema/test_phase4_chain_compat.py"

# Fixed inputs, inline so that editing a shared fixture cannot move the golden head.
ADVISORY = {
    "id": "GHSA-x84v-xcm2-53pg",
    "aliases": ["CVE-2018-18074"],
    "summary": "Insufficiently Protected Credentials in Requests",
    "details": "Requests before 2.20.0 sends an HTTP Authorization header to an http URI "
    "upon receiving a same-hostname https-to-http redirect.",
    "affected": [
        {
            "package": {"ecosystem": "PyPI", "name": "requests"},
            "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "2.20.0"}]}],
        }
    ],
}
REQUIREMENTS = "flask==2.0.1\nrequests==2.19.1\nurllib3==1.23\n"
ANSWER = (
    "```diff\n--- a/requirements.txt\n+++ b/requirements.txt\n@@ -1,3 +1,3 @@\n"
    " flask==2.0.1\n-requests==2.19.1\n+requests==2.32.3\n urllib3==1.23\n```\n"
)


def record_phase4_run(root: Path) -> tuple[bytes, Ledger]:
    """Run the deterministic two-attempt Phase 4 scenario; return chain_head.bin's bytes."""
    from datetime import UTC, datetime

    ledger = Ledger(
        SQLiteStore(root / "ledger"),
        clock=FixedClock(start=datetime(2026, 5, 12, 9, 0, tzinfo=UTC)),
        ids=SequentialIds(namespace=0x5),
    )
    repo = root / "repo"
    repo.mkdir()
    (repo / "requirements.txt").write_text(REQUIREMENTS)
    fence = FenceWrapper(ledger.ids)
    price = ModelPrice(
        input_per_mtok=Decimal("1.10"),
        cached_input_per_mtok=Decimal("0.275"),
        output_per_mtok=Decimal("4.40"),
    )
    tier = FallbackTier(
        ledger=ledger,
        recipes=RecipeBook(),
        retrieval=SolvedExampleStore(),
        leaf=ScriptedLeaf(
            [(PRIOR_ATTEMPTS_HEADER, ANSWER)], cached_input_tokens=256, reasoning_tokens=64
        ),
        budget=Budget(Decimal("2.00"), max_output_tokens=1024),
        pricing=PricingTable({"scripted-model": price}),
        fence=fence,
        redactor=Redactor(b"golden-redaction-key-0123456789"),
        workdir=root / ".tracebound" / "remediation",
    )
    ctx = ApplyContext(
        advisory=Advisory.model_validate(ADVISORY),
        repo_path=repo,
        package="requests",
        current_version="2.19.1",
    )
    first = tier.run(ctx, workflow_id="golden-run")
    summary = build_attempt_summary(
        attempt_id=first.attempt_id,
        sandbox_run_id="sbx-golden",
        failing_signals=[
            FailingSignal(
                gate="tests",
                kind="test_failure",
                subject="tests/test_api.py::test_session_redirect",
                message="AssertionError: Authorization header sent on https->http redirect",
                location="tests/test_api.py:41",
            )
        ],
        fence=fence,
    )
    second = tier.run(ctx, workflow_id="golden-run", attempt_index=1, prior_attempts=[summary])
    assert (first.tag, second.tag) == ("AppliedFromRecipe", "AppliedFromLlm")
    return tier.chain_head_path("golden-run").read_bytes(), ledger


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    return guard_network(monkeypatch)


def test_phase4_chain_head_matches_the_golden_fixture(tmp_path: Path) -> None:
    head, ledger = record_phase4_run(tmp_path)
    try:
        if os.environ.get(REGENERATE) == "1":
            GOLDEN.write_bytes(head)
            pytest.skip(f"regenerated {GOLDEN.name}: amend the ADR that records this change")
        assert GOLDEN.exists(), f"missing {GOLDEN}: generate it with {COMMAND}"
        golden = GOLDEN.read_bytes()
        if head != golden:
            kinds = [e.event_type for e in ledger.store.read_stream("attempts/golden-run")]
            pytest.fail(
                "Phase 4 event shape changed: the planning side's chain head is "
                f"{head.hex()}, the golden fixture holds {golden.hex()}. The verifying side's "
                "RetryLedger continues this chain and will refuse to start (ADR-0005). If the "
                f"change is intended, regenerate with `{COMMAND}` and amend the ADR.\n"
                f"Events recorded: {kinds}"
            )
    finally:
        ledger.close()


def test_the_head_is_one_the_verifying_side_can_continue(tmp_path: Path) -> None:
    head, ledger = record_phase4_run(tmp_path)
    try:
        assert len(head) == HASH_SIZE
        events = list(ledger.store.read_stream("attempts/golden-run"))
        assert head == events[-1].hash
        assert events[-1].event_type == "attempt_anchor_recorded"
        cursor = ChainCursor(parse_head(head))  # what RetryLedger.__init__ starts from
        assert cursor.head == head
        report = ledger.verify(require_signed=False)
        assert report.damage is None and report.checks["chain"] == "ok"
        # The run is deterministic: a second recording gives the same bytes.
        again, other = record_phase4_run(tmp_path / "again")
        other.close()
        assert again == head
    finally:
        ledger.close()


def test_golden_fixture_is_a_raw_head() -> None:
    assert GOLDEN.read_bytes() and len(GOLDEN.read_bytes()) == HASH_SIZE
