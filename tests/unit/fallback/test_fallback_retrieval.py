"""SolvedExampleStore: BM25 over SQLite FTS5, a BLAKE3 chain over insertions, harvesting."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from uuid import UUID

import pytest
from blake3 import blake3
from tests.fence.fallback_kit import advisory, context, make_repo

from tracebound.errors import AuditChainCorrupted, ValidationFailed
from tracebound.events.anchor import AttemptAnchor
from tracebound.integrity.chain import GENESIS
from tracebound.pipeline.fallback import ApplyContext, PlanOutcome, SolvedExampleStore
from tracebound.pipeline.retry.models import TrustOutcome
from tracebound.sources import FixedClock


def _plan(
    patch: str, *, passed: bool | None = True, advisory_id: str = "GHSA-x84v-xcm2-53pg"
) -> PlanOutcome:
    digest = blake3(patch.encode()).hexdigest()
    anchor = AttemptAnchor(
        attempt_id=UUID(int=1),
        workflow_id="wf",
        attempt_index=0,
        advisory_id=advisory_id,
        prompt_digest_blake3="0" * 64,
        retrieved_evidence_chain_head=None,
        retrieved_record_ids=(),
        plan_proposal_kind="apply_recipe",
        response_digest_blake3="0" * 64,
        validator_outcome="AppliedFromRecipe",
        tokens_in=0,
        tokens_out=0,
        cost_usd=0,
        timestamp_utc=FixedClock().now(),
    )
    trust = None
    if passed is not None:
        trust = TrustOutcome(passed=True, confidence="high", score=9000, sandbox_run_id="s")
        anchor = anchor.attach_trust_outcome(trust)
    return PlanOutcome(
        tag="AppliedFromRecipe",
        attempt_id=UUID(int=1),
        attempt_index=0,
        workflow_id="wf",
        patch=patch,
        patch_blake3=digest,
        refusal_reason=None,
        prompt=None,
        anchor=anchor,
        trust=trust,
    )


def _ctx(tmp_path: Path, **kw: object) -> ApplyContext:
    return context(make_repo(tmp_path), **kw)


def test_empty_store_has_the_genesis_head_and_misses(tmp_path: Path) -> None:
    store = SolvedExampleStore(tmp_path / "ex.db")
    assert store.chain_head == GENESIS and len(store) == 0
    found = store.search(_ctx(tmp_path))
    assert found.examples == () and found.chain_head == GENESIS


def test_harvest_search_rank_and_chain(tmp_path: Path) -> None:
    store = SolvedExampleStore(tmp_path / "ex.db")
    ctx = _ctx(tmp_path)
    rid = store.on_validated(ctx, _plan("--- a/r\n+++ b/r\n@@ -1 +1 @@\n-a\n+b\n"))
    head1 = store.chain_head
    assert rid is not None and rid.startswith("se-") and head1 != GENESIS
    assert store.on_validated(ctx, _plan("--- a/r\n+++ b/r\n@@ -1 +1 @@\n-a\n+b\n")) is None  # dup
    assert store.chain_head == head1
    unrelated = advisory().model_copy(
        update={
            "id": "GHSA-zzzz-0002",
            "summary": "Denial of service in chunked decoding",
            "details": "A crafted chunk length hangs the parser.",
            "aliases": (),
        }
    )
    rid2 = store.on_validated(
        _ctx(tmp_path, advisory=unrelated), _plan("--- a/r\n+++ b/r\n@@ -1 +1 @@\n-a\n+c\n")
    )
    assert rid2 is not None and store.chain_head != head1
    found = store.search(ctx)
    assert [e.record_id for e in found.examples] == [rid, rid2]  # BM25: the matching one first
    assert found.examples[0].score < found.examples[1].score
    assert found.chain_head == store.chain_head
    assert store.search(_ctx(tmp_path, package="flask")).examples == ()  # same package only
    store.close()
    reopened = SolvedExampleStore(tmp_path / "ex.db")
    assert reopened.verify() == reopened.chain_head == found.chain_head


def test_fts_syntax_in_advisories_is_not_interpreted(tmp_path: Path) -> None:
    store = SolvedExampleStore()
    weird = advisory().model_copy(update={"summary": 'NEAR(" AND OR * ^ "col:x) -', "details": ""})
    assert store.search(_ctx(tmp_path, advisory=weird)).examples == ()


def test_only_verified_plans_are_harvested(tmp_path: Path) -> None:
    store = SolvedExampleStore()
    ctx = _ctx(tmp_path)
    with pytest.raises(ValidationFailed, match="trust"):
        store.on_validated(ctx, _plan("--- a/r\n+++ b/r\n@@ -1 +1 @@\n-a\n+b\n", passed=None))


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE examples SET patch = patch || ' ' WHERE seq = 1",
        "UPDATE examples SET advisory_id = 'GHSA-forged' WHERE seq = 1",
        "DELETE FROM examples WHERE seq = 1",
    ],
)
def test_tampering_is_found_on_open(tmp_path: Path, sql: str) -> None:
    store = SolvedExampleStore(tmp_path / "ex.db")
    ctx = _ctx(tmp_path)
    store.on_validated(ctx, _plan("--- a/r\n+++ b/r\n@@ -1 +1 @@\n-a\n+b\n"))
    store.on_validated(ctx, _plan("--- a/r\n+++ b/r\n@@ -1 +1 @@\n-a\n+c\n"))
    store.close()
    db = sqlite3.connect(tmp_path / "ex.db")
    db.execute(sql)
    db.commit()
    db.close()
    with pytest.raises(AuditChainCorrupted):
        SolvedExampleStore(tmp_path / "ex.db")


def test_store_file_is_private(tmp_path: Path) -> None:
    SolvedExampleStore(tmp_path / "sub" / "ex.db").close()
    assert (tmp_path / "sub" / "ex.db").stat().st_mode & 0o077 == 0
