"""ADR-04-0017 fence: ``AttemptAnchorRecorded`` is the last event of every attempt.

Two halves, as the record asks:

* **Static** (AST walk over ``src/tracebound/pipeline/fallback/``): every function that
  records the anchor, directly or through a call, does it in a top-level statement of its
  body (not in a loop, a ``try`` or a ``finally``), exactly once, and no statement after it
  can emit an attempt event, directly or through any function of the package.
* **Runtime** (the event-log adapter): after the anchor, any event for that attempt raises
  ``LedgerAttemptOutOfOrder``, also after the log is reopened from the stream.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TypedDict
from uuid import UUID

import pytest

from tests.fence.fallback_kit import Kit, make_kit
from tracebound.errors import ConcurrencyConflict, LedgerAttemptOutOfOrder
from tracebound.events.anchor import AttemptAnchor
from tracebound.events.catalog import (
    AttemptAnchorRecorded,
    BudgetPrechecked,
    PlanOutcomeEmitted,
    ProvenanceClassified,
    RagMiss,
    TransformBuilt,
)
from tracebound.ids import (
    AdvisoryId,
    AttemptId,
    PatchDigest,
    PromptDigest,
    ResponseDigest,
    WorkflowId,
)
from tracebound.pipeline.fallback import AttemptEventLog

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "tracebound" / "pipeline" / "fallback"
EMITTER_MODULE = "eventlog.py"  # the adapter itself: its methods *are* the emitters
DIRECT_EMIT = {"emit", "record_anchor"}
ANCHOR = "record_anchor"


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _calls(node: ast.AST) -> list[ast.Call]:
    found = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    return sorted(found, key=lambda c: (c.lineno, c.col_offset))


@dataclass
class Analysis:
    functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = field(default_factory=dict)
    emits: set[str] = field(default_factory=set)
    anchors: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)


def analyse(sources: dict[str, str]) -> Analysis:
    """Find every path on which an emission could follow the anchor."""
    a = Analysis()
    for name, source in sources.items():
        if name == EMITTER_MODULE:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a.functions.setdefault(node.name, []).append(node)

    def calls_any(fn: ast.FunctionDef | ast.AsyncFunctionDef, names: set[str]) -> bool:
        return any(_call_name(c) in names for c in _calls(fn))

    a.emits, a.anchors = set(DIRECT_EMIT), {ANCHOR}
    changed = True
    while changed:  # transitive closure over the package's own functions
        changed = False
        for fname, defs in a.functions.items():
            for fn in defs:
                if fname not in a.emits and calls_any(fn, a.emits):
                    a.emits.add(fname)
                    changed = True
                if fname not in a.anchors and calls_any(fn, a.anchors):
                    a.anchors.add(fname)
                    changed = True

    for fname, defs in a.functions.items():
        for fn in defs:
            _check_function(fname, fn, a)
    return a


def _check_function(fname: str, fn: ast.FunctionDef | ast.AsyncFunctionDef, a: Analysis) -> None:
    anchor_calls = [c for c in _calls(fn) if _call_name(c) in a.anchors]
    if not anchor_calls:
        return
    where = f"{fname} (line {fn.lineno})"
    if len(anchor_calls) != 1:
        a.violations.append(f"{where}: {len(anchor_calls)} anchor calls; one per attempt")
        return
    (call,) = anchor_calls
    top = [s for s in fn.body if any(c is call for c in _calls(s))]
    if not top:
        a.violations.append(f"{where}: the anchor call is not in the function body")
        return
    stmt = top[0]
    if isinstance(stmt, ast.For | ast.While | ast.Try | ast.With | ast.If | ast.Match):
        a.violations.append(
            f"{where}: the anchor is recorded inside a {type(stmt).__name__}; it must be a "
            "top-level statement so that no path can emit after it"
        )
    inside_args = {
        id(c) for arg in [*call.args, *(k.value for k in call.keywords)] for c in _calls(arg)
    }
    for other in _calls(stmt):
        if other is not call and id(other) not in inside_args and _call_name(other) in a.emits:
            a.violations.append(f"{where}: line {other.lineno} emits in the anchor's statement")
    for later in fn.body[fn.body.index(stmt) + 1 :]:
        for other in _calls(later):
            if _call_name(other) in a.emits:
                a.violations.append(
                    f"{where}: line {other.lineno} calls {_call_name(other)!r}, which emits, "
                    "after the anchor"
                )


def _sources() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(PACKAGE.glob("*.py"))}


def test_no_emission_can_follow_the_anchor() -> None:
    a = analyse(_sources())
    assert not a.violations, "\n".join(a.violations)


def test_the_walk_sees_the_real_structure() -> None:
    # Guard against a vacuous pass: the tier's entry point must be found to anchor, the
    # planning steps to emit, and exactly one function must record the anchor directly.
    a = analyse(_sources())
    assert {"run", "_close"} <= a.anchors
    assert {"_plan", "_call_leaf", "_applied", "_refused", "_emit_rag"} <= a.emits
    direct = [
        name
        for name, defs in a.functions.items()
        for fn in defs
        if any(_call_name(c) == ANCHOR for c in _calls(fn))
    ]
    assert direct == ["_close"]
    assert "_plan" not in a.anchors  # planning never anchors; only closing does


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ("    log.record_anchor(x)\n    log.emit(y)\n", "after the anchor"),
        ("    log.record_anchor(x)\n    helper()\n", "after the anchor"),
        ("    for i in r:\n        log.record_anchor(x)\n", "inside a For"),
        (
            "    try:\n        log.record_anchor(x)\n    finally:\n        log.emit(y)\n",
            "inside a Try",
        ),
        ("    log.record_anchor(x)\n    log.record_anchor(x)\n", "2 anchor calls"),
        ("    pair(log.record_anchor(x), log.emit(y))\n", "emits in the anchor's statement"),
    ],
)
def test_the_walk_catches_violations(body: str, complaint: str) -> None:
    source = f"def helper():\n    log.emit(z)\n\ndef close(log, x, y):\n{body}"
    a = analyse({"bad.py": source})
    assert any(complaint in v for v in a.violations), a.violations


def test_a_clean_tail_passes() -> None:
    source = (
        "def close(log, x):\n    y = prepare(x)\n    log.record_anchor(y)\n"
        "    write_file(y)\n    return y\n"
    )
    assert analyse({"ok.py": source}).violations == []


# --- runtime: the adapter refuses -------------------------------------------------------------


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    k = make_kit(tmp_path)
    yield k
    k.close()


class _Ids(TypedDict):
    attempt_id: AttemptId
    attempt_index: int


def _frame(kit: Kit, log: AttemptEventLog, attempt: AttemptId, index: int = 0) -> AttemptAnchor:
    ids: _Ids = {"attempt_id": attempt, "attempt_index": index}
    log.emit(ProvenanceClassified(**ids, advisory_id=AdvisoryId("GHSA-x"), provenance="recipe"))
    log.emit(
        BudgetPrechecked(**ids, estimated_usd=Decimal(0), available_usd=Decimal(1), allowed=True)
    )
    log.emit(RagMiss(**ids, evidence_chain_head=None, bypassed=True))
    log.emit(
        PlanOutcomeEmitted(
            **ids, plan_proposal_kind="refuse", outcome="Refused", refusal_reason="no_plan"
        )
    )
    return AttemptAnchor(
        attempt_id=attempt,
        workflow_id=WorkflowId(log.workflow_id),
        attempt_index=index,
        advisory_id=AdvisoryId("GHSA-x"),
        prompt_digest_blake3=PromptDigest("0" * 64),
        retrieved_evidence_chain_head=None,
        retrieved_record_ids=(),
        plan_proposal_kind="refuse",
        response_digest_blake3=ResponseDigest("0" * 64),
        validator_outcome="Refused",
        refusal_reason="no_plan",
        tokens_in=0,
        tokens_out=0,
        cost_usd=Decimal(0),
        timestamp_utc=kit.ledger.clock.now(),
    )


def test_events_after_the_anchor_raise(kit: Kit) -> None:
    log = AttemptEventLog(kit.ledger, workflow_id="wf")
    attempt = AttemptId(UUID(int=77))
    anchor = _frame(kit, log, attempt)
    log.record_anchor(AttemptAnchorRecorded(anchor=anchor))
    late = PlanOutcomeEmitted(
        attempt_id=attempt,
        attempt_index=0,
        plan_proposal_kind="refuse",
        outcome="Refused",
        refusal_reason="x",
    )
    with pytest.raises(LedgerAttemptOutOfOrder, match="closed by its AttemptAnchorRecorded"):
        log.emit(late)
    with pytest.raises(LedgerAttemptOutOfOrder, match="closed"):
        log.record_anchor(AttemptAnchorRecorded(anchor=anchor))
    reopened = AttemptEventLog(kit.ledger, workflow_id="wf")  # state read back from the stream
    with pytest.raises(LedgerAttemptOutOfOrder, match="closed"):
        reopened.emit(late)
    assert kit.kinds("wf")[-1] == "attempt_anchor_recorded"  # nothing was appended


def test_order_within_an_attempt_is_enforced(kit: Kit) -> None:
    log = AttemptEventLog(kit.ledger, workflow_id="wf")
    ids: _Ids = {"attempt_id": AttemptId(UUID(int=5)), "attempt_index": 0}
    with pytest.raises(LedgerAttemptOutOfOrder, match="must open with provenance_classified"):
        log.emit(RagMiss(**ids, evidence_chain_head=None))
    log.emit(ProvenanceClassified(**ids, advisory_id=AdvisoryId("GHSA-x"), provenance="llm"))
    log.emit(RagMiss(**ids, evidence_chain_head=None))
    with pytest.raises(LedgerAttemptOutOfOrder, match="cannot follow"):
        log.emit(
            BudgetPrechecked(
                **ids, estimated_usd=Decimal(0), available_usd=Decimal(1), allowed=True
            )
        )
    with pytest.raises(LedgerAttemptOutOfOrder, match="cannot follow"):
        log.emit(RagMiss(**ids, evidence_chain_head=None))
    with pytest.raises(LedgerAttemptOutOfOrder, match="index 0, not 3"):
        log.emit(
            TransformBuilt(
                attempt_id=ids["attempt_id"],
                attempt_index=3,
                patch_digest_blake3=PatchDigest("0" * 64),
                files_changed=1,
            )
        )


def test_the_anchor_needs_the_plan_outcome_first(kit: Kit) -> None:
    log = AttemptEventLog(kit.ledger, workflow_id="wf")
    attempt = AttemptId(UUID(int=9))
    anchor = _frame(kit, log, attempt)
    other = anchor.model_copy(update={"attempt_id": UUID(int=10)})
    log.emit(
        ProvenanceClassified(
            attempt_id=AttemptId(UUID(int=10)),
            attempt_index=0,
            advisory_id=AdvisoryId("GHSA-x"),
            provenance="llm",
        )
    )
    with pytest.raises(LedgerAttemptOutOfOrder, match="directly follow plan_outcome_emitted"):
        log.record_anchor(AttemptAnchorRecorded(anchor=other))
    with pytest.raises(LedgerAttemptOutOfOrder, match="workflow"):
        log.record_anchor(
            AttemptAnchorRecorded(anchor=anchor.model_copy(update={"workflow_id": "wf-other"}))
        )


def test_a_second_writer_is_a_conflict_not_an_interleaving(kit: Kit) -> None:
    one = AttemptEventLog(kit.ledger, workflow_id="wf")
    two = AttemptEventLog(kit.ledger, workflow_id="wf")
    one.emit(
        ProvenanceClassified(
            attempt_id=AttemptId(UUID(int=1)),
            attempt_index=0,
            advisory_id=AdvisoryId("GHSA-x"),
            provenance="llm",
        )
    )
    with pytest.raises(ConcurrencyConflict):
        two.emit(
            ProvenanceClassified(
                attempt_id=AttemptId(UUID(int=2)),
                attempt_index=0,
                advisory_id=AdvisoryId("GHSA-x"),
                provenance="llm",
            )
        )


def test_every_tier_path_ends_with_exactly_one_anchor(tmp_path: Path) -> None:
    from tests.fence.fallback_kit import llm_patch
    from tracebound.integrations.llm import ScriptedLeaf
    from tracebound.pipeline.fallback import RecipeBook

    cases = {
        "recipe": make_kit(tmp_path / "a"),
        "llm": make_kit(
            tmp_path / "b", leaf=ScriptedLeaf([(None, llm_patch("2.20.0"))]), recipes=RecipeBook([])
        ),
        "refused": make_kit(tmp_path / "c", recipes=RecipeBook([]), retrieval=False),
        "budget": make_kit(
            tmp_path / "d",
            leaf=ScriptedLeaf([(None, "x")]),
            recipes=RecipeBook([]),
            limit=Decimal(0),
        ),
    }
    for name, k in cases.items():
        plan = k.tier.run(k.ctx(), workflow_id="wf")
        kinds = k.kinds("wf")
        assert (
            kinds[-1] == "attempt_anchor_recorded" and kinds.count("attempt_anchor_recorded") == 1
        ), name
        assert kinds[-2] == "plan_outcome_emitted", name
        assert plan.anchor.attempt_id == plan.attempt_id
        k.close()
