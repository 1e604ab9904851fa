"""Workflow state as a pure, exhaustive fold over the workflow's events (ADR-0034).

``fold(events) -> WorkflowState`` reads events in log order and returns what the workflow
has done so far: its status, attempts, retries, gate verdicts, cost, plugin and merge.

Exhaustiveness is a type error, not a runtime surprise. Two functions carry it:

* :func:`kind_of` returns ``payload.kind`` for any member of
  :data:`~tracebound.events.catalog.BuiltinPayload` as a :data:`BuiltinKind`; a payload class
  added to the union whose kind is missing from :data:`BuiltinKind` makes that ``return``
  ill-typed.
* :func:`handler_for` matches every :data:`BuiltinKind` and ends in ``assert_never``; a kind
  added to the literal without a handler makes the call ill-typed. (At import time the
  dispatch table is built through it too, so the gap would also fail at run time.)

The fold works on record dicts (see :mod:`tracebound.projections.records`), not validated
models, so the same code serves a fixture stream and a million-event catch-up. Event types
outside the built-in catalog (user-registered ones) are counted and otherwise ignored: adding
a type never breaks the fold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any, Final, Literal, TypeAlias, assert_never, get_args

from tracebound.events.anchor import MONEY_CONTEXT
from tracebound.events.catalog import BuiltinPayload
from tracebound.events.envelope import Event
from tracebound.events.takeover import ClaimCursor, TakeOver
from tracebound.projections.base import Column, EventRecord, Row, Rows, Table
from tracebound.projections.records import records_of

__all__ = [
    "BUILTIN_KINDS",
    "BuiltinKind",
    "WorkflowState",
    "WorkflowStateProjection",
    "WorkflowStatus",
    "apply",
    "fold",
    "fold_all",
    "handler_for",
    "kind_of",
]

BuiltinKind: TypeAlias = Literal[
    "provenance_classified",
    "budget_prechecked",
    "rag_hit",
    "rag_degraded",
    "rag_miss",
    "prompt_built",
    "budget_precharged",
    "leaf_invoked",
    "leaf_returned",
    "budget_reconciled",
    "transform_built",
    "plan_outcome_emitted",
    "attempt_anchor_recorded",
    "retry_requested",
    "attempt_refused",
    "plugin_resolved",
    "adapter_degraded",
    "trust_gate_passed",
    "trust_gate_failed",
    "cost_incurred",
    "merge_outcome",
    "solution_found",
    "attempt_completed",
    "step_recorded",
    "approval_recorded",
    "blob_erased",
    "run_started",
    "run_finished",
    "run_resumed",
    "gate_requested",
    "validation_recorded",
    "blame_assigned",
    "repair_attempted",
    "route_chosen",
    "slo_alert_raised",
]
"""The ``kind`` of every built-in payload; kept equal to BuiltinPayload's by :func:`kind_of`."""

BUILTIN_KINDS: Final[frozenset[str]] = frozenset(get_args(BuiltinKind))

WorkflowStatus: TypeAlias = Literal[
    "running", "awaiting_approval", "succeeded", "refused", "rejected", "failed"
]
"""Where a workflow stands. ``refused`` and ``rejected`` are terminal; a merge outcome is
kept beside the status (``merge_decision``), since review happens after the run succeeds."""


def kind_of(payload: BuiltinPayload) -> BuiltinKind:
    """A built-in payload's kind, typed: the static link from the union to the literal."""
    return payload.kind


# Not slots=True: to_dict copies the instance's __dict__ in one C call, where reading ~60
# slot descriptors one by one cost ~2.5 us per row written (a 1M-event rebuild writes ~55k).
@dataclass
class WorkflowState:
    """What one workflow has done, as of ``last_position``. Plain data; JSON via to_dict."""

    workflow_id: str | None = None
    status: WorkflowStatus = "running"
    events: int = 0
    first_position: int = 0
    last_position: int = 0
    started_at: str | None = None
    updated_at: str | None = None
    # planning attempts (Phase 4)
    attempts: int = 0
    attempt_index: int | None = None
    provenance: str | None = None
    rag_hits: int = 0
    rag_degraded: int = 0
    rag_misses: int = 0
    prompts: int = 0
    leaf_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    budget_denied: int = 0
    precharged_usd: Decimal = Decimal(0)
    reconciled_usd: Decimal = Decimal(0)
    patches: int = 0
    plan_outcome: str | None = None
    refusal_reason: str | None = None
    anchors: int = 0
    # retries and gates (Phase 5)
    retries: int = 0
    refused_cause: str | None = None
    gates_passed: int = 0
    gates_failed: int = 0
    last_gate: str | None = None
    last_gate_score: int | None = None
    # workflow-spanning
    plugin_id: str | None = None
    fallback_used: bool | None = None
    adapters_degraded: int = 0
    cost_usd: Decimal = Decimal(0)
    merge_decision: str | None = None
    pr_url: str | None = None
    solutions: int = 0
    attempts_completed: int = 0
    last_trust_passed: bool | None = None
    # agent run ledger
    steps: int = 0
    steps_failed: int = 0
    steps_gated: int = 0
    approvals: int = 0
    blobs_erased: int = 0
    # pipeline runtime
    pipeline: str | None = None
    pipeline_type: str | None = None
    gates_requested: int = 0
    resumes: int = 0
    validations_run: int = 0
    validations_failed: int = 0
    blames: int = 0
    unresolved_blames: int = 0
    harmful_outputs: int = 0
    repairs: int = 0
    repairs_succeeded: int = 0
    routes: int = 0
    slo_alerts: int = 0
    # take-overs (tracebound.events.takeover): the counts above are the take-over's; what
    # it abandoned is counted here. `claim_gate`/`claim_position` are the run's current
    # gate and its latest claim, `at_claim` the rolled-back counts as they stood at the
    # gate's first claim (kept in the stored state, so an incremental fold can roll back).
    take_overs: int = 0
    taken_over_by: str | None = None
    abandoned_events: int = 0
    abandoned_steps: int = 0
    abandoned_blames: int = 0
    claim_gate: str | None = None
    claim_position: int | None = None
    at_claim: dict[str, int] | None = None
    # event types outside the built-in catalog
    other_events: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON data: money as plain decimal strings, so the dict is hash- and diff-safe."""
        out = dict(self.__dict__)  # exactly the fields, in declaration order
        for name in _DECIMAL_FIELDS:
            out[name] = format(out[name], "f")
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkflowState:
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        for name in _DECIMAL_FIELDS:
            if name in values:
                values[name] = Decimal(values[name])
        return cls(**values)


_FIELD_NAMES: Final = tuple(f.name for f in fields(WorkflowState))
_DECIMAL_FIELDS: Final = tuple(f.name for f in fields(WorkflowState) if f.type == "Decimal")

Handler: TypeAlias = Callable[[WorkflowState, Mapping[str, Any]], None]


# --- one handler per built-in kind ---------------------------------------------------------


def _attempt(state: WorkflowState, p: Mapping[str, Any]) -> None:
    index: int = p["attempt_index"]
    if state.attempt_index is None or index > state.attempt_index:
        state.attempt_index = index
    state.attempts = max(state.attempts, index + 1)


def _provenance_classified(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.provenance = p["provenance"]


def _budget_prechecked(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    if not p["allowed"]:
        state.budget_denied += 1


def _rag_hit(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.rag_hits += 1


def _rag_degraded(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.rag_degraded += 1


def _rag_miss(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.rag_misses += 1


def _prompt_built(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.prompts += 1


def _budget_precharged(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.precharged_usd = MONEY_CONTEXT.add(state.precharged_usd, Decimal(p["precharged_usd"]))


def _leaf_invoked(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.leaf_calls += 1


def _leaf_returned(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.tokens_in += p["tokens_in"]
    state.tokens_out += p["tokens_out"]
    state.cached_input_tokens += p.get("cached_input_tokens", 0)
    state.reasoning_tokens += p.get("reasoning_tokens", 0)


def _budget_reconciled(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.reconciled_usd = MONEY_CONTEXT.add(state.reconciled_usd, Decimal(p["actual_usd"]))


def _transform_built(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.patches += 1


def _plan_outcome_emitted(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.plan_outcome = p["outcome"]
    state.refusal_reason = p.get("refusal_reason")


def _attempt_anchor_recorded(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p["anchor"])
    state.anchors += 1


def _retry_requested(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.retries += 1


def _attempt_refused(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.refused_cause = p["cause"]
    state.status = "refused"


def _plugin_resolved(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.plugin_id = p["plugin_id"]
    state.fallback_used = p["fallback_used"]


def _adapter_degraded(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.adapters_degraded += 1


def _trust_gate_passed(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.gates_passed += 1
    state.last_gate = p["gate"]
    state.last_gate_score = p["score"]


def _trust_gate_failed(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.gates_failed += 1
    state.last_gate = p["gate"]
    state.last_gate_score = p["score"]


def _cost_incurred(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.cost_usd = MONEY_CONTEXT.add(state.cost_usd, Decimal(p["amount_usd"]))


def _merge_outcome(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.merge_decision = p["decision"]
    state.pr_url = p["pr_url"]


def _solution_found(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.solutions += 1


def _attempt_completed(state: WorkflowState, p: Mapping[str, Any]) -> None:
    _attempt(state, p)
    state.attempts_completed += 1
    passed = p["trust_outcome_passed"]
    state.last_trust_passed = passed
    if passed and state.status == "running":
        state.status = "succeeded"


def _step_recorded(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.steps += 1
    status = p["status"]
    if status == "error":
        state.steps_failed += 1
    elif status == "gated":
        state.steps_gated += 1
        if state.status == "running":
            state.status = "awaiting_approval"


def _approval_recorded(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.approvals += 1
    if p["decision"] == "rejected":
        state.status = "rejected"
    elif state.status == "awaiting_approval":
        state.status = "running"


def _blob_erased(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.blobs_erased += 1


def _run_started(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.pipeline = p["pipeline"]
    state.pipeline_type = p["pipeline_type"]


_RUN_STATUS: Final[dict[str, WorkflowStatus]] = {
    "completed": "succeeded",
    "failed": "failed",
    "gated": "awaiting_approval",
    "rejected": "rejected",
}


def _run_finished(state: WorkflowState, p: Mapping[str, Any]) -> None:
    # `refused` and `rejected` are terminal: a run that ends afterwards does not undo them.
    if state.status not in {"refused", "rejected"}:
        state.status = _RUN_STATUS[p["status"]]


def _gate_requested(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.gates_requested += 1
    state.status = "awaiting_approval"
    state.claim_gate, state.claim_position, state.at_claim = p["step_id"], None, None


# What a take-over's claim rolls back: the dead claimant's outcomes, blame and repairs are
# not the run's (the runner rebuilds the run as it stood at the first claim and records the
# steps again). Not rolled back: `events` (they happened), costs (they were spent), `resumes`
# (both claims were made), and the status (the events after the take-over set it).
_ROLLED_BACK: Final = (
    "steps", "steps_failed", "steps_gated", "blames", "unresolved_blames", "harmful_outputs",
    "repairs", "repairs_succeeded", "validations_run", "validations_failed", "routes",
)  # fmt: skip


def _run_resumed(state: WorkflowState, p: Mapping[str, Any]) -> None:
    # The decision itself was folded from approval_recorded; this is the process taking over.
    state.resumes += 1
    # The same rule as every reader of a run (a claim of no gate this fold saw, e.g. a
    # stream cut short, is neither a claim nor a take-over).
    cursor = ClaimCursor(state.claim_gate, state.claim_position)
    seen = cursor.see("run_resumed", p["step_id"], state.last_position, p.get("taken_over_by"))
    state.claim_position = cursor.claim
    if seen == "claim":
        state.at_claim = {name: getattr(state, name) for name in _ROLLED_BACK}
        state.at_claim["events"] = state.events
    elif isinstance(seen, TakeOver) and state.at_claim is not None:
        # The events since the claim before this one are abandoned: counted apart, and the
        # run's counts rolled back to the first claim, as the runner rebuilt the run.
        at = state.at_claim
        state.take_overs += 1
        state.taken_over_by = seen.taken_over_by
        state.abandoned_events += state.events - 1 - at["events"]
        state.abandoned_steps += state.steps - at["steps"]
        state.abandoned_blames += state.blames - at["blames"]
        for name in _ROLLED_BACK:
            setattr(state, name, at[name])
        state.at_claim = {**at, "events": state.events}


def _validation_recorded(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.validations_run += 1
    state.validations_failed += int(not p["passed"])


def _blame_assigned(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.blames += 1
    state.unresolved_blames += int(p["origin_step_id"] is None)
    state.harmful_outputs += int(p["harmful"])


def _repair_attempted(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.repairs += 1
    state.repairs_succeeded += int(p["succeeded"])


def _route_chosen(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.routes += 1


def _slo_alert_raised(state: WorkflowState, p: Mapping[str, Any]) -> None:
    state.slo_alerts += 1


def handler_for(kind: BuiltinKind) -> Handler:  # noqa: PLR0911, PLR0912 - one arm per kind
    """The fold's handler for a built-in kind; exhaustive, checked by mypy."""
    match kind:
        case "provenance_classified":
            return _provenance_classified
        case "budget_prechecked":
            return _budget_prechecked
        case "rag_hit":
            return _rag_hit
        case "rag_degraded":
            return _rag_degraded
        case "rag_miss":
            return _rag_miss
        case "prompt_built":
            return _prompt_built
        case "budget_precharged":
            return _budget_precharged
        case "leaf_invoked":
            return _leaf_invoked
        case "leaf_returned":
            return _leaf_returned
        case "budget_reconciled":
            return _budget_reconciled
        case "transform_built":
            return _transform_built
        case "plan_outcome_emitted":
            return _plan_outcome_emitted
        case "attempt_anchor_recorded":
            return _attempt_anchor_recorded
        case "retry_requested":
            return _retry_requested
        case "attempt_refused":
            return _attempt_refused
        case "plugin_resolved":
            return _plugin_resolved
        case "adapter_degraded":
            return _adapter_degraded
        case "trust_gate_passed":
            return _trust_gate_passed
        case "trust_gate_failed":
            return _trust_gate_failed
        case "cost_incurred":
            return _cost_incurred
        case "merge_outcome":
            return _merge_outcome
        case "solution_found":
            return _solution_found
        case "attempt_completed":
            return _attempt_completed
        case "step_recorded":
            return _step_recorded
        case "approval_recorded":
            return _approval_recorded
        case "blob_erased":
            return _blob_erased
        case "run_started":
            return _run_started
        case "run_finished":
            return _run_finished
        case "run_resumed":
            return _run_resumed
        case "gate_requested":
            return _gate_requested
        case "validation_recorded":
            return _validation_recorded
        case "blame_assigned":
            return _blame_assigned
        case "repair_attempted":
            return _repair_attempted
        case "route_chosen":
            return _route_chosen
        case "slo_alert_raised":
            return _slo_alert_raised
        case _:
            assert_never(kind)


# Built through handler_for, so a missing arm fails at import as well as in mypy. Dispatch by
# dict lookup: a 26-arm match compares strings one by one, on every event.
_DISPATCH: Final[dict[str, Handler]] = {k: handler_for(k) for k in get_args(BuiltinKind)}


def apply(state: WorkflowState, record: EventRecord) -> WorkflowState:
    """Fold one event record into ``state`` (in place) and return it.

    Pure in the sense that matters for replay: the result depends only on the state and the
    record; nothing is read from a clock, a file or the environment.
    """
    position: int = record["position"]
    if not state.events:
        state.workflow_id = record["workflow_id"]
        state.first_position = position
        state.started_at = record["timestamp"]
    state.events += 1
    state.last_position = position
    state.updated_at = record["timestamp"]
    handler = _DISPATCH.get(record["event_type"])
    if handler is None:
        state.other_events += 1
    else:
        handler(state, record["payload"])
    return state


def fold(events: Iterable[Event | EventRecord], *, workflow_id: str | None = None) -> WorkflowState:
    """A workflow's state from its events in log order.

    ``workflow_id`` filters the stream first (``fold(events.filter(workflow_id=X))``);
    without it every given event is folded. Typed events and record dicts are both accepted.
    """
    state = WorkflowState(workflow_id=workflow_id)
    for record in records_of(events):
        if workflow_id is None or record["workflow_id"] == workflow_id:
            apply(state, record)
    return state


def fold_all(events: Iterable[Event | EventRecord]) -> dict[str, WorkflowState]:
    """Every workflow's state, by workflow id; events without a workflow are left out."""
    states: dict[str, WorkflowState] = {}
    for record in records_of(events):
        wf = record["workflow_id"]
        if wf is None:
            continue
        state = states.get(wf)
        if state is None:
            state = states[wf] = WorkflowState(workflow_id=wf)
        apply(state, record)
    return states


# --- the fold materialised ------------------------------------------------------------------

WORKFLOW_STATE = Table(
    "workflow_state",
    (
        Column("workflow_id"),
        Column("status"),
        Column("events", "integer"),
        Column("last_position", "integer"),
        Column("cost_usd", "decimal"),
        Column("state", "json"),
    ),
    key=("workflow_id",),
    indexes=(("status",),),
)


class WorkflowStateProjection:
    """The fold kept per workflow in a table, so ``status`` needs no replay.

    The ``state`` column holds :meth:`WorkflowState.to_dict`; while a batch runs, the row
    holds the live :class:`WorkflowState` and the sink serialises it at commit.
    """

    name = "workflow_state"
    # 2: take-overs roll the abandoned counts back (and the state keeps the claim to roll
    # back to): a view built by version 1 counted a taken-over run's steps twice.
    version = 2
    tables = (WORKFLOW_STATE,)
    kinds: frozenset[str] | None = None

    def apply(self, record: EventRecord, rows: Rows) -> None:
        wf = record["workflow_id"]
        if wf is None:
            return
        row, state = self._load(rows, wf)
        apply(state, record)
        _sync(row, state)
        rows.put(WORKFLOW_STATE, (wf,), row)

    @staticmethod
    def _load(rows: Rows, wf: str) -> tuple[Row, WorkflowState]:
        row = rows.get(WORKFLOW_STATE, (wf,))
        if row is None:
            state = WorkflowState(workflow_id=wf)
            row = {"workflow_id": wf, "state": state}
        else:
            raw = row["state"]
            state = raw if isinstance(raw, WorkflowState) else WorkflowState.from_dict(raw)
            row["state"] = state
        return row, state

    def apply_many(self, records: Sequence[EventRecord], rows: Rows) -> None:
        """:meth:`apply` over a batch, as one loop: the same result, event by event.

        The body of :func:`apply` is inlined, and a workflow's row is looked up and its
        columns refreshed once per run of its events (a workflow's events mostly follow
        one another in the log) instead of once per event.
        """
        dispatch = _DISPATCH
        current: str | None = None
        row: Row = {}
        state: WorkflowState | None = None
        for record in records:
            wf = record["workflow_id"]
            if wf is None:
                continue
            if wf != current:
                if state is not None:
                    _sync(row, state)
                    rows.put(WORKFLOW_STATE, (current,), row)
                current = wf
                row, state = self._load(rows, wf)
            assert state is not None
            position = record["position"]
            if not state.events:
                state.workflow_id = wf
                state.first_position = position
                state.started_at = record["timestamp"]
            state.events += 1
            state.last_position = position
            state.updated_at = record["timestamp"]
            handler = dispatch.get(record["event_type"])
            if handler is None:
                state.other_events += 1
            else:
                handler(state, record["payload"])
        if state is not None:
            _sync(row, state)
            rows.put(WORKFLOW_STATE, (current,), row)


def _sync(row: Row, state: WorkflowState) -> None:
    """The row's plain columns, from its live state."""
    row["status"] = state.status
    row["events"] = state.events
    row["last_position"] = state.last_position
    row["cost_usd"] = state.cost_usd
