"""Each projection from a fixture event stream, in memory: no ledger, no workflow running."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TypedDict
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tracebound.events.catalog import (
    AttemptCompleted,
    AttemptRefused,
    CostIncurred,
    MergeOutcome,
    PluginResolved,
    PluginScope,
    RetryRequested,
    SignalKind,
    SolutionFound,
    TrustGateFailed,
    TrustGatePassed,
)
from tracebound.events.envelope import Event, Payload
from tracebound.ids import (
    AdvisoryId,
    AttemptId,
    GateId,
    PatchDigest,
    PluginId,
    SandboxRunId,
    Sha256Digest,
)
from tracebound.projections.cost import CostLedgerProjection
from tracebound.projections.fold import fold
from tracebound.projections.gates import TrustGateProjection, bucket_of, ranked
from tracebound.projections.learning import LearningProjection, solutions_for
from tracebound.projections.memory import project
from tracebound.projections.plugins import UNRESOLVED, PluginTelemetry, plugin_summary
from tracebound.projections.roi import RoiProjection, roi_summary

T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)


class _Attempt(TypedDict):
    attempt_id: AttemptId
    attempt_index: int


class _GateFailed(TypedDict):
    gate: GateId
    retry_count: int


def _events(*items: tuple[str | None, Payload]) -> list[Event]:
    return [
        Event.create(
            p, event_id=UUID(int=i + 1), timestamp=T0 + timedelta(minutes=i), workflow_id=wf
        )
        for i, (wf, p) in enumerate(items)
    ]


def _cost(amount: str, **kw: Any) -> CostIncurred:
    fields: dict[str, Any] = {"tier": "direct", "source": "openai", **kw}
    return CostIncurred(amount_usd=Decimal(amount), **fields)


def _merge(decision: str) -> MergeOutcome:
    return MergeOutcome(pr_url="https://example.test/pr", decision=decision, reviewer=None)  # type: ignore[arg-type]


# --- cost ----------------------------------------------------------------------------------


def test_cost_rows_by_workflow_tier_source_with_exact_money() -> None:
    rows = project(
        [CostLedgerProjection()],
        _events(
            ("a", _cost("0.1")),
            ("a", _cost("0.2")),
            ("a", _cost("0.05", tier="amortized", source="sandbox", role="Executor")),
            (None, _cost("1.00", tier="overhead", source="index")),
        ),
    )["cost_ledger"]
    got = {(r["workflow_id"], r["tier"], r["source"]): (r["amount_usd"], r["events"]) for r in rows}
    assert got == {
        ("", "overhead", "index"): (Decimal("1.00"), 1),
        ("a", "amortized", "sandbox"): (Decimal("0.05"), 1),
        ("a", "direct", "openai"): (Decimal("0.3"), 2),
    }


# More significant digits than decimal's default context keeps (28): summed there, these
# came out as 123456789012345678901234568900, and a cost per PR of 10**22 USD or more
# raised decimal.InvalidOperation (a traceback from `report roi` and `report plugins`).
_BIG = "123456789012345678901234567890.123456789"
_BIG_SUM = Decimal("123456789012345678901234567891.2234567900000000000000000000001")


def test_money_beyond_28_significant_digits_is_summed_exactly() -> None:
    events = _events(
        ("a", _resolved("npm")),
        ("a", _cost(_BIG)),
        ("a", _cost("1.1")),
        ("a", _cost("0.0000000010000000000000000000001")),
        ("a", _merge("merged")),
    )
    tables = project([CostLedgerProjection(), RoiProjection(), PluginTelemetry()], events)
    ((ledger_row,), (by_role,)) = tables["cost_ledger"], tables["cost_by_role"]
    assert ledger_row["amount_usd"] == by_role["amount_usd"] == _BIG_SUM
    roi = roi_summary(tables["roi_workflows"])
    assert roi.total_cost_usd == _BIG_SUM
    assert roi.cost_per_merged_pr_usd == Decimal("123456789012345678901234567891.223457")
    (npm,) = plugin_summary(tables["plugin_workflows"])
    assert npm.cost_usd == _BIG_SUM
    assert npm.cost_per_pr_usd == Decimal("123456789012345678901234567891.223457")
    assert fold(events, workflow_id="a").cost_usd == _BIG_SUM


def test_cached_and_reasoning_tokens_are_counted_once() -> None:
    """The Langfuse failure modes, pinned: cached input is not input twice; reasoning counts."""
    (row,) = project(
        [CostLedgerProjection()],
        _events(
            (
                "a",
                _cost(
                    "0.01",
                    tokens_in=1200,
                    tokens_out=300,
                    cached_input_tokens=1000,
                    reasoning_tokens=120,
                ),
            ),
        ),
    )["cost_ledger"]
    assert (row["input_uncached"], row["input_cached"]) == (200, 1000)
    assert (row["input_cache_write"], row["input_cache_write_long"]) == (0, 0)
    assert (row["output_visible"], row["output_reasoning"]) == (180, 120)
    assert row["input_uncached"] + row["input_cached"] == row["tokens_in"] == 1200
    assert row["output_visible"] + row["output_reasoning"] == row["tokens_out"] == 300


def test_cache_writes_are_not_plain_input() -> None:
    """Anthropic bills a cache write at 1.25x input (5 minutes) or 2x (1 hour); the ledger
    had no count of written tokens, so the rows could not be reconciled with an invoice
    that lists them apart. They are uncached input, broken down in columns of their own."""
    (row,) = project(
        [CostLedgerProjection()],
        _events(
            (
                "a",
                _cost(
                    "0.01",
                    tokens_in=2000,
                    tokens_out=10,
                    cached_input_tokens=300,
                    cache_write_input_tokens=1500,
                    cache_write_long_input_tokens=1000,
                ),
            ),
        ),
    )["cost_ledger"]
    assert (row["input_uncached"], row["input_cached"]) == (1700, 300)
    assert (row["input_cache_write"], row["input_cache_write_long"]) == (500, 1000)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (
            {"tokens_in": 10, "cached_input_tokens": 5, "cache_write_input_tokens": 6},
            "what is left",
        ),
        ({"cache_write_input_tokens": 1}, "what is left"),
        ({"tokens_in": 10, "cache_write_long_input_tokens": 1}, "part of cache_write_input"),
        (
            {"tokens_in": 9, "cache_write_input_tokens": 2, "cache_write_long_input_tokens": 3},
            "exceed it",
        ),
    ],
)
def test_cache_write_counts_are_parts_of_the_input(tokens: dict[str, int], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _cost("0.01", **tokens)


token_counts = st.integers(0, 10**6)
fraction = st.floats(0, 1)


@given(
    st.lists(
        st.tuples(token_counts, token_counts, fraction, fraction, fraction, fraction),
        min_size=1,
        max_size=20,
    )
)
def test_token_columns_always_add_up(
    spec: list[tuple[int, int, float, float, float, float]],
) -> None:
    payloads = []
    for i, o, c, r, w, long in spec:
        cached = int(i * c)
        written = int((i - cached) * w)
        payloads.append(
            (
                "w",
                _cost(
                    "0.001",
                    tokens_in=i,
                    tokens_out=o,
                    cached_input_tokens=cached,
                    reasoning_tokens=int(o * r),
                    cache_write_input_tokens=written,
                    cache_write_long_input_tokens=int(written * long),
                ),
            )
        )
    (row,) = project([CostLedgerProjection()], _events(*payloads))["cost_ledger"]
    assert row["input_uncached"] + row["input_cached"] == sum(s[0] for s in spec)
    written = row["input_cache_write"] + row["input_cache_write_long"]
    assert written <= row["input_uncached"]
    assert row["output_visible"] + row["output_reasoning"] == sum(s[1] for s in spec)
    assert row["input_cached"] == sum(int(s[0] * s[2]) for s in spec)
    assert row["output_reasoning"] == sum(int(s[1] * s[3]) for s in spec)
    assert row["input_cache_write_long"] == sum(
        p.cache_write_long_input_tokens or 0 for _, p in payloads
    )
    assert row["amount_usd"] == Decimal("0.001") * len(spec)


def test_cost_by_role_and_hour() -> None:
    rows = project(
        [CostLedgerProjection()],
        _events(
            ("a", _cost("1", role="Planner")), ("a", _cost("2")), ("b", _cost("3", role="Planner"))
        ),
    )["cost_by_role"]
    assert [(r["hour"], r["role"], r["amount_usd"]) for r in rows] == [
        ("2026-05-18T12", "Planner", Decimal(4)),
        ("2026-05-18T12", "unattributed", Decimal(2)),
    ]


# --- ROI -----------------------------------------------------------------------------------


def test_roi_headline_and_diagnostics() -> None:
    rows = project(
        [RoiProjection()],
        _events(
            ("a", _cost("1.00")),
            ("a", _merge("merged")),
            ("b", _cost("2.00")),
            ("b", _merge("modified")),
            ("c", _cost("3.00")),
            ("c", _merge("closed")),
            ("d", _cost("0.50")),  # no outcome yet
            (None, _cost("0.50", tier="overhead")),
        ),
    )["roi_workflows"]
    s = roi_summary(rows)
    assert (s.workflows, s.decided_prs, s.merged, s.modified, s.closed) == (4, 3, 1, 1, 1)
    assert s.total_cost_usd == Decimal("7.00")
    assert s.overhead_cost_usd == Decimal("0.50")
    assert s.cost_per_merged_pr_usd == Decimal("3.500000")  # 7.00 / 2 landed
    assert (s.merge_rate, s.modification_rate, s.closed_rate) == (
        Decimal("0.6667"),
        Decimal("0.5000"),
        Decimal("0.3333"),
    )
    assert (s.unmerged_cost_usd, s.pending_cost_usd) == (Decimal("3.00"), Decimal("0.50"))
    assert s.unattributed_prs == 0


def test_a_merge_outcome_with_no_workflow_is_counted_as_unattributed() -> None:
    # ROI is per workflow: an outcome recorded without one cannot be joined to its cost.
    # Before, it vanished: decided_prs 0 and nothing said why.
    rows = project(
        [RoiProjection()],
        _events(("a", _cost("1.00")), (None, _merge("merged")), ("a", _merge("closed"))),
    )["roi_workflows"]
    s = roi_summary(rows)
    assert (s.decided_prs, s.merged, s.closed, s.unattributed_prs) == (1, 0, 1, 1)
    assert s.to_dict()["unattributed_prs"] == 1


def test_roi_ratios_with_nothing_decided_are_none_not_zero() -> None:
    s = roi_summary(project([RoiProjection()], _events(("a", _cost("1"))))["roi_workflows"])
    assert (s.cost_per_merged_pr_usd, s.merge_rate, s.closed_rate) == (None, None, None)


# --- plugins -------------------------------------------------------------------------------


def _resolved(plugin: str, *, fallback: bool = False) -> PluginResolved:
    return PluginResolved(
        plugin_id=PluginId(plugin),
        extends_chain=(),
        matched_scope=PluginScope("*"),
        fallback_used=fallback,
    )


def test_plugin_telemetry_joins_on_workflow_in_any_order() -> None:
    rows = project(
        [PluginTelemetry()],
        _events(
            ("a", _merge("merged")),
            ("a", _cost("1")),
            ("a", _resolved("npm")),  # resolve last
            ("b", _resolved("npm", fallback=True)),
            ("b", _cost("3")),
            ("b", _merge("closed")),
            ("c", _resolved("universal", fallback=True)),
            ("c", _merge("modified")),
            ("d", _cost("9")),
        ),
    )["plugin_workflows"]
    stats = {s.plugin_id: s for s in plugin_summary(rows)}
    npm = stats["npm"]
    assert (npm.workflows, npm.decided_prs, npm.landed_prs) == (2, 2, 1)
    assert (npm.merge_rate, npm.fallback_rate) == (Decimal("0.5000"), Decimal("0.5000"))
    assert npm.cost_per_pr_usd == Decimal("4.000000")
    assert stats["universal"].fallback_rate == Decimal("1.0000")
    assert stats["universal"].cost_per_pr_usd == Decimal("0.000000")
    assert stats[UNRESOLVED].cost_usd == Decimal(9)


# --- trust gates ---------------------------------------------------------------------------


def test_gate_histograms_causes_and_ranking() -> None:
    at: _Attempt = {"attempt_id": AttemptId(UUID(int=1)), "attempt_index": 0}
    failed: _GateFailed = {"gate": GateId("tests"), "retry_count": 0}
    rows = project(
        [TrustGateProjection()],
        _events(
            (
                "a",
                TrustGateFailed(
                    **failed, failing_signals=(SignalKind("lint"), SignalKind("tests")), score=999
                ),
            ),
            ("a", TrustGateFailed(**failed, failing_signals=(SignalKind("tests"),), score=1000)),
            (
                "a",
                TrustGatePassed(
                    gate=GateId("tests"), signals={SignalKind("tests"): True}, score=10_000
                ),
            ),
            (
                "a",
                RetryRequested(
                    **at,
                    gate=GateId("tests"),
                    sandbox_run_id=SandboxRunId("s"),
                    failing_signals=(SignalKind("tests"),),
                    summary_pointer=Sha256Digest("sha256:" + "0" * 64),
                ),
            ),
            ("a", AttemptRefused(**at, cause="retry_limit", reason="3")),
        ),
    )
    assert rows["gate_stats"] == [{"gate": "tests", "passed": 1, "failed": 2, "retries": 1}]
    assert [(r["verdict"], r["bucket"], r["count"]) for r in rows["gate_scores"]] == [
        ("failed", 0, 1),
        ("failed", 1000, 1),
        ("passed", 9000, 1),
    ]
    assert ranked(rows["gate_causes"], "failing_signal") == [("tests", 2), ("lint", 1)]
    assert ranked(rows["gate_causes"], "retry_signal") == [("tests", 1)]
    assert ranked(rows["gate_causes"], "refusal") == [("retry_limit", 1)]
    assert [bucket_of(s) for s in (0, 999, 1000, 9999, 10_000)] == [0, 0, 1000, 9000, 9000]


# --- learning ------------------------------------------------------------------------------


def test_knowledge_graph_nodes_and_edges() -> None:
    at: _Attempt = {"attempt_id": AttemptId(UUID(int=5)), "attempt_index": 1}
    rows = project(
        [LearningProjection()],
        _events(
            (
                "w",
                AttemptCompleted(
                    **at,
                    advisory_id=AdvisoryId("GHSA-1"),
                    outcome="AppliedFromLlm",
                    trust_outcome_passed=True,
                    cost_usd=Decimal("0.02"),
                    duration_ms=7,
                ),
            ),
            (
                "w",
                SolutionFound(
                    **at,
                    advisory_id=AdvisoryId("GHSA-1"),
                    patch_digest_blake3=PatchDigest("ab" * 32),
                    outcome="AppliedFromLlm",
                ),
            ),
        ),
    )
    nodes = {r["node_id"]: r for r in rows["kg_nodes"]}
    attempt = f"attempt:{UUID(int=5)}"
    assert set(nodes) == {"advisory:GHSA-1", f"patch:{'ab' * 32}", attempt}
    # attributes merge: the completion's verdict survives the later solution event
    assert nodes[attempt]["attrs"]["trust_outcome_passed"] is True
    assert nodes[attempt]["attrs"]["attempt_index"] == 1
    edges = {(e["src"], e["edge"], e["dst"]) for e in rows["kg_edges"]}
    assert edges == {
        ("advisory:GHSA-1", "attempted", attempt),
        ("advisory:GHSA-1", "solved_by", f"patch:{'ab' * 32}"),
        (attempt, "produced", f"patch:{'ab' * 32}"),
    }
    assert solutions_for(rows["kg_edges"], "GHSA-1") == ["ab" * 32]
