"""The acceptance tests of the TPC + ARL record, and what surrounds them.

Real parts: a SQLite ledger file, a blob directory, subprocess test commands, and a fresh
Runner (a "restarted process") to resume a gated run.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.integration.pipeline_kit import SECRET, Kit, diff, tpc
from tracebound.contract import validate_tpc
from tracebound.errors import PolicyError, ValidationFailed
from tracebound.events import default_registry
from tracebound.events.catalog import (
    ApprovalRecorded,
    BlameAssigned,
    GateRequested,
    RepairAttempted,
    RouteChosen,
    RunFinished,
    SloAlertRaised,
    StepRecorded,
    ValidationRecorded,
)
from tracebound.events.envelope import Payload
from tracebound.ids import RunId, StepId
from tracebound.pipeline.codeowners import NotAnOwner
from tracebound.pipeline.metrics import compute_metrics
from tracebound.pipeline.runner import RunResult, approve, run_stream
from tracebound.pipeline.runtime import Pipeline, StepContext
from tracebound.pipeline.validations import MAX_OUTPUT, ValidationInput, ValidationRegistry


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    return Kit(tmp_path)


def payloads(kit: Kit, run: RunResult, kind: type[Payload]) -> list[Payload]:
    with kit.ledger() as ledger:
        return [
            e.payload
            for e in ledger.store.read_stream(run_stream(run.run_id))
            if isinstance(e.payload, kind)
        ]


def steps(kit: Kit, run: RunResult) -> list[StepRecorded]:
    return [p for p in payloads(kit, run, StepRecorded) if isinstance(p, StepRecorded)]


def decide(kit: Kit, run_id: str, step_id: str, who: str) -> None:
    """A human approves a gated step, from a process of their own (a fresh Runner)."""
    runner = kit.runner()
    approve(runner.ledger, RunId(run_id), StepId(step_id), who, codeowners=runner.codeowners)


def three_step(calls: list[int], fail_first: bool = True) -> Pipeline:
    pipe = Pipeline("remediate", pipeline_type="remediation", critical=True)

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        return tpc("Planner")

    @pipe.executor()
    def execute(ctx: StepContext) -> dict[str, object]:
        calls.append(ctx.attempt)
        if fail_first and ctx.attempt == 0:
            raise RuntimeError("injected executor error")
        return tpc("Executor", diffs=[diff("src/app.py")])

    @pipe.critic()
    def critique(ctx: StepContext) -> dict[str, object]:
        return tpc("Critic")

    return pipe


def test_injected_executor_error_is_blamed_on_executor_and_repaired(kit: Kit) -> None:
    calls: list[int] = []
    result = kit.runner().run(three_step(calls), {"advisory": "GHSA-test"})
    assert result.status == "completed"
    assert calls == [0, 1]
    recorded: dict[str, StepRecorded] = {s.step_id: s for s in steps(kit, result)}
    assert recorded["execute"].status == "error"
    assert recorded["execute"].error_origin == "execute"
    assert recorded["execute"].parent_step_id == "plan"
    assert recorded["execute~r1"].status == "success"
    (blame,) = payloads(kit, result, BlameAssigned)
    assert isinstance(blame, BlameAssigned)
    assert (blame.origin_step_id, blame.origin_role, blame.failed_role) == (
        "execute",
        "Executor",
        "Executor",
    )
    (repair,) = payloads(kit, result, RepairAttempted)
    assert isinstance(repair, RepairAttempted)
    assert (repair.origin_step_id, repair.repair_step_id, repair.succeeded) == (
        "execute",
        "execute~r1",
        True,
    )
    with kit.ledger() as ledger:
        metrics = compute_metrics(ledger.store.read_log())
        ledger.checkpoint()
        assert ledger.verify().ok
    executor = metrics.by_role["Executor"]
    assert (executor.failures, executor.repaired, executor.repair_rate) == (1, 1, Decimal(1))


def test_arl_entries_carry_every_field(kit: Kit) -> None:
    result = kit.runner().run(three_step([], fail_first=False), {})
    for entry in steps(kit, result):
        dumped = entry.model_dump(mode="json")
        for field in ("run_id", "step_id", "parent_step_id", "role", "timestamp_start",
                      "timestamp_end", "duration_ms", "artifact_hash", "payload_pointer",
                      "status", "error_origin", "cost_est", "latency_ms", "validations",
                      "storage", "scopes_granted"):  # fmt: skip
            assert field in dumped, field
        assert entry.artifact_hash.startswith("sha256:")
        assert entry.storage == "db"
        assert entry.scopes_granted == ("read",)  # read-only: no gate was lifted
    blobs = kit.runner().blobs
    for entry in steps(kit, result):
        assert blobs.exists(entry.artifact_hash)


def gated_pipeline(applied: list[tuple[str, ...]]) -> Pipeline:
    pipe = Pipeline("bump-pin", pipeline_type="remediation")

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        return tpc("Planner")

    @pipe.executor(apply=lambda ctx, artifact: applied.append(ctx.scopes))
    def execute(ctx: StepContext) -> dict[str, object]:
        return tpc("Executor", diffs=[diff("requirements.txt")])

    return pipe


def test_sensitive_write_stays_gated_until_approved(kit: Kit) -> None:
    applied: list[tuple[str, ...]] = []
    first = kit.runner().run(gated_pipeline(applied), {})
    assert (first.status, first.gated_step) == ("gated", "execute")
    assert applied == []  # nothing written while gated
    (gate,) = payloads(kit, first, GateRequested)
    assert isinstance(gate, GateRequested)
    assert gate.paths == ("requirements.txt",)
    assert gate.owners == ("@alice", "@bob")
    assert steps(kit, first)[-1].status == "gated"

    # A process restart: a brand-new Ledger and Runner over the same files.
    restarted = kit.runner()
    still = restarted.resume(gated_pipeline(applied), first.run_id)
    assert still.status == "gated" and applied == []

    with pytest.raises(NotAnOwner):
        approve(restarted.ledger, RunId(first.run_id), StepId("execute"), "mallory",
                codeowners=restarted.codeowners)  # fmt: skip
    approval = approve(restarted.ledger, RunId(first.run_id), StepId("execute"), "alice",
                       codeowners=restarted.codeowners)  # fmt: skip
    assert approval.approver == "alice" and approval.timestamp.tzinfo is not None

    done = kit.runner().resume(gated_pipeline(applied), first.run_id)
    assert done.status == "completed"
    assert applied == [("read", "write")]  # write scope only after the gate was lifted
    final = steps(kit, done)[-1]
    assert (final.step_id, final.status, final.scopes_granted) == (
        "execute",
        "success",
        ("read", "write"),
    )
    (recorded,) = payloads(kit, done, ApprovalRecorded)
    assert isinstance(recorded, ApprovalRecorded) and recorded.approver == "alice"


def test_rejected_gate_ends_the_run(kit: Kit) -> None:
    applied: list[tuple[str, ...]] = []
    first = kit.runner().run(gated_pipeline(applied), {})
    runner = kit.runner()
    with pytest.raises(PolicyError, match="rejecting needs a CODEOWNERS file"):
        approve(runner.ledger, RunId(first.run_id), StepId("execute"), "bob",
                codeowners=None, decision="rejected")  # fmt: skip
    approve(runner.ledger, RunId(first.run_id), StepId("execute"), "bob",
            codeowners=runner.codeowners, decision="rejected")  # fmt: skip
    done = runner.resume(gated_pipeline(applied), first.run_id)
    assert done.status == "rejected" and applied == []
    finished = payloads(kit, done, RunFinished)[-1]
    assert isinstance(finished, RunFinished) and finished.status == "rejected"


def test_invalid_artifact_aborts_with_field_and_reason(kit: Kit) -> None:
    pipe = Pipeline("bad")

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        artifact = tpc("Planner")
        artifact["handoff_envelope"] = {**artifact["handoff_envelope"], "constraints": []}
        return artifact

    bad_run = "0b6c2f8e-3f1a-4c2e-9d7b-5a1e2c3d4f5a"
    with pytest.raises(ValidationFailed) as info:
        kit.runner().run(pipe, {}, run_id=bad_run)
    assert info.value.field == "handoff_envelope.constraints"
    assert "empty" in info.value.reason
    run = RunResult(RunId(bad_run), "failed")
    (entry,) = steps(kit, run)
    assert (entry.status, entry.error_origin) == ("error", "plan")
    finished = payloads(kit, run, RunFinished)[-1]
    assert isinstance(finished, RunFinished) and finished.status == "failed"


def test_role_mismatch_is_a_contract_violation(kit: Kit) -> None:
    pipe = Pipeline("liar")

    @pipe.executor()
    def execute(ctx: StepContext) -> dict[str, object]:
        return tpc("Planner")

    with pytest.raises(ValidationFailed) as info:
        kit.runner().run(pipe, {})
    assert info.value.field == "role"


def test_executor_runs_real_test_commands(kit: Kit) -> None:
    registry = ValidationRegistry()
    script = kit.root / "check.py"
    script.write_text(
        "import pathlib, sys\n"
        f"print('token={SECRET}')\n"  # a secret in test output must not survive
        "sys.exit(0 if pathlib.Path('fixed').exists() else 3)\n"
    )
    registry.register_command("unit-tests", [sys.executable, str(script)], timeout=30)
    pipe = Pipeline("tests", critical=False)

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        env = tpc("Planner")["handoff_envelope"]
        return tpc("Planner", handoff_envelope={**env, "required_validations": ["unit-tests"]})

    @pipe.executor()
    def execute(ctx: StepContext) -> dict[str, object]:
        if ctx.attempt:  # the repair fixes the workspace
            (kit.root / "fixed").write_text("yes")
        return tpc("Executor", diffs=[diff("src/app.py")], tests_run=["unit-tests"])

    result = kit.runner(validations=registry).run(pipe, {})
    assert result.status == "completed"
    checks = [
        p for p in payloads(kit, result, ValidationRecorded) if isinstance(p, ValidationRecorded)
    ]
    assert [(c.step_id, c.passed, c.exit_code, c.check) for c in checks] == [
        ("execute", False, 3, "command"),
        ("execute~r1", True, 0, "command"),
    ]
    failed = steps(kit, result)[1]
    assert failed.validations.failed == ("unit-tests",)
    (blame,) = payloads(kit, result, BlameAssigned)
    assert isinstance(blame, BlameAssigned) and blame.harmful  # a failing test is a regression
    output = kit.runner().blobs.get(checks[0].output_digest or "")
    assert b"[REDACTED:" in output and SECRET.encode() not in output


def test_command_output_cut_to_its_last_64_kib_keeps_no_piece_of_a_cut_secret(kit: Kit) -> None:
    """The kept output was the last MAX_OUTPUT bytes, redacted after the cut: a secret the
    cut went through kept its tail, which no detector recognises on its own (the
    `password=` that named it was cut off), and that tail went to the blob store."""
    password = "correct-horse-battery-staple-9QxL"
    tail = password[3:]  # what the cut leaves of it
    script = kit.root / "noisy.py"
    script.write_text(
        "import sys\n"
        f"sys.stdout.write('password={password}\\n')\n"
        f"sys.stdout.write('.' * {MAX_OUTPUT - len(tail) - 1})\n"
    )
    registry = ValidationRegistry()
    registry.register_command("noisy", [sys.executable, str(script)], timeout=30)
    runner = kit.runner(validations=registry)
    inp = ValidationInput(validate_tpc(tpc("Executor")), kit.root, runner.redactor)
    outcome = registry.run("noisy", inp)
    assert outcome.passed and len(outcome.output) <= MAX_OUTPUT
    assert tail.encode() not in outcome.output and password[-8:].encode() not in outcome.output
    assert outcome.output.endswith(b"." * 1000)  # what follows the cut line is kept


def test_unregistered_validation_fails_closed(kit: Kit) -> None:
    pipe = Pipeline("closed", max_repairs=0)

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        env = tpc("Planner")["handoff_envelope"]
        return tpc("Planner", handoff_envelope={**env, "required_validations": ["fuzz-suite"]})

    @pipe.executor()
    def execute(ctx: StepContext) -> dict[str, object]:
        return tpc("Executor")

    result = kit.runner().run(pipe, {})
    assert result.status == "failed" and result.failed_step == "execute"
    (check,) = payloads(kit, result, ValidationRecorded)
    assert isinstance(check, ValidationRecorded)
    assert not check.passed and "fail closed" in (check.detail or "")


def test_command_timeout_is_a_failure(kit: Kit) -> None:
    registry = ValidationRegistry()
    registry.register_command("slow", [sys.executable, "-c", "import time; time.sleep(30)"],
                              timeout=0.5)  # fmt: skip
    pipe = Pipeline("slow", max_repairs=0)

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        env = tpc("Planner")["handoff_envelope"]
        return tpc("Planner", handoff_envelope={**env, "required_validations": ["slow"]})

    @pipe.executor()
    def execute(ctx: StepContext) -> dict[str, object]:
        return tpc("Executor")

    result = kit.runner(validations=registry).run(pipe, {})
    (check,) = payloads(kit, result, ValidationRecorded)
    assert isinstance(check, ValidationRecorded) and "timed out" in (check.detail or "")


def test_secrets_never_reach_disk(kit: Kit) -> None:
    pipe = Pipeline("leaky")

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        assert SECRET not in str(ctx.inputs)  # steps see redacted inputs too
        return tpc("Planner", outputs={"summary": f"use {SECRET} to push", "artifacts": []})

    result = kit.runner().run(pipe, {"token": SECRET, "note": "mail ops@example.com"})
    (entry,) = steps(kit, result)
    assert entry.redaction_reason is not None
    files = [p for p in kit.root.rglob("*") if p.is_file()]
    assert files
    for path in files:
        data = path.read_bytes()
        assert SECRET.encode() not in data, path
        assert b"ops@example.com" not in data, path


def _guarded_with_an_unclear_finding() -> Pipeline:
    """A critical pipeline whose Critic reports a finding it can blame on no step."""
    pipe = Pipeline("guarded", pipeline_type="remediation", critical=True)

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        return tpc("Planner")

    @pipe.executor()
    def execute(ctx: StepContext) -> dict[str, object]:
        return tpc("Executor", diffs=[diff("src/app.py")])

    @pipe.critic()
    def critique(ctx: StepContext) -> dict[str, object]:
        ctx.report("output looks wrong but the cause is unclear", unresolved=True)
        return tpc("Critic")

    return pipe


def test_critic_finding_without_origin_is_unresolved_and_alerts(kit: Kit) -> None:
    result = kit.runner().run(_guarded_with_an_unclear_finding(), {})
    assert result.status == "failed"
    (blame,) = payloads(kit, result, BlameAssigned)
    assert isinstance(blame, BlameAssigned)
    assert blame.origin_step_id is None and blame.detected_by == "critique"
    with kit.ledger() as ledger:
        metrics = compute_metrics(ledger.store.read_log())
    assert metrics.unresolved_origin("Executor") == 1
    alerts = [p for p in payloads(kit, result, SloAlertRaised) if isinstance(p, SloAlertRaised)]
    assert {a.metric for a in alerts} == {"harm_rate", "unresolved_origin"}


class _InventoryCounted(Payload):
    """Another service's event type in the same ledger, never registered in this process."""

    kind: Literal["inventory_counted"] = "inventory_counted"
    items: int


def test_a_critical_run_finishes_beside_a_type_this_process_does_not_know(kit: Kit) -> None:
    # The SLO check at the end of a critical run reads the whole ledger; a type registered
    # only in another service's code must be passed over, not fail the run's last step.
    assert "inventory_counted" not in default_registry()
    with kit.ledger() as ledger:
        ledger.record("stock", [_InventoryCounted(items=3)])
    result = kit.runner().run(_guarded_with_an_unclear_finding(), {})
    assert result.status == "failed"
    alerts = [p for p in payloads(kit, result, SloAlertRaised) if isinstance(p, SloAlertRaised)]
    assert {a.metric for a in alerts} == {"harm_rate", "unresolved_origin"}


def test_critic_constraint_violation_blames_executor_and_repair_is_rechecked(kit: Kit) -> None:
    pipe = Pipeline("scoped", critical=False)

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        return tpc("Planner")

    @pipe.executor()
    def execute(ctx: StepContext) -> dict[str, object]:
        path = "docs/readme.md" if ctx.attempt == 0 else "src/app.py"
        return tpc("Executor", diffs=[diff(path)])

    @pipe.critic()
    def critique(ctx: StepContext) -> dict[str, object]:
        return tpc("Critic")

    result = kit.runner().run(pipe, {})
    assert result.status == "completed"
    critic_entry = next(s for s in steps(kit, result) if s.step_id == "critique")
    assert critic_entry.error_origin == "execute"
    (blame,) = payloads(kit, result, BlameAssigned)
    assert isinstance(blame, BlameAssigned) and "docs/readme.md" in blame.reason
    assert [s.step_id for s in steps(kit, result)][-2:] == ["execute~r1", "critique~r1"]


def test_async_steps_and_router(kit: Kit) -> None:
    pipe = Pipeline("async")

    @pipe.planner()
    async def plan(ctx: StepContext) -> dict[str, object]:
        await asyncio.sleep(0)
        return tpc("Planner")

    @pipe.router()
    def route(ctx: StepContext) -> dict[str, object]:
        metrics = ctx.metrics()
        slow = metrics.by_role["Planner"].mean_latency_ms or Decimal(0)
        ctx.choose("fast-executor", ["fast-executor", "careful-executor"],
                   f"cost SLO threatened; planner mean latency {slow} ms")  # fmt: skip
        return tpc("Router")

    result = asyncio.run(kit.runner().arun(pipe, {}))
    assert result.status == "completed"
    (choice,) = payloads(kit, result, RouteChosen)
    assert isinstance(choice, RouteChosen) and choice.chosen == "fast-executor"


def blamed_pipeline(
    apply: Callable[[StepContext, Any], None],
    *,
    origin: str = "execute",
    review: bool = False,
    planned: list[int] | None = None,
) -> Pipeline:
    """plan, then execute (gated: it touches requirements.txt; ``apply`` is its hook), then
    critique, which on its first try blames ``origin``; with ``review``, a Reviewer that on
    its first try blames execute too. Every execution's artifact is its own (the goal names
    the step id), and ``planned`` collects the planner's attempts."""
    pipe = Pipeline("blamed", pipeline_type="remediation")

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        if planned is not None:
            planned.append(ctx.attempt)
        return tpc("Planner", goal=f"plan {ctx.step_id}")

    @pipe.executor(apply=apply)
    def execute(ctx: StepContext) -> dict[str, object]:
        return tpc("Executor", diffs=[diff("requirements.txt")], goal=f"pin {ctx.step_id}")

    @pipe.critic()
    def critique(ctx: StepContext) -> dict[str, object]:
        if ctx.attempt == 0:
            ctx.report(f"{origin} got the advisory wrong", origin=origin)
        return tpc("Critic")

    if review:

        @pipe.reviewer(name="review")
        def review_step(ctx: StepContext) -> dict[str, object]:
            if ctx.attempt == 0:
                ctx.report("the pin is not the advisory's fix", origin="execute")
            return tpc("Reviewer")

    return pipe


def test_a_repair_of_an_approved_step_is_gated_again(kit: Kit) -> None:
    """The human approved one artifact. A repair that re-runs the approved step produces
    another one: it must not be applied with the lifted scopes on the first approval."""
    applied: list[tuple[str, int]] = []
    pipe = blamed_pipeline(lambda ctx, artifact: applied.append((ctx.step_id, len(ctx.scopes))))
    first = kit.runner().run(pipe, {})
    assert (first.status, first.gated_step) == ("gated", "execute")
    decide(kit, first.run_id, "execute", "alice")
    second = kit.runner().resume(pipe, first.run_id)
    # The approved artifact was applied once; the repair's new artifact waits for a human.
    assert applied == [("execute", 2)]
    assert (second.status, second.gated_step) == ("gated", "execute~r1")
    gates = [p for p in payloads(kit, second, GateRequested) if isinstance(p, GateRequested)]
    assert [g.step_id for g in gates] == ["execute", "execute~r1"]
    repaired = next(s for s in steps(kit, second) if s.step_id == "execute~r1")
    assert (repaired.status, repaired.scopes_granted) == ("gated", ("read",))

    decide(kit, first.run_id, "execute~r1", "alice")
    done = kit.runner().resume(pipe, first.run_id)
    assert done.status == "completed"
    assert applied == [("execute", 2), ("execute~r1", 2)]
    # The resume finished the paused repair (the Critic re-checked it) and went no further.
    assert [s.step_id for s in steps(kit, done)] == [
        "plan", "execute", "execute", "critique", "execute~r1", "execute~r1", "critique~r1",
    ]  # fmt: skip
    repairs = [p for p in payloads(kit, done, RepairAttempted) if isinstance(p, RepairAttempted)]
    assert [(r.repair_step_id, r.attempt, r.succeeded) for r in repairs] == [
        ("execute~r1", 1, False),
        ("execute~r1", 1, True),
    ]


def test_a_resumed_repair_goes_on_from_its_gate_not_from_its_origin(kit: Kit) -> None:
    """The Critic blames the planner: the repair re-runs plan~r1, then execute~r1, which is
    gated. The resume applies execute~r1 and re-checks it; plan~r1 does not run again."""
    planned: list[int] = []
    applied: list[str] = []
    pipe = blamed_pipeline(
        lambda ctx, artifact: applied.append(ctx.step_id), origin="plan", planned=planned
    )
    first = kit.runner().run(pipe, {})
    decide(kit, first.run_id, "execute", "alice")
    second = kit.runner().resume(pipe, first.run_id)
    assert (second.status, second.gated_step) == ("gated", "execute~r1")
    assert planned == [0, 1] and applied == ["execute"]
    decide(kit, first.run_id, "execute~r1", "bob")
    done = kit.runner().resume(pipe, first.run_id)
    assert done.status == "completed"
    assert planned == [0, 1] and applied == ["execute", "execute~r1"]
    repairs = [p for p in payloads(kit, done, RepairAttempted) if isinstance(p, RepairAttempted)]
    assert [(r.origin_step_id, r.repair_step_id, r.succeeded) for r in repairs] == [
        ("plan", "plan~r1", False),
        ("plan", "plan~r1", True),
    ]


def test_two_repairs_of_one_gated_step_get_distinct_ids_and_approvals(kit: Kit) -> None:
    """The Critic and later the Reviewer each blame the gated executor: two repair loops
    re-run it, each re-run is gated under its own id, and each id is approved once."""
    applied: list[str] = []
    pipe = blamed_pipeline(lambda ctx, artifact: applied.append(ctx.step_id), review=True)
    result = kit.runner().run(pipe, {})
    gated = []
    while result.status == "gated":
        assert result.gated_step is not None
        gated.append(result.gated_step)
        decide(kit, result.run_id, result.gated_step, "alice")
        result = kit.runner().resume(pipe, result.run_id)
    assert result.status == "completed"
    assert gated == ["execute", "execute~r1", "execute~r2"]
    assert applied == gated
    ids = [s.step_id for s in steps(kit, result) if s.status != "gated"]
    assert len(ids) == len(set(ids)), ids  # every executed step has its own id
    assert ids[-3:] == ["execute~r2", "critique~r2", "review~r1"]


def test_a_step_that_failed_its_required_validations_is_not_gated_for_approval(
    kit: Kit,
) -> None:
    """A human is not asked to approve an artifact its own required checks refused: the
    step is an error (and repaired), never gated and then applied as a success."""
    applied: list[str] = []
    pipe = Pipeline("gated-but-red", max_repairs=0)

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        env = tpc("Planner")["handoff_envelope"]
        return tpc("Planner", handoff_envelope={**env, "required_validations": ["fuzz-suite"]})

    @pipe.executor(apply=lambda ctx, artifact: applied.append(ctx.step_id))
    def execute(ctx: StepContext) -> dict[str, object]:
        return tpc("Executor", diffs=[diff("requirements.txt")])

    result = kit.runner().run(pipe, {})
    assert (result.status, result.failed_step) == ("failed", "execute")
    assert payloads(kit, result, GateRequested) == [] and applied == []
    assert [s.status for s in steps(kit, result) if s.step_id == "execute"] == ["error"]
