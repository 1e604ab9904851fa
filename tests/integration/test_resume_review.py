"""Review of resume, take-over, spent approvals and fencing (7bbaa93..96b7d27).

Each test pins one finding against a real SQLite ledger file. A crash is simulated as in
test_gate_owners_and_resume_claim: a ``KeyboardInterrupt`` raised inside the process (a
step function or an event write), after which a fresh Runner, with its own Ledger and
connection on the same file, carries on as another process would.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.integration.pipeline_kit import POLICY, Kit, diff, tpc
from tests.integration.test_gate_owners_and_resume_claim import payloads, runner_on
from tracebound.errors import ConfigError
from tracebound.events.catalog import (
    GateRequested,
    RepairAttempted,
    RunFinished,
    RunResumed,
    StepRecorded,
)
from tracebound.events.envelope import Payload
from tracebound.ids import RunId, StepId
from tracebound.pipeline.policy import Policy
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.runner import Runner, RunResult, approve
from tracebound.pipeline.runtime import Pipeline, StepContext
from tracebound.replay import replay_run
from tracebound.replay.rerun import rerun_run


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    return Kit(tmp_path)


def crashing(after: Callable[[Payload], bool]) -> type[Runner]:
    """A Runner whose process dies right after it recorded a matching event."""

    class Crashes(Runner):
        def _emit(self, run: Any, payload: Payload, **kw: Any) -> Any:
            recorded = super()._emit(run, payload, **kw)
            if after(payload):
                raise KeyboardInterrupt
            return recorded

    return Crashes


def decide(
    kit: Kit,
    run_id: str,
    step_id: str,
    who: str = "@alice",
    decision: Literal["approved", "rejected"] = "approved",
) -> None:
    runner = runner_on(kit, 50)
    with runner.ledger:
        approve(runner.ledger, RunId(run_id), StepId(step_id), who,
                codeowners=runner.codeowners, decision=decision)  # fmt: skip


def resume(kit: Kit, namespace: int, pipe: Pipeline, run_id: str, **kw: Any) -> RunResult:
    runner = runner_on(kit, namespace)
    with runner.ledger:
        return runner.resume(pipe, run_id, **kw)


def stream_of(kit: Kit, run_id: str) -> list[Payload]:
    runner = runner_on(kit, 99)
    with runner.ledger:
        return payloads(runner, run_id)


# -- 1. an approved gate whose artifact was never recorded ------------------------------


def test_a_later_gate_whose_artifact_was_never_recorded_is_not_applied_but_ended(
    kit: Kit,
) -> None:
    """A resumed run reaches a second gate (deploy) and its process dies between
    ``gate_requested`` and the gated ``step_recorded``: the ledger holds a gate but no
    artifact for it. The earlier ``run_finished(gated)`` makes the run look paused, so the
    gate can be approved and resumed; the resume then called deploy again and applied the
    fresh artifact, which no human ever saw, with the lifted scopes. Refusing that left the
    run waiting forever (approved, so not rejectable; no artifact, so not applicable): a
    take-over now ends it, applying nothing."""
    applied: list[str] = []
    deploys: list[str] = []

    def deploy(ctx: StepContext) -> dict[str, Any]:
        deploys.append(ctx.step_id)
        return tpc("Executor", diffs=[diff(".github/workflows/ci.yml")],
                   goal=f"deploy #{len(deploys)}")  # fmt: skip

    pipe = Pipeline("two-gates")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute", apply=lambda ctx, a: applied.append(ctx.step_id))(
        lambda ctx: tpc("Executor", diffs=[diff("requirements.txt")])
    )
    pipe.executor(name="deploy", apply=lambda ctx, a: applied.append(a.goal))(deploy)

    runner = runner_on(kit, 1)
    with runner.ledger:
        first = runner.run(pipe, {})
    assert (first.status, first.gated_step) == ("gated", "execute")
    decide(kit, first.run_id, "execute")
    dies = runner_on(
        kit, 2, cls=crashing(lambda p: isinstance(p, GateRequested) and p.step_id == "deploy")
    )
    with dies.ledger, pytest.raises(KeyboardInterrupt):
        dies.resume(pipe, first.run_id)
    assert deploys == ["deploy"] and applied == ["execute"]
    decide(kit, first.run_id, "deploy", "@team-platform")  # the gate is in the ledger

    # No run_finished after the gate: a plain resume takes the process for still writing.
    with pytest.raises(ConfigError, match="still writing, or died"):
        resume(kit, 3, pipe, first.run_id)
    # A gate is decided once: the approval stands, so no reject can end the run either.
    with pytest.raises(ConfigError, match="already approved"):
        decide(kit, first.run_id, "deploy", "@team-platform", decision="rejected")
    # Known dead, taken over: still no artifact the approval could cover, so the take-over
    # ends the run there (ADR 0015) rather than leave it waiting for nothing.
    ended = resume(kit, 4, pipe, first.run_id, take_over_by="@oncall")
    assert (ended.status, ended.failed_step) == ("failed", "deploy")
    assert ended.reason is not None and "never recorded" in ended.reason
    assert applied == ["execute"], "an artifact nobody approved was applied"
    assert deploys == ["deploy"]
    claim, end = stream_of(kit, first.run_id)[-2:]
    assert isinstance(claim, RunResumed) and claim.taken_over_by == "@oncall"
    assert isinstance(end, RunFinished) and (end.status, end.failed_step) == ("failed", "deploy")
    with pytest.raises(ConfigError, match="not waiting at a gate"):
        resume(kit, 5, pipe, first.run_id, take_over_by="@oncall")


# -- 2. take-over of a run paused at a repair's gate -------------------------------------


def repaired_pipeline(
    applied: list[tuple[str, int]], notes: list[tuple[str, ...]], *, dies_in_review: bool
) -> Pipeline:
    """plan -> execute (gated: requirements.txt) -> critique -> review. The Critic blames
    the executor once, so the repair re-runs it (execute~r1), gated again."""
    reviews: list[int] = []
    pipe = Pipeline("repaired", pipeline_type="remediation")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))

    @pipe.executor(name="execute", apply=lambda c, a: applied.append((c.step_id, c.attempt)))
    def execute(ctx: StepContext) -> dict[str, Any]:
        return tpc("Executor", diffs=[diff("requirements.txt")], goal=f"pin v{ctx.attempt}")

    @pipe.critic(name="critique")
    def critique(ctx: StepContext) -> dict[str, Any]:
        if ctx.attempt == 0:
            ctx.report("the pin breaks the build", origin="execute")
        else:
            notes.append(ctx.repair_notes)
        return tpc("Critic")

    @pipe.reviewer(name="review")
    def review(ctx: StepContext) -> dict[str, Any]:
        reviews.append(ctx.attempt)
        if dies_in_review and len(reviews) == 1:
            raise KeyboardInterrupt  # the claimant dies after finishing the repair
        return tpc("Reviewer")

    return pipe


def paused_at_repair_gate(kit: Kit, pipe: Pipeline) -> str:
    runner = runner_on(kit, 1)
    with runner.ledger:
        first = runner.run(pipe, {})
    decide(kit, first.run_id, "execute")
    second = resume(kit, 2, pipe, first.run_id)
    assert (second.status, second.gated_step) == ("gated", "execute~r1")
    decide(kit, first.run_id, "execute~r1")
    return first.run_id


def test_a_take_over_of_a_run_paused_at_a_repair_gate_after_the_claimant_repaired(
    kit: Kit,
) -> None:
    """The claimant of execute~r1 applied it, finished the repair (repair_attempted,
    succeeded) and died in a later step. _load took that repair_attempted, recorded after
    the claim, as the one the gate paused, so the take-over was refused ("no repair
    attempt the gate paused"): the run could never be finished."""
    applied: list[tuple[str, int]] = []
    pipe = repaired_pipeline(applied, [], dies_in_review=True)
    run_id = paused_at_repair_gate(kit, pipe)
    dying = runner_on(kit, 3)
    with dying.ledger, pytest.raises(KeyboardInterrupt):
        dying.resume(pipe, run_id)
    repairs = [p for p in stream_of(kit, run_id) if isinstance(p, RepairAttempted)]
    assert [r.succeeded for r in repairs] == [False, True]  # the second after the claim

    result = resume(kit, 4, pipe, run_id, take_over_by="@oncall")
    assert result.status == "completed", result.reason
    assert [a[0] for a in applied] == ["execute", "execute~r1", "execute~r1"]
    repairs = [p for p in stream_of(kit, run_id) if isinstance(p, RepairAttempted)]
    assert [(r.attempt, r.succeeded) for r in repairs][-1] == (1, True)


def test_the_apply_hook_of_a_resumed_repair_gate_sees_its_own_attempt(kit: Kit) -> None:
    """Resuming at execute~r1, the step id for the context came from _rerun_id (execute~r2)
    before _after_gate put the gated id back: the apply hook saw attempt 2."""
    applied: list[tuple[str, int]] = []
    pipe = repaired_pipeline(applied, [], dies_in_review=False)
    run_id = paused_at_repair_gate(kit, pipe)
    assert resume(kit, 3, pipe, run_id).status == "completed"
    assert applied == [("execute", 0), ("execute~r1", 1)]


def test_a_resumed_repair_hands_the_same_notes_on(kit: Kit) -> None:
    """Without a gate, critique~r1 is told why the first try was rejected. Resumed at the
    repair's gate, the failed outcome is rebuilt from the ledger, findings included (from
    its blames), so the notes are the same."""
    notes: list[tuple[str, ...]] = []
    pipe = repaired_pipeline([], notes, dies_in_review=False)
    run_id = paused_at_repair_gate(kit, pipe)
    assert resume(kit, 3, pipe, run_id).status == "completed"
    assert notes == [("the pin breaks the build",)]


def test_a_resumed_repair_that_runs_out_of_attempts_says_why(kit: Kit) -> None:
    pipe = Pipeline("never-good", pipeline_type="remediation", max_repairs=1)
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute")(lambda ctx: tpc("Executor", diffs=[diff("requirements.txt")]))

    @pipe.critic(name="critique")
    def critique(ctx: StepContext) -> dict[str, Any]:
        ctx.report("the pin breaks the build", origin="execute")
        return tpc("Critic")

    run_id = paused_at_repair_gate(kit, pipe)
    result = resume(kit, 3, pipe, run_id)
    assert (result.status, result.failed_step) == ("failed", "critique")
    (end,) = [p for p in stream_of(kit, run_id) if isinstance(p, RunFinished)][-1:]
    assert isinstance(end, RunFinished) and end.reason == "the pin breaks the build"


# -- 3. deciding a repair's gate ----------------------------------------------------------


def test_a_repair_gate_recorded_without_its_repair_attempt_can_still_be_rejected(
    kit: Kit,
) -> None:
    """The process died between the gated execute~r1 and its repair_attempted. Approving
    cannot finish a repair the ledger does not describe, but a human's rejection needs no
    repair: it ends the run. _paused_repair was asked first and refused the rejection.
    The process died before run_finished: a take-over, by name, is what continues it."""
    pipe = repaired_pipeline([], [], dies_in_review=False)
    runner = runner_on(kit, 1)
    with runner.ledger:
        first = runner.run(pipe, {})
    decide(kit, first.run_id, "execute")
    dies = runner_on(
        kit,
        2,
        cls=crashing(lambda p: isinstance(p, StepRecorded) and p.step_id == "execute~r1"),
    )
    with dies.ledger, pytest.raises(KeyboardInterrupt):
        dies.resume(pipe, first.run_id)
    decide(kit, first.run_id, "execute~r1", decision="rejected")
    with pytest.raises(ConfigError, match="still writing, or died"):
        resume(kit, 3, pipe, first.run_id)  # no run_finished after the gate
    result = resume(kit, 4, pipe, first.run_id, take_over_by="@oncall")
    assert (result.status, result.failed_step) == ("rejected", "execute~r1")


# -- 4. the apply hook of the step that failed, repaired ---------------------------------


def test_an_approved_step_whose_apply_failed_is_repaired_and_gated_again(kit: Kit) -> None:
    """The repair's origin is the failing step itself: execute's apply hook fails once,
    execute~r1 is gated, approved, applied; the run goes on after it."""
    applied: list[str] = []

    def apply(ctx: StepContext, artifact: Any) -> None:
        applied.append(ctx.step_id)
        if len(applied) == 1:
            raise RuntimeError("push rejected")

    pipe = Pipeline("apply-fails", pipeline_type="remediation")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute", apply=apply)(
        lambda ctx: tpc("Executor", diffs=[diff("requirements.txt")], goal=f"v{ctx.attempt}")
    )
    pipe.critic(name="critique")(lambda ctx: tpc("Critic"))
    run_id = paused_at_repair_gate(kit, pipe)
    result = resume(kit, 3, pipe, run_id)
    assert result.status == "completed"
    assert applied == ["execute", "execute~r1"]
    recorded = [(p.step_id, p.status) for p in stream_of(kit, run_id)
                if isinstance(p, StepRecorded)]  # fmt: skip
    assert recorded[-2:] == [("execute~r1", "success"), ("critique", "success")]


# -- 5. replay and rerun of runs with repair gates ----------------------------------------


def test_a_run_with_two_repair_gates_replays_and_reruns_identically(kit: Kit) -> None:
    applied: list[tuple[str, int]] = []
    pipe = repaired_pipeline(applied, [], dies_in_review=False)
    run_id = paused_at_repair_gate(kit, pipe)
    assert resume(kit, 3, pipe, run_id).status == "completed"
    runner = runner_on(kit, 60)
    with runner.ledger:
        assert replay_run(runner.ledger, runner.blobs, run_id).ok
        report = rerun_run(
            runner.ledger,
            runner.blobs,
            run_id,
            policy=Policy.from_dict(POLICY),
            redactor=Redactor(b"test-redaction-key-0123"),
            pipeline=pipe,
            codeowners=runner.codeowners,
            workspace=kit.root,
            scratch=kit.root,
        )
    assert report.identical, report.divergence
    assert report.rerun_status == "completed"
