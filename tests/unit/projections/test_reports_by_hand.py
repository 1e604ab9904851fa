"""The reports checked by hand: random event streams in a real SQLite ledger, projected into
real views, and every figure of `report cost|roi|plugins|gates` recomputed here from the
event definitions and docs/projections.md with plain Decimal arithmetic.

The hand computation shares no code with the projections: it walks the payloads it wrote.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tracebound.cli import _common
from tracebound.cli.app import app
from tracebound.events.catalog import (
    CostIncurred,
    CostSource,
    MergeOutcome,
    PluginResolved,
    PluginScope,
    SignalKind,
    TrustGateFailed,
    TrustGatePassed,
)
from tracebound.events.envelope import Payload
from tracebound.ids import GateId, PluginId
from tracebound.ledger import Ledger
from tracebound.projections import ProjectionRunner, SQLiteViews, reports
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.sqlite import SQLiteStore

WORKFLOWS = st.sampled_from([None, "wf-a", "wf-b", "wf-c", "wf-d"])
AMOUNTS = st.one_of(
    st.builds(lambda n, e: Decimal(n).scaleb(-e), st.integers(0, 10**12), st.integers(0, 30)),
    st.sampled_from(["0", "0.00", "0.1", "1E+40", "123456789012345678901234567890.123456789"]).map(
        Decimal
    ),
)


@st.composite
def costs(draw: st.DrawFn) -> CostIncurred:
    tokens_in = draw(st.none() | st.integers(0, 10**9))
    tokens_out = draw(st.none() | st.integers(0, 10**9))
    cached = None if tokens_in is None else draw(st.none() | st.integers(0, tokens_in))
    reasoning = None if tokens_out is None else draw(st.none() | st.integers(0, tokens_out))
    left = None if tokens_in is None else tokens_in - (cached or 0)
    written = None if left is None else draw(st.none() | st.integers(0, left))
    written_long = None if written is None else draw(st.none() | st.integers(0, written))
    return CostIncurred(
        tier=draw(st.sampled_from(["direct", "amortized", "overhead"])),
        amount_usd=draw(AMOUNTS),
        source=CostSource(draw(st.sampled_from(["openai", "anthropic", "sandbox"]))),
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        cached_input_tokens=cached,
        reasoning_tokens=reasoning,
        cache_write_input_tokens=written,
        cache_write_long_input_tokens=written_long,
        role=draw(st.none() | st.sampled_from(["Planner", "Executor"])),
    )


MERGES = st.builds(
    lambda pr, d: MergeOutcome(pr_url=f"https://example.test/pr/{pr}", decision=d, reviewer=None),
    st.integers(1, 3),
    st.sampled_from(["merged", "closed", "modified"]),
)
RESOLUTIONS = st.builds(
    lambda plugin, fallback: PluginResolved(
        plugin_id=PluginId(plugin),
        extends_chain=(),
        matched_scope=PluginScope("*"),
        fallback_used=fallback,
    ),
    st.sampled_from(["npm", "pypi", "universal"]),
    st.booleans(),
)
SIGNALS = st.sampled_from(["lint", "tests", "types"]).map(SignalKind)
GATES = st.sampled_from(["g1", "g2"]).map(GateId)
GATE_EVENTS = st.one_of(
    st.builds(
        lambda g, s: TrustGatePassed(gate=g, signals={SignalKind("tests"): True}, score=s),
        GATES,
        st.integers(0, 10_000),
    ),
    st.builds(
        lambda g, sigs, s: TrustGateFailed(gate=g, failing_signals=sigs, score=s, retry_count=0),
        GATES,
        st.lists(SIGNALS, min_size=1, max_size=3).map(tuple),
        st.integers(0, 10_000),
    ),
)
STREAMS = st.lists(
    st.tuples(WORKFLOWS, st.one_of(costs(), MERGES, RESOLUTIONS, GATE_EVENTS)), max_size=25
)

RATIO = Decimal("0.0001")
MONEY = Decimal("0.000001")


def _q(num: Decimal | int, den: int, places: Decimal) -> Decimal | None:
    if den == 0:
        return None
    with localcontext() as ctx:
        ctx.prec = 400
        return (Decimal(num) / Decimal(den)).quantize(places, ROUND_HALF_EVEN)


def _text(v: Decimal | None) -> str | None:
    return None if v is None else format(v, "f")


@dataclass
class _Wf:
    cost: Decimal = Decimal(0)
    decisions: Counter[str] = field(default_factory=Counter)
    plugin: str | None = None
    fallback: bool = False


def _by_hand(stream: list[tuple[str | None, Payload]]) -> dict[str, Any]:
    """Every figure of the four reports, from the payloads, as the docs define them."""
    cost_rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    wfs: dict[str, _Wf] = {}
    overhead = Decimal(0)
    unattributed = 0
    gate_stats: dict[str, dict[str, int]] = {}
    scores: Counter[tuple[str, str, int]] = Counter()
    failing: Counter[str] = Counter()
    with localcontext() as ctx:
        ctx.prec = 400  # exact for these amounts
        for wf, p in stream:
            if isinstance(p, CostIncurred):
                key = (wf or "", p.tier, str(p.source))
                r = cost_rows.setdefault(key, defaultdict(int, amount_usd=Decimal(0)))
                r["amount_usd"] += p.amount_usd
                r["events"] += 1
                tin, tout = p.tokens_in, p.tokens_out
                written, written_long = (
                    p.cache_write_input_tokens or 0,
                    p.cache_write_long_input_tokens or 0,
                )
                r["input_cached"] += p.cached_input_tokens or 0
                r["input_cache_write"] += written - written_long
                r["input_cache_write_long"] += written_long
                r["input_uncached"] += (tin or 0) - (p.cached_input_tokens or 0)
                r["output_reasoning"] += p.reasoning_tokens or 0
                r["output_visible"] += (tout or 0) - (p.reasoning_tokens or 0)
                r["tokens_in"] += tin or 0
                r["tokens_out"] += tout or 0
                if wf is None:
                    overhead += p.amount_usd
                else:
                    wfs.setdefault(wf, _Wf()).cost += p.amount_usd
            elif isinstance(p, MergeOutcome):
                if wf is None:
                    unattributed += 1
                else:
                    wfs.setdefault(wf, _Wf()).decisions[p.decision] += 1
            elif isinstance(p, PluginResolved):
                if wf is not None:
                    w = wfs.setdefault(wf, _Wf())
                    w.plugin, w.fallback = str(p.plugin_id), p.fallback_used
            else:
                assert isinstance(p, TrustGatePassed | TrustGateFailed)
                verdict = "passed" if isinstance(p, TrustGatePassed) else "failed"
                stats = gate_stats.setdefault(p.gate, {"passed": 0, "failed": 0, "retries": 0})
                stats[verdict] += 1
                scores[(p.gate, verdict, min(p.score // 1000, 9) * 1000)] += 1
                if isinstance(p, TrustGateFailed):
                    failing.update(p.failing_signals)

        # ROI: the workflows table holds workflows with a cost or an outcome, not those that
        # only resolved a plugin.
        roi_wfs = {k: w for k, w in wfs.items() if w.decisions or k in {c[0] for c in cost_rows}}
        merged = sum(w.decisions["merged"] for w in roi_wfs.values())
        modified = sum(w.decisions["modified"] for w in roi_wfs.values())
        closed = sum(w.decisions["closed"] for w in roi_wfs.values())
        landed, total = merged + modified, overhead + sum(w.cost for w in wfs.values())
        roi = {
            "workflows": len(roi_wfs),
            "decided_prs": landed + closed,
            "merged": merged,
            "modified": modified,
            "closed": closed,
            "total_cost_usd": _text(total),
            "overhead_cost_usd": _text(overhead),
            "cost_per_merged_pr_usd": _text(_q(total, landed, MONEY)),
            "merge_rate": _text(_q(landed, landed + closed, RATIO)),
            "modification_rate": _text(_q(modified, landed, RATIO)),
            "closed_rate": _text(_q(closed, landed + closed, RATIO)),
            "unmerged_cost_usd": _text(
                sum(
                    (
                        w.cost
                        for w in roi_wfs.values()
                        if w.decisions and not (w.decisions["merged"] + w.decisions["modified"])
                    ),
                    Decimal(0),
                )
            ),
            "pending_cost_usd": _text(
                sum((w.cost for w in roi_wfs.values() if not w.decisions), Decimal(0))
            ),
            "unattributed_prs": unattributed,
        }

        plugins: dict[str, list[_Wf]] = defaultdict(list)
        for w in wfs.values():
            plugins[w.plugin or "(unresolved)"].append(w)
        plugin_stats = []
        for name in sorted(plugins):
            ws = plugins[name]
            p_landed = sum(w.decisions["merged"] + w.decisions["modified"] for w in ws)
            p_decided = p_landed + sum(w.decisions["closed"] for w in ws)
            p_cost = sum((w.cost for w in ws), Decimal(0))
            fallback = sum(w.fallback for w in ws)
            plugin_stats.append(
                {
                    "plugin_id": name,
                    "workflows": len(ws),
                    "fallback_workflows": fallback,
                    "decided_prs": p_decided,
                    "landed_prs": p_landed,
                    "cost_usd": _text(p_cost),
                    "merge_rate": _text(_q(p_landed, p_decided, RATIO)),
                    "fallback_rate": None
                    if name == "(unresolved)"
                    else _text(_q(fallback, len(ws), RATIO)),
                    "cost_per_pr_usd": _text(_q(p_cost, p_landed, MONEY)),
                }
            )
        cost_total = _text(sum((r["amount_usd"] for r in cost_rows.values()), Decimal(0)))

    return {
        "cost_total": cost_total,
        "cost_rows": {
            k: {**r, "amount_usd": _text(r["amount_usd"])} for k, r in sorted(cost_rows.items())
        },
        "roi": roi,
        "plugins": plugin_stats,
        "gates": {g: {"gate": g, **s} for g, s in sorted(gate_stats.items())},
        "scores": dict(scores),
        "failing_signals": sorted(failing.items(), key=lambda kv: (-kv[1], kv[0])),
    }


def _record(folder: Path, stream: list[tuple[str | None, Payload]]) -> None:
    with Ledger(SQLiteStore(folder), clock=FixedClock(), ids=SequentialIds()) as ledger:
        for i, (wf, payload) in enumerate(stream):
            ledger.record(f"s-{i % 3}", [payload], workflow_id=wf)


_TOKENS = (
    "events",
    "tokens_in",
    "tokens_out",
    "input_uncached",
    "input_cached",
    "input_cache_write",
    "input_cache_write_long",
    "output_visible",
    "output_reasoning",
)


def _check(views: SQLiteViews, want: dict[str, Any]) -> None:
    got_cost = {(r["workflow_id"], r["tier"], r["source"]): r for r in reports.cost_rows(views)}
    assert set(got_cost) == set(want["cost_rows"])
    for key, expected in want["cost_rows"].items():
        row = got_cost[key]
        assert format(row["amount_usd"], "f") == expected["amount_usd"], key
        assert {c: row[c] for c in _TOKENS} == {c: expected[c] for c in _TOKENS}, key
        assert row["input_uncached"] + row["input_cached"] == row["tokens_in"]
        assert row["input_cache_write"] + row["input_cache_write_long"] <= row["input_uncached"]
        assert row["output_visible"] + row["output_reasoning"] == row["tokens_out"]
    assert reports.roi_report(views).to_dict() == want["roi"]
    assert [s.to_dict() for s in reports.plugin_report(views)] == want["plugins"]
    gates = reports.gate_report(views)
    assert {g["gate"]: g for g in gates["gates"]} == want["gates"]
    assert {(s["gate"], s["verdict"], s["bucket"]): s["count"] for s in gates["scores"]} == (
        want["scores"]
    )
    assert gates["failing_signals"] == want["failing_signals"]


def _project_and_check(stream: list[tuple[str | None, Payload]], want: dict[str, Any]) -> None:
    """Record ``stream`` in a real SQLite ledger, run every projection, compare with ``want``."""
    with tempfile.TemporaryDirectory() as tmp:
        _record(Path(tmp) / "ledger", stream)
        with SQLiteStore(Path(tmp) / "ledger") as store, SQLiteViews(Path(tmp) / "v.db") as views:
            ProjectionRunner(store, views).run()
            _check(views, want)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STREAMS)
def test_every_report_figure_equals_the_hand_computation(
    stream: list[tuple[str | None, Payload]],
) -> None:
    want = _by_hand(stream)
    _project_and_check(stream, want)


# --- the command line: JSON and text agree with the hand computation ------------------------


def _cost(wf: str | None, amount: str, tier: str = "direct", source: str = "openai") -> Any:
    return (
        wf,
        CostIncurred(
            tier=tier,  # type: ignore[arg-type]
            amount_usd=Decimal(amount),
            source=CostSource(source),
            tokens_in=100,
            cached_input_tokens=60,
            tokens_out=50,
            reasoning_tokens=20,
        ),
    )


def _merge(wf: str | None, pr: int, decision: str) -> Any:
    return (wf, MergeOutcome(pr_url=f"https://x.test/{pr}", decision=decision, reviewer=None))  # type: ignore[arg-type]


EDGE_STREAM: list[tuple[str | None, Payload]] = [
    _cost("wf-costs-only", "0.1234567890123456789012345678901234567"),
    _cost("wf-costs-only", "99999999999999999999999999999999.99"),
    _cost(None, "0.000001", tier="overhead", source="ci"),
    _cost("wf-closed", "0"),
    _merge("wf-closed", 1, "closed"),
    _merge("wf-closed", 1, "closed"),  # the same PR twice: two decisions, as documented
    *[_cost(f"wf-{i:03}", f"{i}.5", source=f"src-{i}") for i in range(60)],
]


@pytest.fixture(scope="module")
def edge_cli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("edge")
    _record(folder / ".tracebound", EDGE_STREAM)
    return folder


def _invoke(folder: Path, *args: str) -> str:
    env = {
        "HOME": str(folder / "home"),
        "TRACEBOUND_STORE": str(folder / ".tracebound"),
        "TRACEBOUND_VIEWS": None,
        "NO_COLOR": "1",
        "COLUMNS": "250",
    }
    # rich fixes a console's width when it is made, from COLUMNS at import time (set in some
    # test workers, not in others): the env above alone left long titles cropped there.
    with mock.patch.object(_common.console, "_width", 250):
        result = CliRunner().invoke(app, ["report", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_cli_json_equals_the_hand_computation(edge_cli: Path) -> None:
    want = _by_hand(EDGE_STREAM)
    roi = json.loads(_invoke(edge_cli, "roi", "--json"))
    assert {k: roi[k] for k in want["roi"]} == want["roi"]
    assert roi["cost_per_merged_pr_usd"] is None  # nothing landed: null, never 0
    assert roi["merge_rate"] == "0.0000"
    assert roi["pending_cost_usd"] == want["roi"]["pending_cost_usd"]
    cost = json.loads(_invoke(edge_cli, "cost", "--json"))
    assert cost["total_usd"] == want["cost_total"]
    assert len(cost["rows"]) == len(want["cost_rows"])  # --json has every row
    for row in cost["rows"]:
        expected = want["cost_rows"][(row["workflow_id"], row["tier"], row["source"])]
        assert row["amount_usd"] == expected["amount_usd"]
    plugins = json.loads(_invoke(edge_cli, "plugins", "--json"))
    assert plugins["plugins"] == want["plugins"]


def test_cost_per_pr_of_an_amount_past_200_digits_is_a_number_not_a_traceback() -> None:
    """A cost of 1E+196 USD and a merged PR: the cost per PR quantized to micro-dollars has
    203 digits, past MONEY_CONTEXT's 200, and `report roi` and `report plugins` raised
    decimal.InvalidOperation (a traceback) instead of printing it."""
    stream: list[tuple[str | None, Payload]] = [
        _cost("wf-1", "1E+196"),
        _cost("wf-1", "0.01"),
        _merge("wf-1", 1, "merged"),
        _cost("wf-2", "2"),
        *[_merge("wf-2", 1, "modified")] * 3,  # 2/3: rounded, half-even, to the micro-dollar
    ]
    want = _by_hand(stream)
    _project_and_check(stream, want)
    assert want["roi"]["cost_per_merged_pr_usd"] == "25" + "0" * 194 + ".502500"
    assert want["plugins"][0]["cost_per_pr_usd"] == want["roi"]["cost_per_merged_pr_usd"]


def test_cli_text_totals_are_over_every_row_and_agree_with_json(edge_cli: Path) -> None:
    want = _by_hand(EDGE_STREAM)
    text = _invoke(edge_cli, "cost", "--limit", "5")
    assert f"cost ledger: {want['cost_total']} USD" in text
    assert f"5 of {len(want['cost_rows'])} rows, costliest first" in text
    roi_text = _invoke(edge_cli, "roi")
    for measure, value in want["roi"].items():
        shown = "-" if value is None else str(value)
        assert any(
            line.split("│")[1:3]
            and line.split("│")[1].strip() == measure
            and line.split("│")[2].strip() == shown
            for line in roi_text.splitlines()
        ), (measure, shown, roi_text)


def test_the_top_score_bucket_is_labelled_with_10000_which_it_holds(tmp_path: Path) -> None:
    """A perfect 10 000 falls in the 9 000 bucket (docs/projections.md); the text table
    labelled that bucket "9000-9999", so a perfect score read as short of perfect."""
    gate = GateId("g")
    _record(
        tmp_path / ".tracebound",
        [
            ("wf", TrustGatePassed(gate=gate, signals={SignalKind("t"): True}, score=10_000)),
            ("wf", TrustGatePassed(gate=gate, signals={SignalKind("t"): True}, score=8_999)),
        ],
    )
    text = _invoke(tmp_path, "gates")
    assert "9000-10000" in text
    assert "8000-8999" in text
    assert "9000-9999" not in text
